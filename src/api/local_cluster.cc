#include "api/local_cluster.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "common/files.h"
#include "common/process.h"
#include "common/random.h"
#include "common/session.h"
#include "common/status_macros.h"

namespace shoal::internal {

absl::StatusOr<std::string> WaitForSessionFile(const std::string& session_dir,
                                               const std::string& name,
                                               pid_t pid,
                                               const std::string& log_path,
                                               int64_t timeout_ms) {
  int64_t deadline = MonotonicUs() + timeout_ms * 1000;
  while (MonotonicUs() < deadline) {
    std::string value = ReadSessionFile(session_dir, name);
    if (!value.empty()) return value;
    int status = 0;
    bool exited = waitpid(pid, &status, WNOHANG) == pid || !ProcessAlive(pid);
    if (exited) {
      std::string tail;
      std::string reason;  // what the process said when it gave up
      if (auto log = ReadFile(log_path); log.ok()) {
        std::vector<std::string> lines =
            absl::StrSplit(*log, '\n', absl::SkipEmpty());
        if (!lines.empty() && absl::StartsWith(lines.back(), "shoal: ")) {
          reason = lines.back().substr(strlen("shoal: "));
          lines.pop_back();
        }
        size_t from = lines.size() > 8 ? lines.size() - 8 : 0;
        for (size_t i = from; i < lines.size(); ++i) {
          absl::StrAppend(&tail, "\n  ", lines[i]);
        }
      }
      if (!reason.empty()) {
        // Its own words first; the log for the rest.
        return absl::UnavailableError(
            absl::StrCat(reason, "\n(process ", pid,
                         " exited during startup; its log: ", log_path, ")"));
      }
      return absl::UnavailableError(
          absl::StrCat("process ", pid, " exited during startup; its log (",
                       log_path, ") ends with:", tail));
    }
    usleep(5000);
  }
  return absl::DeadlineExceededError(
      absl::StrCat("process ", pid, " did not become ready within ", timeout_ms,
                   " ms; see ", log_path));
}

absl::StatusOr<std::unique_ptr<LocalClusterProcesses>>
LocalClusterProcesses::Start(const std::string& program,
                             const std::string& temp_dir, double num_cpus,
                             const std::map<std::string, double>& resources,
                             int dashboard_port) {
  std::unique_ptr<LocalClusterProcesses> c(new LocalClusterProcesses());
  ASSIGN_OR_RETURN(c->session_dir_, CreateSessionDir(temp_dir));
  MarkSessionEmbedded(c->session_dir_);
  c->token_ = RandomHex(16);
  RETURN_IF_ERROR(WriteFile(c->session_dir_ + "/token", c->token_, 0600));
  const std::string& self = program;
  SpawnOptions head;
  head.argv = {self,     "_head", "--node-ip-address", "127.0.0.1",
               "--port", "0",     "--session-dir",     c->session_dir_};
  if (dashboard_port >= 0) {
    head.argv.insert(head.argv.end(),
                     {"--dashboard-port", std::to_string(dashboard_port),
                      "--dashboard-port-fallback", "1"});
  }
  head.env = {{"SHOAL_ROLE", "cli"}, {"SHOAL_TOKEN", c->token_}};
  head.unset_env = {"SHOAL_ADDRESS"};
  head.log_path = c->session_dir_ + "/logs/head.log";
  ASSIGN_OR_RETURN(c->head_pid_, Spawn(head));
  ASSIGN_OR_RETURN(c->head_address_,
                   WaitForSessionFile(c->session_dir_, "cluster_address",
                                      c->head_pid_, head.log_path, 15000));
  SpawnOptions agent;
  agent.argv = {self,
                "_agent",
                "--address",
                c->head_address_,
                "--node-ip-address",
                "127.0.0.1",
                "--session-dir",
                c->session_dir_,
                "--head-node"};
  if (num_cpus >= 0) {
    agent.argv.push_back("--num-cpus");
    agent.argv.push_back(std::to_string(num_cpus));
  }
  // GPUs are devices (each task is given its own ids, CUDA_VISIBLE_DEVICES
  // set), not a plain count: they go to --num-gpus, as `shoal start` takes
  // them.
  std::map<std::string, double> custom = resources;
  if (auto gpus = custom.find("GPU"); gpus != custom.end()) {
    agent.argv.push_back("--num-gpus");
    agent.argv.push_back(std::to_string(gpus->second));
    custom.erase(gpus);
  }
  if (!custom.empty()) {
    agent.argv.push_back("--resources");
    agent.argv.push_back(nlohmann::json(custom).dump());
  }
  agent.env = head.env;
  agent.unset_env = head.unset_env;
  agent.log_path = c->session_dir_ + "/logs/agent.log";
  ASSIGN_OR_RETURN(c->agent_pid_, Spawn(agent));
  ASSIGN_OR_RETURN(std::string ignored,
                   WaitForSessionFile(c->session_dir_, "agent_address",
                                      c->agent_pid_, agent.log_path, 15000));
  (void)ignored;
  return c;
}

LocalClusterProcesses::~LocalClusterProcesses() {
  TerminateProcess(agent_pid_, 5000);
  TerminateProcess(head_pid_, 5000);
}

}  // namespace shoal::internal
