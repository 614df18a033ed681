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

// The cluster this host started or joined from temp_dir with `shoal start`:
// its head address and token, from the newest session with a live process.
// Clusters that a program's shoal::Init() started for itself are not
// counted (they end with that program). Empty if none.
struct LocalCluster {
  std::string session_dir;
  std::string head_address;
  std::string token;
};
LocalCluster FindLocalCluster(const std::string& temp_dir);
// Marks a session as a program's own local cluster (see FindLocalCluster).
void MarkSessionEmbedded(const std::string& session_dir);

// The one rule by which every CLI command, `shoal launch` and shoal::Init()
// find their cluster:
//  - the address: the explicit one (--address, InitOptions.address), else
//    SHOAL_ADDRESS, else the cluster started from this host's temp_dir when
//    one is running there (FindLocalCluster);
//  - the token: the explicit one (--token), else SHOAL_TOKEN, else the token
//    in the session folder, on this host, of the cluster at that address
//    (any temp dir; 127.0.0.1 and this host's own addresses count as one).
// NotFound when there is no address at all (a program then starts its own
// local cluster; a command fails with this message, which says how to point
// at one); InvalidArgument for an address that is not HOST:PORT. A token
// left empty means none was found (the head will refuse the connection and
// say how to pass one).
absl::Status ResolveClusterAddress(const std::string& temp_dir,
                                   std::string* address, std::string* token);

}  // namespace shoal

#endif  // SHOAL_COMMON_SESSION_H_
