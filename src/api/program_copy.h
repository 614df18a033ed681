// The program a driver's workers run, where the nodes find it. A node whose
// host is the driver's (the same HostId: the same files) runs the driver's
// file in place, so nothing is sent; for nodes of other hosts the driver
// sends the head one copy, by content (a head that holds it already keeps
// its copy), with its debug info stripped: a RelWithDebInfo build is mostly
// debug info, which workers never read. A driver that started while every
// node was on its host sends the copy when a node of another host first
// lacks it (RequestLeaseReply.needs_program), or before it makes an actor
// while such a node is in the cluster.
#ifndef SHOAL_API_PROGRAM_COPY_H_
#define SHOAL_API_PROGRAM_COPY_H_

#include <string>

#include "absl/status/statusor.h"
#include "shoal/shoal.pb.h"

namespace shoal::rpc {
class HeadClient;
}

namespace shoal::internal {

// True when an alive node of `status` is on another host than `here` (a
// HostId()), or cannot say which host it is on.
bool NodesElsewhere(const proto::ClusterStatus& status,
                    const std::string& here);

// True when `path` still names the file this process runs: not removed or
// replaced (rebuilt) since it started. Nodes then find the program there.
bool RunsTheFileAt(const std::string& path);

// A copy of the executable at `path` without its debug info (`objcopy
// --strip-debug`), in a temp file the caller removes. Errors when objcopy is
// missing or fails.
absl::StatusOr<std::string> StripDebugInfo(const std::string& path);

// Sends the program at `path` to the head, its debug info stripped unless
// SHOAL_SEND_DEBUG_INFO=1 (or objcopy cannot strip it); returns the hash
// the head keeps the copy under.
absl::StatusOr<std::string> SendProgram(rpc::HeadClient& head,
                                        const std::string& path);

}  // namespace shoal::internal

#endif  // SHOAL_API_PROGRAM_COPY_H_
