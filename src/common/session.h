// The session folder: where a node keeps its token, pid files, addresses,
// logs and binaries. `shoal start --temp-dir DIR` puts it under DIR (default
// /tmp/shoal, or SHOAL_TEMP_DIR), so that several nodes can share a host.
//
//   DIR/session_<date>_<pid>/{token,head.pid,agent.pid,head_address,
//                             agent_address,cluster_address,logs/,...}
//   DIR/session_latest -> the newest session folder
#ifndef SHOAL_COMMON_SESSION_H_
#define SHOAL_COMMON_SESSION_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace shoal {

std::string DefaultTempDir();
// Makes a new session folder under temp_dir and points session_latest at it.
absl::StatusOr<std::string> CreateSessionDir(const std::string& temp_dir);
// Every session folder under temp_dir, newest first.
std::vector<std::string> ListSessionDirs(const std::string& temp_dir);
// The contents of session_dir/name with surrounding space removed, or "".
std::string ReadSessionFile(const std::string& session_dir,
                            const std::string& name);
// The pid in session_dir/<name>.pid when that process is alive, else 0.
int64_t LivePid(const std::string& session_dir, const std::string& name);

// The cluster this host started or joined from temp_dir: its head address
// and token, from the newest session with a live process. Empty if none.
struct LocalCluster {
  std::string session_dir;
  std::string head_address;
  std::string token;
};
LocalCluster FindLocalCluster(const std::string& temp_dir);

// Resolves the address and token every client command uses: the explicit
// values, else SHOAL_ADDRESS / SHOAL_TOKEN, else the local cluster. Fails
// with a message that says how to point at a cluster.
absl::Status ResolveClusterAddress(const std::string& temp_dir,
                                   std::string* address, std::string* token);

}  // namespace shoal

#endif  // SHOAL_COMMON_SESSION_H_
