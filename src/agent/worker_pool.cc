#include "agent/worker_pool.h"

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/process.h"
#include "common/random.h"

namespace shoal::agent {
namespace {

class SystemLauncher : public ProcessLauncher {
 public:
  absl::StatusOr<pid_t> Start(const SpawnOptions& options) override {
    return Spawn(options);
  }

  absl::Status Signal(pid_t pid, int signal) override {
    if (kill(pid, signal) == 0) return absl::OkStatus();
    if (errno == ESRCH) {
      return absl::NotFoundError(absl::StrCat("no process ", pid));
    }
    return absl::InternalError(
        absl::StrCat("cannot signal pid ", pid, ": errno ", errno));
  }

  std::optional<Exit> ReapAny() override {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return std::nullopt;
    return Exit{pid, status};
  }

  bool Reap(pid_t pid, bool wait) override {
    return waitpid(pid, nullptr, wait ? 0 : WNOHANG) != 0;
  }
};

}  // namespace

std::unique_ptr<ProcessLauncher> SystemProcessLauncher() {
  return std::make_unique<SystemLauncher>();
}

WorkerPool::WorkerPool(WorkerPoolOptions options,
                       std::unique_ptr<ProcessLauncher> launcher)
    : options_(std::move(options)), launcher_(std::move(launcher)) {}

const Worker* WorkerPool::TakeIdle(const std::string& job_id,
                                   const std::string& binary_hash,
                                   const std::string& device_key,
                                   const std::string& lease_id) {
  for (auto& [id, w] : workers_) {
    if (w.state == Worker::State::kIdle && w.job_id == job_id &&
        w.binary_hash == binary_hash && w.device_key == device_key) {
      w.state = Worker::State::kLeased;
      w.lease_id = lease_id;
      return &w;
    }
  }
  return nullptr;
}

const Worker& WorkerPool::Add(const std::string& job_id,
                              const std::string& binary_hash,
                              const std::string& device_key,
                              const std::string& lease_id) {
  std::string id = RandomHex(6);
  while (workers_.count(id)) id = RandomHex(6);
  Worker& w = workers_[id];
  w.id = id;
  w.job_id = job_id;
  w.binary_hash = binary_hash;
  w.device_key = device_key;
  w.state = Worker::State::kStarting;
  w.lease_id = lease_id;
  return w;
}

absl::Status WorkerPool::Launch(const std::string& id,
                                const std::string& binary,
                                const SpawnOptions& device_env) {
  SpawnOptions program;
  program.argv = {binary};
  return Launch(id, program, device_env);
}

absl::Status WorkerPool::Launch(const std::string& id,
                                const SpawnOptions& program,
                                const SpawnOptions& device_env) {
  if (program.argv.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker ", id, ": no command to start"));
  }
  auto it = workers_.find(id);
  if (it == workers_.end()) {
    return absl::NotFoundError(absl::StrCat("no worker ", id, " to start"));
  }
  Worker& w = it->second;
  SpawnOptions spawn;
  spawn.argv = program.argv;
  spawn.env = options_.env;
  for (const auto& [k, v] : program.env) {
    // The agent's own variables (its address, the token, the node) are not
    // the job's to change.
    if (!absl::StartsWith(k, "SHOAL_")) spawn.env[k] = v;
  }
  spawn.env["SHOAL_ROLE"] = "worker";
  spawn.env["SHOAL_WORKER_ID"] = id;
  spawn.env["SHOAL_JOB_ID"] = w.job_id;
  for (const auto& [k, v] : device_env.env) spawn.env[k] = v;
  spawn.unset_env = device_env.unset_env;
  w.log_path = absl::StrCat(options_.log_dir, "/worker-", id, ".log");
  spawn.log_path = w.log_path;
  absl::StatusOr<pid_t> pid = launcher_->Start(spawn);
  if (!pid.ok()) return pid.status();
  w.pid = *pid;
  return absl::OkStatus();
}

absl::Status WorkerPool::Registered(const std::string& id,
                                    const std::string& address, pid_t pid) {
  auto it = workers_.find(id);
  if (it == workers_.end()) {
    return absl::NotFoundError("this agent did not start worker " + id);
  }
  it->second.address = address;
  if (it->second.pid == 0) it->second.pid = pid;
  return absl::OkStatus();
}

void WorkerPool::MarkLeased(const std::string& id) {
  auto it = workers_.find(id);
  if (it != workers_.end()) it->second.state = Worker::State::kLeased;
}

void WorkerPool::MarkIdle(const std::string& id, int64_t now_us) {
  auto it = workers_.find(id);
  if (it == workers_.end()) return;
  it->second.state = Worker::State::kIdle;
  it->second.lease_id.clear();
  it->second.idle_since_us = now_us;
}

void WorkerPool::Kill(const std::string& id, const std::string& why) {
  auto it = workers_.find(id);
  if (it == workers_.end() || it->second.pid <= 0) return;
  it->second.stopped_because = why;
  launcher_->Signal(it->second.pid, SIGKILL).IgnoreError();  // reaped later
}

void WorkerPool::EndSoon(const std::string& id, const std::string& why,
                         int64_t deadline_us) {
  auto it = workers_.find(id);
  if (it == workers_.end() || it->second.pid <= 0) return;
  it->second.stopped_because = why;
  it->second.kill_at_us = deadline_us;
}

void WorkerPool::Remove(const std::string& id, const std::string& what) {
  if (workers_.erase(id) > 0) RememberExit(id, what);
}

std::vector<WorkerPool::Exited> WorkerPool::Reap(
    std::vector<ProcessLauncher::Exit>* others) {
  std::vector<Exited> exited;
  while (std::optional<ProcessLauncher::Exit> exit = launcher_->ReapAny()) {
    bool worker = false;
    for (auto it = workers_.begin(); it != workers_.end(); ++it) {
      const Worker& w = it->second;
      if (w.pid != exit->pid) continue;
      std::string what =
          absl::StrCat("worker pid ", exit->pid, " on node ", options_.node_id,
                       " ", DescribeWaitStatus(exit->wait_status));
      if (w.state == Worker::State::kStarting) {
        absl::StrAppend(&what, " before it registered; see ", w.log_path);
      }
      if (!w.stopped_because.empty()) {
        SHOAL_LOG(INFO) << what
                        << " (stopped by this agent: " << w.stopped_because
                        << ")";
      } else if (w.state != Worker::State::kIdle) {
        SHOAL_LOG(WARNING) << what;
      }
      RememberExit(w.id, what);
      exited.push_back({w, std::move(what)});
      workers_.erase(it);
      worker = true;
      break;
    }
    if (!worker && others != nullptr) others->push_back(*exit);
  }
  return exited;
}

void WorkerPool::SetLending(const std::string& id, bool lending) {
  auto it = workers_.find(id);
  if (it == workers_.end()) return;
  it->second.lending = lending;
}

void WorkerPool::EndIdle(int64_t now_us) {
  for (auto& [id, w] : workers_) {
    if (w.kill_at_us != 0 && w.pid > 0 && now_us >= w.kill_at_us) {
      launcher_->Signal(w.pid, SIGKILL).IgnoreError();  // reaped later
      w.kill_at_us = 0;
      continue;
    }
    if (w.state == Worker::State::kIdle && w.pid > 0 && !w.lending &&
        now_us - w.idle_since_us > options_.idle_timeout_ms * 1000) {
      launcher_->Signal(w.pid, SIGTERM).IgnoreError();
      w.idle_since_us = now_us;  // signalled again if it lingers a period
    }
  }
}

std::optional<std::string> WorkerPool::ExitOf(const std::string& id) const {
  auto it = exits_.find(id);
  if (it == exits_.end()) return std::nullopt;
  return it->second;
}

void WorkerPool::StopAll() {
  std::set<pid_t> running;
  for (const auto& [id, w] : workers_) {
    if (w.pid > 0) {
      launcher_->Signal(w.pid, SIGTERM).IgnoreError();
      running.insert(w.pid);
    }
  }
  // Give workers a moment to exit, then make sure.
  for (int i = 0; i < 50 && !running.empty(); ++i) {
    for (auto it = running.begin(); it != running.end();) {
      it = launcher_->Reap(*it, /*wait=*/false) ? running.erase(it) : ++it;
    }
    if (!running.empty()) usleep(20000);
  }
  for (pid_t pid : running) {
    if (launcher_->Signal(pid, SIGKILL).ok()) launcher_->Reap(pid, true);
  }
  workers_.clear();
}

const Worker* WorkerPool::Find(const std::string& id) const {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

void WorkerPool::RememberExit(const std::string& id, const std::string& what) {
  if (exits_.count(id) == 0) exit_order_.push_back(id);
  exits_[id] = what;
  while (exit_order_.size() > options_.max_remembered_exits) {
    exits_.erase(exit_order_.front());
    exit_order_.pop_front();
  }
}

}  // namespace shoal::agent
