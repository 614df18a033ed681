// The head and node agent that shoal::Init() starts as child processes when
// no cluster address is given (as ray.init() does). Stopped on destruction;
// they also die with this process (PR_SET_PDEATHSIG).
#ifndef SHOAL_API_LOCAL_CLUSTER_H_
#define SHOAL_API_LOCAL_CLUSTER_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace shoal::internal {

class LocalClusterProcesses {
 public:
  // `program` is started as `program _head ...` and `program _agent ...`:
  // the `shoal` CLI, or any program built with Shoal (its entry point runs
  // them). `dashboard_port`: as InitOptions' (-1: no dashboard).
  static absl::StatusOr<std::unique_ptr<LocalClusterProcesses>> Start(
      const std::string& program, const std::string& temp_dir, double num_cpus,
      const std::map<std::string, double>& resources, int dashboard_port = -1);
  ~LocalClusterProcesses();

  const std::string& head_address() const { return head_address_; }
  const std::string& token() const { return token_; }

 private:
  LocalClusterProcesses() = default;
  std::string session_dir_;
  std::string head_address_;
  std::string token_;
  pid_t head_pid_ = 0;
  pid_t agent_pid_ = 0;
};

// Waits up to timeout_ms for session_dir/name to exist and be non-empty while
// `pid` lives; returns its contents. The error quotes the log's last lines.
absl::StatusOr<std::string> WaitForSessionFile(const std::string& session_dir,
                                               const std::string& name,
                                               pid_t pid,
                                               const std::string& log_path,
                                               int64_t timeout_ms);

}  // namespace shoal::internal

#endif  // SHOAL_API_LOCAL_CLUSTER_H_
