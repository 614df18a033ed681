// The session folder: where a node keeps its token, pid files, addresses,
// logs and binaries. `shoal start --temp-dir DIR` puts it under DIR (default
// /tmp/shoal, or SHOAL_TEMP_DIR), so that several nodes can share a host.
//
//   DIR/session_<date>_<pid>/{token,head.pid,agent.pid,head_address,
//                             agent_address,cluster_address,logs/,...}
//   DIR/session_latest -> the newest session folder
//
// A session folder and everything in it belong to its user alone (0700
// folders, 0600 files): it holds the cluster's token, the head's state with
// the jobs' environments, and the jobs' output.
#ifndef SHOAL_COMMON_SESSION_H_
#define SHOAL_COMMON_SESSION_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace shoal {

std::string DefaultTempDir();
// Makes a new session folder (mode 0700, with logs/) under temp_dir, which
// it makes (0700) when missing, and points session_latest at it. When
// `previous_latest` is given it is set to what session_latest named before
// ("" for nothing), for AbandonSessionDir.
absl::StatusOr<std::string> CreateSessionDir(
    const std::string& temp_dir, std::string* previous_latest = nullptr);
// A start that made `session_dir` failed: points session_latest back at
// `previous_latest` (removes it when ""), if it still names session_dir, so
// that the session this temp dir had is the one the next start finds. The
// folder stays, for its logs.
void AbandonSessionDir(const std::string& temp_dir,
                       const std::string& session_dir,
                       const std::string& previous_latest);
// Takes group and other permissions off `session_dir` and everything under
// it (a session made by an earlier version, taken up again). Symbolic links
// are not followed.
void KeepSessionPrivate(const std::string& session_dir);

// Node ids name files and shared-memory segments of their node: 1 to 64
// letters, digits, '-', '_' and '.', not starting with '.'. InvalidArgument
// naming `flag` and what is allowed otherwise.
absl::Status CheckNodeId(const std::string& node_id,
                         const std::string& flag = "--node-id");
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
