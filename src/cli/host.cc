#include "cli/host.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "agent/object_service.h"
#include "api/local_cluster.h"
#include "common/process.h"
#include "common/session.h"

namespace shoal::cli {
namespace {

constexpr int kStartupTimeoutMs = 20000;

class System : public Host {
 public:
  System() { sigemptyset(&stop_); }

  absl::StatusOr<pid_t> StartDaemon(const DaemonSpec& d) override {
    SpawnOptions spawn;
    spawn.argv = d.argv;
    spawn.env = {{"SHOAL_ROLE", "cli"}, {"SHOAL_TOKEN", d.token}};
    spawn.log_path = absl::StrCat(d.session_dir, "/logs/", d.log_name, ".log");
    spawn.die_with_parent = d.block;
    spawn.new_session = !d.block;
    absl::StatusOr<pid_t> pid = Spawn(spawn);
    if (!pid.ok()) return pid.status();
    auto ready = internal::WaitForSessionFile(
        d.session_dir, d.ready_file, *pid, spawn.log_path, kStartupTimeoutMs);
    if (!ready.ok()) {
      kill(*pid, SIGKILL);
      waitpid(*pid, nullptr, 0);
      return ready.status();
    }
    return *pid;
  }
  int64_t LivePid(const std::string& session_dir,
                  const std::string& name) override {
    return shoal::LivePid(session_dir, name);
  }
  bool Alive(int64_t pid) override { return ProcessAlive(pid); }
  void Signal(int64_t pid, int signal) override {
    kill(static_cast<pid_t>(pid), signal);
  }
  void Terminate(int64_t pid, int grace_ms) override {
    TerminateProcess(static_cast<pid_t>(pid), grace_ms);
  }
  void SleepMs(int64_t ms) override {
    usleep(static_cast<useconds_t>(ms) * 1000);
  }
  void RemoveStaleArenas() override { agent::RemoveStaleArenas("/dev/shm"); }

  void BlockStopSignals() override {
    sigemptyset(&stop_);
    sigaddset(&stop_, SIGTERM);
    sigaddset(&stop_, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_, nullptr);
  }
  std::optional<int> AwaitStop(pid_t child) override {
    sigset_t wait_for = stop_;
    if (child != 0) {
      sigaddset(&wait_for, SIGCHLD);
      pthread_sigmask(SIG_BLOCK, &wait_for, nullptr);
    }
    for (;;) {
      int wait_status = 0;
      if (child != 0 && waitpid(child, &wait_status, WNOHANG) == child) {
        return wait_status;
      }
      int sig = 0;
      sigwait(&wait_for, &sig);
      if (sig != SIGCHLD) return std::nullopt;
    }
  }

 private:
  sigset_t stop_;
};

}  // namespace

Host& SystemHost() {
  static System* host = new System;
  return *host;
}

}  // namespace shoal::cli
