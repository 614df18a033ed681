#include "head/job_manager.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/files.h"
#include "common/logging.h"
#include "head/table_storage.h"
#include "scheduling/resource_set.h"

namespace shoal {
namespace {

constexpr int64_t kMaxLogChunk = 1 << 20;  // bytes per GET_JOB_LOGS answer
constexpr int64_t kMaxLogWaitMs = 30000;
constexpr int64_t kAgentCallTimeoutMs = 10000;
constexpr char kSubmittedJobsTable[] = "submitted_jobs";
// Rows "<submission id>/<offset, 20 digits>": a job's output in order.
constexpr char kJobOutputTable[] = "job_output";

std::string OutputKey(const std::string& id, int64_t offset) {
  std::string digits = absl::StrCat(offset);
  return absl::StrCat(id, "/", std::string(20 - digits.size(), '0'), digits);
}

const std::string& StateName(proto::JobInfo::State state) {
  return proto::JobInfo::State_Name(state);
}

absl::Status NoSuchJob(const std::string& id) {
  return absl::NotFoundError(absl::StrCat("no job ", id, " on this cluster"));
}

}  // namespace

JobManager::JobManager(JobManagerOptions options)
    : options_(std::move(options)) {}

JobManager::~JobManager() { *alive_ = false; }

void JobManager::After(int64_t ms, std::function<void()> fn) {
  std::weak_ptr<bool> alive = alive_;
  options_.run_after(ms, [alive, fn = std::move(fn)] {
    if (!alive.expired() && *alive.lock()) fn();
  });
}

std::string JobManager::LogPath(const std::string& id) const {
  return absl::StrCat(options_.log_dir, "/job-", id, ".log");
}

absl::Status JobManager::Persist(const JobTable::Job& job) {
  if (options_.storage == nullptr) return absl::OkStatus();
  absl::Status st = options_.storage->Put(kSubmittedJobsTable,
                                          job.info.spec().submission_id(),
                                          job.info.SerializeAsString());
  if (!st.ok()) SHOAL_LOG(ERROR) << "cannot store a job's record: " << st;
  return st;
}

void JobManager::Restore() {
  if (options_.storage == nullptr) return;
  for (const JobNode& n : options_.alive_nodes()) {
    node_addresses_[n.node_id] = n.address;
  }
  const std::map<std::string, std::string> output =
      OutputInStorage() ? options_.storage->Scan(kJobOutputTable)
                        : std::map<std::string, std::string>();
  for (const auto& [id, bytes] : options_.storage->Scan(kSubmittedJobsTable)) {
    if (!table_.Restore(id, bytes)) continue;
    JobTable::Job& job = *table_.Find(id);
    struct stat st;
    if (stat(LogPath(id).c_str(), &st) == 0) job.info.set_log_bytes(st.st_size);
    if (OutputInStorage()) RestoreLog(job, output);
    if (JobTable::Finished(job.info)) continue;
    if (job.info.node_id().empty()) {
      PlaceLater(id);
    } else if (job.info.state() == proto::JobInfo::PENDING) {
      // Placed by the head before this one, never reported started: its
      // START_JOB may have died with that head.
      After(options_.place_retry_ms, [this, id = id] { StartAgain(id); });
    }
  }
}

void JobManager::StartAgain(const std::string& id) {
  JobTable::Job* job = table_.Find(id);
  if (job == nullptr || JobTable::Finished(job->info) ||
      job->info.node_id().empty() ||
      job->info.state() != proto::JobInfo::PENDING) {
    return;
  }
  for (const JobNode& n : options_.alive_nodes()) {
    node_addresses_[n.node_id] = n.address;
  }
  AgentCall(job->info.node_id(), proto::START_JOB, job->info.spec(),
            [this, id](absl::StatusOr<proto::Empty> r) {
              // An agent that got it the first time says so: it runs.
              if (r.ok() || absl::IsAlreadyExists(r.status())) return;
              if (absl::IsUnavailable(r.status())) {
                // The node has not come back yet; if it never does, its
                // death ends or moves the job and this stops.
                After(options_.place_retry_ms, [this, id] { StartAgain(id); });
                return;
              }
              Started(id, r);
            });
}

absl::StatusOr<proto::JobInfo> JobManager::Submit(const proto::JobSpec& spec) {
  absl::StatusOr<JobTable::Job*> submitted =
      table_.Submit(spec, options_.head_address, NowMs());
  if (!submitted.ok()) return submitted.status();
  JobTable::Job& job = **submitted;
  const std::string id = job.info.spec().submission_id();
  // Kept before it is acknowledged.
  if (absl::Status kept = Persist(job); !kept.ok()) {
    table_.Erase(id);
    return kept;
  }
  absl::Status log = WriteFile(LogPath(id), "");
  if (!log.ok()) {
    Finish(job, proto::JobInfo::FAILED, -1,
           absl::StrCat("cannot make its log: ", log.message()));
    return job.info;
  }
  Place(id);
  return table_.Find(id)->info;
}

absl::StatusOr<proto::JobInfo> JobManager::Get(const std::string& id) {
  const JobTable::Job* job = table_.Find(id);
  if (job == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "no job ", id, " on this cluster (shoal job list shows them)"));
  }
  return job->info;
}

absl::Status JobManager::Delete(const std::string& id) {
  if (absl::Status st = table_.CheckDeletable(id); !st.ok()) return st;
  unlink(LogPath(id).c_str());
  if (options_.storage != nullptr) {
    options_.storage->Delete(kSubmittedJobsTable, id).IgnoreError();
    if (OutputInStorage()) ForgetOutput(id);
  }
  table_.Erase(id);
  readers_.erase(id);
  return absl::OkStatus();
}

void JobManager::PlaceLater(const std::string& id) {
  After(options_.place_retry_ms, [this, id] { Place(id); });
}

void JobManager::Place(const std::string& id) {
  JobTable::Job* job = table_.Find(id);
  if (job == nullptr || JobTable::Finished(job->info) ||
      !job->info.node_id().empty()) {
    return;
  }
  if (job->stop_requested) {
    Finish(*job, proto::JobInfo::STOPPED, -1,
           "stopped by shoal job stop before it started");
    return;
  }
  const proto::JobSpec& spec = job->info.spec();
  std::vector<JobNode> nodes = options_.alive_nodes();
  const JobNodeChoice choice =
      ChooseJobNode(spec.entrypoint_resources(), nodes);
  const std::string need =
      ResourceSet::FromProto(spec.entrypoint_resources()).DebugString();
  if (!choice.fits) {
    Finish(*job, proto::JobInfo::FAILED, -1,
           absl::StrCat("no alive node has the entrypoint's resources (", need,
                        "): start a node that has them, or ask for less"));
    return;
  }
  if (choice.node == nullptr) {
    // Held by tasks or other jobs: it waits its turn.
    job->info.set_message(
        absl::StrCat("waiting for the entrypoint's resources (", need,
                     ") to be free on a node"));
    PlaceLater(id);
    return;
  }
  job->info.clear_message();
  job->info.set_node_id(choice.node->node_id);
  node_addresses_[choice.node->node_id] = choice.node->address;
  Persist(*job).IgnoreError();
  SHOAL_LOG(INFO) << "job " << id << ": starting on node "
                  << choice.node->node_id << ": " << spec.entrypoint();
  AgentCall(choice.node->node_id, proto::START_JOB, spec,
            [this, id](absl::StatusOr<proto::Empty> r) { Started(id, r); });
}

void JobManager::Started(const std::string& id,
                         absl::StatusOr<proto::Empty> reply) {
  JobTable::Job* job = table_.Find(id);
  if (job == nullptr || reply.ok() || JobTable::Finished(job->info)) return;
  if (reply.status().code() == absl::StatusCode::kResourceExhausted) {
    // The node's resources were taken before the job came: another turn.
    job->info.clear_node_id();
    job->info.set_message(std::string(reply.status().message()));
    PlaceLater(id);
    return;
  }
  Finish(*job, proto::JobInfo::FAILED, -1,
         absl::StrCat("node ", job->info.node_id(),
                      " could not start it: ", reply.status().message()));
}

absl::Status JobManager::Event(const proto::JobEvent& event) {
  JobTable::Job* job = table_.Find(event.submission_id());
  if (job == nullptr) return absl::OkStatus();
  const std::string_view output = JobTable::NewOutput(*job, event);
  if (!output.empty()) {
    if (OutputInStorage()) {
      absl::Status kept = KeepOutput(*job, output);
      if (!kept.ok()) return kept;
    }
    AppendLog(*job, output);
  }
  const bool was_finished = JobTable::Finished(job->info);
  table_.Apply(*job, event, NowMs());
  if (!event.error().empty() ||
      (!was_finished && JobTable::Finished(job->info))) {
    SayEnded(*job);
  }
  WakeLogReaders(event.submission_id());
  // A report that changes the job's state is taken once that state is kept:
  // the agent sends one that was not taken again, and it is kept then.
  if (event.started() || event.exited() || !event.error().empty()) {
    return Persist(*job);
  }
  return absl::OkStatus();
}

void JobManager::AppendLog(JobTable::Job& job, std::string_view output) {
  int fd = open(LogPath(job.info.spec().submission_id()).c_str(),
                O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) {
    size_t done = 0;
    while (done < output.size()) {
      ssize_t n = write(fd, output.data() + done, output.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    close(fd);
  }
  job.info.set_log_bytes(job.info.log_bytes() +
                         static_cast<int64_t>(output.size()));
}

bool JobManager::OutputInStorage() const {
  return options_.storage != nullptr &&
         options_.storage->OutlivesSessionFolder();
}

absl::Status JobManager::KeepOutput(const JobTable::Job& job,
                                    std::string_view output) {
  absl::Status st = options_.storage->Put(
      kJobOutputTable,
      OutputKey(job.info.spec().submission_id(), job.info.log_bytes()),
      std::string(output));
  if (!st.ok()) {
    SHOAL_LOG(ERROR) << "cannot store the output of job "
                     << job.info.spec().submission_id() << ": " << st;
  }
  return st;
}

void JobManager::RestoreLog(JobTable::Job& job,
                            const std::map<std::string, std::string>& output) {
  const std::string& id = job.info.spec().submission_id();
  const std::string prefix = id + "/";
  std::string log;
  for (auto it = output.lower_bound(prefix);
       it != output.end() && it->first.compare(0, prefix.size(), prefix) == 0;
       ++it) {
    log += it->second;
  }
  if (static_cast<int64_t>(log.size()) <= job.info.log_bytes()) return;
  absl::Status written = WriteFile(LogPath(id), log);
  if (!written.ok()) {
    SHOAL_LOG(ERROR) << "cannot write the log of job " << id << ": " << written;
    return;
  }
  job.info.set_log_bytes(static_cast<int64_t>(log.size()));
}

void JobManager::ForgetOutput(const std::string& id) {
  const std::string prefix = id + "/";
  for (const auto& [key, piece] : options_.storage->Scan(kJobOutputTable)) {
    if (key.compare(0, prefix.size(), prefix) == 0) {
      options_.storage->Delete(kJobOutputTable, key).IgnoreError();
    }
  }
}

void JobManager::Finish(JobTable::Job& job, proto::JobInfo::State state,
                        int exit_code, const std::string& message) {
  table_.Finish(job, state, exit_code, message, NowMs());
  Persist(job).IgnoreError();
  SayEnded(job);
  WakeLogReaders(job.info.spec().submission_id());
}

void JobManager::SayEnded(const JobTable::Job& job) {
  SHOAL_LOG(INFO) << "job " << job.info.spec().submission_id() << ": "
                  << StateName(job.info.state()) << ": " << job.info.message();
}

absl::StatusOr<proto::JobInfo> JobManager::Stop(const std::string& id) {
  JobTable::Job* job = table_.Find(id);
  if (job == nullptr) return NoSuchJob(id);
  if (JobTable::Finished(job->info)) return job->info;
  job->stop_requested = true;
  if (job->info.node_id().empty()) {
    // Still waiting for a node: it never starts.
    Place(id);
    return job->info;
  }
  proto::JobRef ref;
  ref.set_submission_id(id);
  AgentCall(job->info.node_id(), proto::SIGNAL_JOB, ref,
            [this, id](absl::StatusOr<proto::Empty> r) {
              JobTable::Job* job = table_.Find(id);
              if (job == nullptr || r.ok() || JobTable::Finished(job->info)) {
                return;
              }
              Finish(*job, proto::JobInfo::STOPPED, -1,
                     absl::StrCat("stopped; its node did not answer: ",
                                  r.status().message()));
            });
  return job->info;
}

void JobManager::Logs(const proto::JobLogsRequest& request, LogsDone done) {
  const std::string id = request.submission_id();
  const JobTable::Job* job = table_.Find(id);
  if (job == nullptr) return done(NoSuchJob(id));
  if (AnswerLogs(*job, request, done, request.wait_ms() <= 0)) return;
  // Nothing new yet: answered when output comes, the job ends, or the wait
  // is over.
  const uint64_t ticket = ++next_ticket_;
  readers_[id].push_back({ticket, request, std::move(done)});
  After(std::min(request.wait_ms(), kMaxLogWaitMs), [this, id, ticket] {
    const JobTable::Job* job = table_.Find(id);
    auto waiting = readers_.find(id);
    if (job == nullptr || waiting == readers_.end()) return;
    auto& readers = waiting->second;
    for (auto it = readers.begin(); it != readers.end(); ++it) {
      if (it->ticket != ticket) continue;
      AnswerLogs(*job, it->request, it->done, true);
      readers.erase(it);
      return;
    }
  });
}

bool JobManager::AnswerLogs(const JobTable::Job& job,
                            const proto::JobLogsRequest& request,
                            const LogsDone& done, bool must_answer) {
  int64_t offset = std::max<int64_t>(0, request.offset());
  proto::JobLogs logs;
  if (offset < job.info.log_bytes()) {
    int fd = open(LogPath(job.info.spec().submission_id()).c_str(),
                  O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      std::string data(static_cast<size_t>(std::min(
                           kMaxLogChunk, job.info.log_bytes() - offset)),
                       '\0');
      ssize_t n = pread(fd, data.data(), data.size(), offset);
      close(fd);
      if (n > 0) {
        data.resize(static_cast<size_t>(n));
        offset += n;
        logs.set_data(std::move(data));
      }
    }
  }
  logs.set_next_offset(offset);
  logs.set_finished(JobTable::Finished(job.info) &&
                    offset >= job.info.log_bytes());
  if (logs.data().empty() && !logs.finished() && !must_answer) return false;
  done(std::move(logs));
  return true;
}

void JobManager::WakeLogReaders(const std::string& id) {
  auto it = readers_.find(id);
  const JobTable::Job* job = table_.Find(id);
  if (it == readers_.end() || job == nullptr) return;
  std::vector<Reader> waiting;
  waiting.swap(it->second);
  for (Reader& reader : waiting) {
    if (!AnswerLogs(*job, reader.request, reader.done, false)) {
      it->second.push_back(std::move(reader));
    }
  }
}

void JobManager::NodeDied(const std::string& node_id, const std::string& why) {
  for (const std::string& id : table_.NodeDied(node_id, why, NowMs())) {
    const JobTable::Job& job = *table_.Find(id);
    Persist(job).IgnoreError();
    SayEnded(job);
    WakeLogReaders(id);
  }
}

void JobManager::AgentCall(
    const std::string& node_id, int method,
    const google::protobuf::MessageLite& request,
    std::function<void(absl::StatusOr<proto::Empty>)> done) {
  auto it = node_addresses_.find(node_id);
  if (it == node_addresses_.end()) {
    return done(absl::UnavailableError("its node is not known"));
  }
  std::weak_ptr<bool> alive = alive_;
  CallAgent<proto::Empty>(
      options_.call_agent, it->second, method, request,
      [alive, done = std::move(done)](absl::StatusOr<proto::Empty> r) {
        if (alive.expired() || !*alive.lock()) return;
        done(std::move(r));
      },
      kAgentCallTimeoutMs);
}

}  // namespace shoal
