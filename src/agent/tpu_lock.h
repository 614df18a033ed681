// Frees a node's TPU chips for the process about to be given them.
//
// libtpu keeps a lock file (/tmp/libtpu_lockfile) open for as long as a
// process uses the host's TPU chips, and a process that starts while another
// still has it fails or hangs in TPU initialization. So before the agent
// gives a lease TPU chips, nothing may have that file open. Holders are found
// by their open file descriptors (/proc/<pid>/fd), whatever lock they took,
// and told apart by the environment every worker's processes inherit
// (SHOAL_NODE_ID, SHOAL_WORKER_ID):
//   - a process of this node whose worker runs no lease any more is left
//     over from an earlier gang: it is killed (SIGKILL);
//   - a lock file that no process has open is stale and is removed;
//   - any other holder (a process Shoal did not start, or one of a worker
//     that still runs a lease) fails the request with an error naming its
//     pid: ending it is not the agent's call, and a clear error is better
//     than a new process that hangs.
//
// Threading: none of its own; it blocks (up to ~1 s for each process it
// kills), which the agent accepts on its loop because it happens only when
// chips are given out.
#ifndef SHOAL_AGENT_TPU_LOCK_H_
#define SHOAL_AGENT_TPU_LOCK_H_

#include <functional>
#include <string>

#include "absl/status/status.h"

namespace shoal::agent {

// The lock file libtpu takes: $SHOAL_LIBTPU_LOCKFILE when set and not empty
// (tests give each simulated node on one host its own), else
// /tmp/libtpu_lockfile.
std::string LibtpuLockfilePath();

// Whether the worker with this id (a process's SHOAL_WORKER_ID) runs a lease
// on this node now, or is starting for one: its processes hold the chips by
// right.
using WorkerIsBusy = std::function<bool(const std::string& worker_id)>;

// Clears `lockfile` for a new process on node `node_id`, as described above.
// OK when the file does not exist, or no process that may stay holds it;
// FailedPrecondition naming the first holder that may not be ended.
absl::Status ClearTpuLock(const std::string& lockfile,
                          const std::string& node_id,
                          const WorkerIsBusy& is_busy);

}  // namespace shoal::agent

#endif  // SHOAL_AGENT_TPU_LOCK_H_
