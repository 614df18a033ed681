#include "agent/job_runner.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/environment.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/process.h"

extern char** environ;

namespace shoal::agent {
namespace {

constexpr size_t kReadChunk = 64 << 10;

// Variables of this agent's own that its jobs must not inherit: a program
// built with Shoal reads SHOAL_ROLE to choose what it is.
std::vector<std::string> AgentOnlyVariables() {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    if (absl::StartsWith(entry, "SHOAL_")) {
      out.push_back(entry.substr(0, entry.find('=')));
    }
  }
  return out;
}

}  // namespace

std::string FindShoalPythonPackage(const std::string& executable) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path prefix = fs::path(executable).parent_path().parent_path();
  std::vector<fs::path> candidates = {prefix / "python"};
  for (const fs::directory_entry& lib :
       fs::directory_iterator(prefix / "lib", error)) {
    const std::string name = lib.path().filename().string();
    if (!absl::StartsWith(name, "python3")) continue;
    candidates.push_back(lib.path() / "dist-packages");
    candidates.push_back(lib.path() / "site-packages");
  }
  for (const fs::path& folder : candidates) {
    if (fs::exists(folder / "shoal" / "__init__.py", error)) {
      return folder.lexically_normal().string();
    }
  }
  return "";
}

std::string AppendToSearchPath(const std::string& path,
                               const std::string& folder) {
  if (folder.empty()) return path;
  for (absl::string_view entry : absl::StrSplit(path, ':')) {
    if (entry == folder) return path;
  }
  return path.empty() ? folder : absl::StrCat(path, ":", folder);
}

JobRunner::JobRunner(rpc::EventLoop* loop, JobRunnerOptions options)
    : loop_(loop), options_(std::move(options)) {}

JobRunner::~JobRunner() {
  *alive_ = false;
  for (auto& [id, job] : jobs_) {
    SHOAL_LOG(INFO) << "job " << id << ": ending its process group " << job.pid
                    << " (the agent is stopping)";
    kill(-job.pid, SIGKILL);
    CloseOutput(job);
  }
}

void JobRunner::Start(const proto::JobSpec& spec,
                      std::function<void(absl::Status)> done) {
  if (jobs_.count(spec.submission_id())) {
    return done(absl::AlreadyExistsError(absl::StrCat(
        "job ", spec.submission_id(), " already runs on this node")));
  }
  ResourceSet need = ResourceSet::FromProto(spec.entrypoint_resources());
  if (!need.empty() && options_.reserve) {
    if (absl::Status held = options_.reserve(need); !held.ok()) {
      return done(held);
    }
  }
  auto spawn = [this, spec, need](const std::string& archive) {
    absl::Status st = Spawn(spec, archive, need);
    if (!st.ok()) Release(need);
    return st;
  };
  if (spec.working_dir_blob().empty()) return done(spawn(""));
  std::weak_ptr<bool> alive = alive_;
  options_.fetch_blob(
      spec.working_dir_blob(),
      [this, alive, need, spawn, done](absl::StatusOr<std::string> path) {
        if (alive.expired() || !*alive.lock()) return;
        if (!path.ok()) {
          Release(need);
          return done(absl::UnavailableError(absl::StrCat(
              "cannot fetch its working dir: ", path.status().message())));
        }
        done(spawn(*path));
      });
}

void JobRunner::Release(const ResourceSet& reserved) {
  if (!reserved.empty() && options_.release) options_.release(reserved);
}

absl::Status JobRunner::Spawn(const proto::JobSpec& spec,
                              const std::string& archive,
                              const ResourceSet& reserved) {
  const std::string& id = spec.submission_id();
  if (jobs_.count(id)) {
    return absl::AlreadyExistsError(
        absl::StrCat("job ", id, " already runs on this node"));
  }
  std::string dir = absl::StrCat(options_.jobs_dir, "/", id);
  if (absl::Status made = MakeDirs(dir); !made.ok()) return made;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }
  SpawnOptions spawn;
  // The folder first, then the entrypoint as the user wrote it.
  // The folder (with the working dir unpacked in it) first, then the
  // entrypoint as the user wrote it.
  std::string prelude = "cd \"$SHOAL_JOB_DIR\" || exit 1\n";
  if (!archive.empty()) {
    prelude +=
        "tar -xzf \"$SHOAL_JOB_ARCHIVE\" || "
        "{ echo \"shoal: cannot unpack the job's working dir\" >&2; exit 1; "
        "}\n";
    spawn.env["SHOAL_JOB_ARCHIVE"] = archive;
  }
  // Under a guard (this program in its group-guard role): when this agent
  // dies, even by SIGKILL, the job's whole process group ends with it.
  spawn.argv = {SelfExecutable(), "/bin/sh", "-c", prelude + spec.entrypoint()};
  spawn.unset_env = AgentOnlyVariables();
  for (const auto& [k, v] : spec.env()) spawn.env[k] = v;
  if (!options_.python_path.empty()) {
    // The job's own PYTHONPATH (--env), else the agent's, then Shoal's.
    auto given = spawn.env.find("PYTHONPATH");
    spawn.env["PYTHONPATH"] = AppendToSearchPath(
        given != spawn.env.end() ? given->second
                                 : env::Get(env::Var::kPythonpath),
        options_.python_path);
  }
  spawn.env["SHOAL_ADDRESS"] = spec.head_address();
  spawn.env["SHOAL_TOKEN"] = options_.token;
  spawn.env["SHOAL_JOB_SUBMISSION_ID"] = id;
  spawn.env["SHOAL_JOB_DIR"] = dir;
  spawn.env["SHOAL_ROLE"] = "group-guard";  // the guard unsets both
  spawn.env["SHOAL_GROUP_GUARD_GRACE_MS"] =
      std::to_string(options_.stop_grace_ms);
  spawn.output_fd = fds[1];
  spawn.new_session = true;  // its own process group, for stop
  absl::StatusOr<pid_t> pid = shoal::Spawn(spawn);
  close(fds[1]);
  if (!pid.ok()) {
    close(fds[0]);
    return pid.status();
  }
  fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  Job& job = jobs_[id];
  job.id = id;
  job.reserved = reserved;
  job.pid = *pid;
  job.output_fd = fds[0];
  loop_->AddFd(fds[0], EPOLLIN, [this, id](uint32_t) {
    auto it = jobs_.find(id);
    if (it != jobs_.end()) ReadOutput(it->second);
  });
  proto::JobEvent started;
  started.set_submission_id(id);
  started.set_started(true);
  started.set_pid(*pid);
  options_.report(started);
  SHOAL_LOG(INFO) << "job " << id << ": started as pid " << *pid;
  return absl::OkStatus();
}

void JobRunner::ReadOutput(Job& job) {
  if (job.output_fd < 0) return;
  std::string out;
  char buf[kReadChunk];
  while (true) {
    ssize_t n = read(job.output_fd, buf, sizeof(buf));
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
      if (out.size() >= 4 * kReadChunk) break;  // the rest on the next turn
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) CloseOutput(job);  // every writer is gone
    break;
  }
  if (out.empty()) return;
  proto::JobEvent event;
  event.set_submission_id(job.id);
  event.set_output_offset(job.output_bytes);
  job.output_bytes += static_cast<int64_t>(out.size());
  event.set_output(std::move(out));
  options_.report(event);
}

void JobRunner::CloseOutput(Job& job) {
  if (job.output_fd < 0) return;
  loop_->RemoveFd(job.output_fd);
  close(job.output_fd);
  job.output_fd = -1;
}

absl::Status JobRunner::Signal(const std::string& id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("job ", id, " runs not here"));
  }
  pid_t group = it->second.pid;
  SHOAL_LOG(INFO) << "job " << id << ": SIGTERM to process group " << group;
  kill(-group, SIGTERM);
  std::weak_ptr<bool> alive = alive_;
  loop_->RunAfter(options_.stop_grace_ms, [this, alive, id, group] {
    if (alive.expired() || !*alive.lock()) return;
    // The entrypoint may be gone while what it started lives on in its
    // group: the group is killed whole.
    if (kill(-group, 0) == 0) {
      SHOAL_LOG(INFO) << "job " << id << ": SIGKILL to process group " << group;
      kill(-group, SIGKILL);
    }
  });
  return absl::OkStatus();
}

bool JobRunner::Reaped(pid_t pid, int wait_status) {
  for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
    Job& job = it->second;
    if (job.pid != pid) continue;
    ReadOutput(job);  // what it wrote before it ended
    CloseOutput(job);
    proto::JobEvent event;
    event.set_submission_id(job.id);
    event.set_exited(true);
    event.set_exit_code(
        WIFEXITED(wait_status)
            ? WEXITSTATUS(wait_status)
            : 128 + (WIFSIGNALED(wait_status) ? WTERMSIG(wait_status) : 0));
    event.set_description(DescribeWaitStatus(wait_status));
    SHOAL_LOG(INFO) << "job " << job.id << ": " << event.description();
    options_.report(event);
    ResourceSet reserved = job.reserved;
    jobs_.erase(it);
    Release(reserved);
    return true;
  }
  return false;
}

}  // namespace shoal::agent
