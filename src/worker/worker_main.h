// A worker process: the user's binary re-executed by a node agent. Registers
// with its agent, then runs the tasks that drivers push to it, one at a time,
// in the order they arrive, or holds one actor (worker/actor_host.h).
#ifndef SHOAL_WORKER_WORKER_MAIN_H_
#define SHOAL_WORKER_WORKER_MAIN_H_

namespace shoal::internal {

// Reads SHOAL_WORKER_ID, SHOAL_AGENT_ADDRESS, SHOAL_NODE_IP, SHOAL_TOKEN from
// the environment. Returns the process's exit code.
int RunWorker();

}  // namespace shoal::internal

#endif  // SHOAL_WORKER_WORKER_MAIN_H_
