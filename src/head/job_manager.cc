#include "head/job_manager.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/utf8.h"
#include "common/util.h"
#include "scheduling/resource_set.h"

namespace shoal {
namespace {

constexpr int64_t kMaxLogChunk = 1 << 20;  // bytes per GET_JOB_LOGS answer
constexpr int64_t kMaxLogWaitMs = 30000;
// How often a job that waits for its entrypoint's resources looks again.
constexpr int64_t kPlaceRetryMs = 500;
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

bool Finished(const proto::JobInfo& info) {
  return info.state() == proto::JobInfo::SUCCEEDED ||
         info.state() == proto::JobInfo::FAILED ||
         info.state() == proto::JobInfo::STOPPED;
}

// Submission ids name log files: letters, digits, '-', '_' and '.'.
bool ValidId(const std::string& id) {
  if (id.empty() || id.size() > 128 || id[0] == '.') return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ||
           c == '.';
  });
}

}  // namespace

JobManager::JobManager(rpc::EventLoop* loop, JobManagerOptions options)
    : loop_(loop), options_(std::move(options)) {}

JobManager::~JobManager() { *alive_ = false; }

absl::Status JobManager::Persist(const Entry& e) {
  if (options_.storage == nullptr) return absl::OkStatus();
  absl::Status st =
      options_.storage->Put(kSubmittedJobsTable, e.info.spec().submission_id(),
                            e.info.SerializeAsString());
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
    Entry& e = jobs_[id];
    if (!e.info.ParseFromString(bytes)) {
      jobs_.erase(id);
      continue;
    }
    e.log_path = absl::StrCat(options_.log_dir, "/job-", id, ".log");
    struct stat st;
    if (stat(e.log_path.c_str(), &st) == 0) e.info.set_log_bytes(st.st_size);
    if (OutputInStorage()) RestoreLog(e, output);
    if (!Finished(e.info) && e.info.node_id().empty()) {
      std::weak_ptr<bool> alive = alive_;
      loop_->RunAfter(kPlaceRetryMs, [this, alive, id = id] {
        if (!alive.expired() && *alive.lock()) Place(id);
      });
    }
  }
}

void JobManager::RegisterHandlers(rpc::Server* s) {
  rpc::RegisterProto<proto::JobSpec>(
      s, proto::SUBMIT_JOB,
      [this](const auto& r, rpc::Responder resp) { Submit(r, resp); });
  rpc::RegisterProto<proto::JobRef>(
      s, proto::GET_JOB, [this](const auto& r, rpc::Responder resp) {
        Entry* e = Find(r.submission_id());
        if (e == nullptr) {
          return resp.Error(absl::NotFoundError(
              absl::StrCat("no job ", r.submission_id(),
                           " on this cluster (shoal job list shows them)")));
        }
        resp.Reply(e->info);
      });
  rpc::RegisterProto<proto::Empty>(
      s, proto::LIST_JOBS, [this](const auto&, rpc::Responder resp) {
        proto::JobList list;
        for (const auto& [id, e] : jobs_) *list.add_jobs() = e.info;
        std::sort(list.mutable_jobs()->begin(), list.mutable_jobs()->end(),
                  [](const proto::JobInfo& a, const proto::JobInfo& b) {
                    return a.start_time_ms() < b.start_time_ms();
                  });
        resp.Reply(list);
      });
  rpc::RegisterProto<proto::JobRef>(s, proto::STOP_JOB,
                                    [this](const auto& r, rpc::Responder resp) {
                                      Stop(r.submission_id(), resp);
                                    });
  rpc::RegisterProto<proto::JobRef>(
      s, proto::DELETE_JOB, [this](const auto& r, rpc::Responder resp) {
        Entry* e = Find(r.submission_id());
        if (e == nullptr) {
          return resp.Error(absl::NotFoundError(
              absl::StrCat("no job ", r.submission_id(), " on this cluster")));
        }
        if (!Finished(e->info)) {
          return resp.Error(absl::FailedPreconditionError(absl::StrCat(
              "job ", r.submission_id(), " is ", StateName(e->info.state()),
              ": stop it first (shoal job stop)")));
        }
        unlink(e->log_path.c_str());
        if (options_.storage != nullptr) {
          options_.storage->Delete(kSubmittedJobsTable, r.submission_id())
              .IgnoreError();
          if (OutputInStorage()) ForgetOutput(r.submission_id());
        }
        jobs_.erase(r.submission_id());
        resp.Reply(proto::Empty());
      });
  rpc::RegisterProto<proto::JobLogsRequest>(
      s, proto::GET_JOB_LOGS,
      [this](const auto& r, rpc::Responder resp) { Logs(r, resp); });
  rpc::RegisterProto<proto::JobEvent>(
      s, proto::JOB_EVENT, [this](const auto& r, rpc::Responder resp) {
        absl::Status kept = Event(r);
        if (!kept.ok()) return resp.Error(kept);
        resp.Reply(proto::Empty());
      });
}

JobManager::Entry* JobManager::Find(const std::string& id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

void JobManager::Submit(const proto::JobSpec& request,
                        const rpc::Responder& responder) {
  proto::JobSpec spec = request;
  if (spec.entrypoint().empty()) {
    return responder.Error(absl::InvalidArgumentError(
        "a job needs an entrypoint: shoal job submit -- CMD ARGS"));
  }
  // A shell reads a command only up to its first NUL: the job would run
  // less than it says it runs.
  if (spec.entrypoint().find('\0') != std::string::npos) {
    return responder.Error(absl::InvalidArgumentError(
        "the entrypoint holds a NUL byte, which no command line can: remove "
        "it"));
  }
  for (const auto& [name, value] : spec.env()) {
    if (value.find('\0') != std::string::npos) {
      return responder.Error(absl::InvalidArgumentError(absl::StrCat(
          "the value of env var ", name,
          " holds a NUL byte, which no environment can: remove it")));
    }
  }
  if (spec.submission_id().empty()) {
    do {
      spec.set_submission_id("job_" + RandomHex(8));
    } while (jobs_.count(spec.submission_id()));
  }
  const std::string id = spec.submission_id();
  if (!ValidId(id)) {
    return responder.Error(absl::InvalidArgumentError(absl::StrCat(
        "submission id \"", id,
        "\" is not allowed: use letters, digits, '-', '_' and '.'")));
  }
  if (const Entry* e = Find(id)) {
    return responder.Error(absl::AlreadyExistsError(absl::StrCat(
        "job ", id, " exists already (", StateName(e->info.state()),
        "): give another --submission-id")));
  }
  spec.set_head_address(options_.head_address);
  Entry& e = jobs_[id];
  *e.info.mutable_spec() = spec;
  e.info.set_state(proto::JobInfo::PENDING);
  e.info.set_start_time_ms(NowMs());
  e.log_path = absl::StrCat(options_.log_dir, "/job-", id, ".log");
  // Kept before it is acknowledged.
  if (absl::Status kept = Persist(e); !kept.ok()) {
    jobs_.erase(id);
    return responder.Error(kept);
  }
  absl::Status log = WriteFile(e.log_path, "");
  if (!log.ok()) {
    Finish(e, proto::JobInfo::FAILED, -1,
           absl::StrCat("cannot make its log: ", log.message()));
    return responder.Reply(e.info);
  }

  Place(id);
  responder.Reply(e.info);
}

void JobManager::Place(const std::string& id) {
  Entry* e = Find(id);
  if (e == nullptr || Finished(e->info) || !e->info.node_id().empty()) return;
  if (e->stop_requested) {
    Finish(*e, proto::JobInfo::STOPPED, -1,
           "stopped by shoal job stop before it started");
    return;
  }
  const proto::JobSpec& spec = e->info.spec();
  // The head's own node first (as Ray runs entrypoints), else the first
  // node that has the entrypoint's resources free.
  ResourceSet need = ResourceSet::FromProto(spec.entrypoint_resources());
  std::vector<JobNode> nodes = options_.alive_nodes();
  std::stable_sort(nodes.begin(), nodes.end(),
                   [](const JobNode& a, const JobNode& b) {
                     return a.is_head_node && !b.is_head_node;
                   });
  const JobNode* chosen = nullptr;
  bool fits = false;
  for (const JobNode& n : nodes) {
    if (!ResourceSet::FromProto(n.total).Contains(need)) continue;
    fits = true;
    if (ResourceSet::FromProto(n.available).Contains(need)) {
      chosen = &n;
      break;
    }
  }
  if (!fits) {
    Finish(*e, proto::JobInfo::FAILED, -1,
           absl::StrCat("no alive node has the entrypoint's resources (",
                        need.DebugString(),
                        "): start a node that has them, or ask for less"));
    return;
  }
  if (chosen == nullptr) {
    // Held by tasks or other jobs: it waits its turn.
    e->info.set_message(absl::StrCat("waiting for the entrypoint's resources (",
                                     need.DebugString(),
                                     ") to be free on a node"));
    std::weak_ptr<bool> alive = alive_;
    loop_->RunAfter(kPlaceRetryMs, [this, alive, id] {
      if (!alive.expired() && *alive.lock()) Place(id);
    });
    return;
  }
  e->info.clear_message();
  e->info.set_node_id(chosen->node_id);
  node_addresses_[chosen->node_id] = chosen->address;
  Persist(*e).IgnoreError();
  SHOAL_LOG(INFO) << "job " << id << ": starting on node " << chosen->node_id
                  << ": " << spec.entrypoint();
  AgentCall(chosen->node_id, proto::START_JOB, spec,
            [this, id](absl::StatusOr<proto::Empty> r) { Started(id, r); });
}

void JobManager::Started(const std::string& id,
                         absl::StatusOr<proto::Empty> reply) {
  Entry* e = Find(id);
  if (e == nullptr || reply.ok() || Finished(e->info)) return;
  if (reply.status().code() == absl::StatusCode::kResourceExhausted) {
    // The node's resources were taken before the job came: another turn.
    e->info.clear_node_id();
    e->info.set_message(std::string(reply.status().message()));
    std::weak_ptr<bool> alive = alive_;
    loop_->RunAfter(kPlaceRetryMs, [this, alive, id] {
      if (!alive.expired() && *alive.lock()) Place(id);
    });
    return;
  }
  Finish(*e, proto::JobInfo::FAILED, -1,
         absl::StrCat("node ", e->info.node_id(),
                      " could not start it: ", reply.status().message()));
}

absl::Status JobManager::Event(const proto::JobEvent& event) {
  Entry* e = Find(event.submission_id());
  if (e == nullptr) return absl::OkStatus();
  // What the log has already of a report sent again (the head restarted
  // before it answered) is not written twice.
  std::string_view output = event.output();
  const int64_t have = e->info.log_bytes() - event.output_offset();
  output.remove_prefix(static_cast<size_t>(
      std::clamp<int64_t>(have, 0, static_cast<int64_t>(output.size()))));
  if (!output.empty()) {
    if (OutputInStorage()) {
      absl::Status kept = KeepOutput(*e, output);
      if (!kept.ok()) return kept;
    }
    int fd = open(e->log_path.c_str(),
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
    e->info.set_log_bytes(e->info.log_bytes() +
                          static_cast<int64_t>(output.size()));
  }
  if (event.started() && e->info.state() == proto::JobInfo::PENDING) {
    e->info.set_state(proto::JobInfo::RUNNING);
    e->info.set_pid(event.pid());
  }
  if (!event.error().empty()) {
    Finish(*e, proto::JobInfo::FAILED, -1, event.error());
  } else if (event.exited() && !Finished(e->info)) {
    if (e->stop_requested) {
      Finish(*e, proto::JobInfo::STOPPED, event.exit_code(),
             absl::StrCat("stopped by shoal job stop (the entrypoint ",
                          event.description(), ")"));
    } else if (event.exit_code() == 0) {
      Finish(*e, proto::JobInfo::SUCCEEDED, 0, "the entrypoint exited with 0");
    } else {
      Finish(*e, proto::JobInfo::FAILED, event.exit_code(),
             absl::StrCat("the entrypoint ", event.description()));
    }
  }
  WakeLogReaders(*e);
  // A report that changes the job's state is taken once that state is kept:
  // the agent sends one that was not taken again, and it is kept then.
  if (event.started() || event.exited() || !event.error().empty()) {
    return Persist(*e);
  }
  return absl::OkStatus();
}

bool JobManager::OutputInStorage() const {
  return options_.storage != nullptr &&
         options_.storage->OutlivesSessionFolder();
}

absl::Status JobManager::KeepOutput(const Entry& e, std::string_view output) {
  absl::Status st = options_.storage->Put(
      kJobOutputTable,
      OutputKey(e.info.spec().submission_id(), e.info.log_bytes()),
      std::string(output));
  if (!st.ok()) {
    SHOAL_LOG(ERROR) << "cannot store the output of job "
                     << e.info.spec().submission_id() << ": " << st;
  }
  return st;
}

void JobManager::RestoreLog(Entry& e,
                            const std::map<std::string, std::string>& output) {
  const std::string prefix = e.info.spec().submission_id() + "/";
  std::string log;
  for (auto it = output.lower_bound(prefix);
       it != output.end() && it->first.compare(0, prefix.size(), prefix) == 0;
       ++it) {
    log += it->second;
  }
  if (static_cast<int64_t>(log.size()) <= e.info.log_bytes()) return;
  absl::Status written = WriteFile(e.log_path, log);
  if (!written.ok()) {
    SHOAL_LOG(ERROR) << "cannot write the log of job "
                     << e.info.spec().submission_id() << ": " << written;
    return;
  }
  e.info.set_log_bytes(static_cast<int64_t>(log.size()));
}

void JobManager::ForgetOutput(const std::string& id) {
  const std::string prefix = id + "/";
  for (const auto& [key, piece] : options_.storage->Scan(kJobOutputTable)) {
    if (key.compare(0, prefix.size(), prefix) == 0) {
      options_.storage->Delete(kJobOutputTable, key).IgnoreError();
    }
  }
}

void JobManager::Finish(Entry& e, proto::JobInfo::State state, int exit_code,
                        const std::string& message) {
  e.info.set_state(state);
  e.info.set_exit_code(exit_code);
  e.info.set_message(ToValidUtf8(message));
  e.info.set_end_time_ms(NowMs());
  Persist(e).IgnoreError();
  SHOAL_LOG(INFO) << "job " << e.info.spec().submission_id() << ": "
                  << StateName(state) << ": " << message;
  WakeLogReaders(e);
}

void JobManager::Stop(const std::string& id, const rpc::Responder& responder) {
  Entry* e = Find(id);
  if (e == nullptr) {
    return responder.Error(
        absl::NotFoundError(absl::StrCat("no job ", id, " on this cluster")));
  }
  if (Finished(e->info)) return responder.Reply(e->info);
  e->stop_requested = true;
  if (e->info.node_id().empty()) {
    // Still waiting for a node: it never starts.
    Place(id);
    return responder.Reply(e->info);
  }
  proto::JobRef ref;
  ref.set_submission_id(id);
  AgentCall(e->info.node_id(), proto::SIGNAL_JOB, ref,
            [this, id](absl::StatusOr<proto::Empty> r) {
              Entry* e = Find(id);
              if (e == nullptr || r.ok() || Finished(e->info)) return;
              Finish(*e, proto::JobInfo::STOPPED, -1,
                     absl::StrCat("stopped; its node did not answer: ",
                                  r.status().message()));
            });
  responder.Reply(e->info);
}

void JobManager::Logs(const proto::JobLogsRequest& request,
                      const rpc::Responder& responder) {
  Entry* e = Find(request.submission_id());
  if (e == nullptr) {
    return responder.Error(absl::NotFoundError(
        absl::StrCat("no job ", request.submission_id(), " on this cluster")));
  }
  if (AnswerLogs(*e, request, responder, request.wait_ms() <= 0)) return;
  // Nothing new yet: answered when output comes, the job ends, or the wait
  // is over.
  uint64_t ticket = ++next_ticket_;
  e->waiting.push_back({ticket, request, responder});
  std::weak_ptr<bool> alive = alive_;
  std::string id = request.submission_id();
  loop_->RunAfter(
      std::min(request.wait_ms(), kMaxLogWaitMs), [this, alive, id, ticket] {
        if (alive.expired() || !*alive.lock()) return;
        Entry* e = Find(id);
        if (e == nullptr) return;
        for (auto it = e->waiting.begin(); it != e->waiting.end(); ++it) {
          if (it->ticket != ticket) continue;
          AnswerLogs(*e, it->request, it->responder, true);
          e->waiting.erase(it);
          return;
        }
      });
}

bool JobManager::AnswerLogs(Entry& e, const proto::JobLogsRequest& request,
                            const rpc::Responder& responder, bool must_answer) {
  int64_t offset = std::max<int64_t>(0, request.offset());
  proto::JobLogs logs;
  if (offset < e.info.log_bytes()) {
    int fd = open(e.log_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      std::string data(static_cast<size_t>(
                           std::min(kMaxLogChunk, e.info.log_bytes() - offset)),
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
  logs.set_finished(Finished(e.info) && offset >= e.info.log_bytes());
  if (logs.data().empty() && !logs.finished() && !must_answer) return false;
  responder.Reply(logs);
  return true;
}

void JobManager::WakeLogReaders(Entry& e) {
  std::vector<Entry::Reader> waiting;
  waiting.swap(e.waiting);
  for (Entry::Reader& reader : waiting) {
    if (!AnswerLogs(e, reader.request, reader.responder, false)) {
      e.waiting.push_back(std::move(reader));
    }
  }
}

void JobManager::NodeDied(const std::string& node_id, const std::string& why) {
  for (auto& [id, e] : jobs_) {
    if (e.info.node_id() != node_id || Finished(e.info)) continue;
    Finish(e, proto::JobInfo::FAILED, -1,
           absl::StrCat("its node ", node_id, " died: ", why));
  }
}

void JobManager::AgentCall(
    const std::string& node_id, proto::Method method,
    const google::protobuf::MessageLite& request,
    std::function<void(absl::StatusOr<proto::Empty>)> done) {
  auto it = node_addresses_.find(node_id);
  if (it == node_addresses_.end()) {
    return done(absl::UnavailableError("its node is not known"));
  }
  std::weak_ptr<bool> alive = alive_;
  rpc::CallProto<proto::Empty>(
      options_.agent_channel(it->second), method, request,
      [alive, done = std::move(done)](absl::StatusOr<proto::Empty> r) {
        if (alive.expired() || !*alive.lock()) return;
        done(std::move(r));
      },
      10000);
}

}  // namespace shoal
