// The node agent: registers its node with the head, heartbeats, keeps the
// node's resources, grants worker leases (or points the requester to a better
// node: spillback), starts and reaps worker processes, lends the CPU of
// blocked workers, and holds placement-group bundles. A node whose head
// stays unreachable for head_timeout_ms stops by itself: nothing of it
// outlives its cluster.
//
// The parts are under src/agent/, their decisions and books tested alone:
// head_link (registration, heartbeats, job reports: IO; head_watch decides
// when the head is lost),
// lease_service (lease and bundle RPCs over lease_policy, lease_queue,
// lease_table, bundle_reservations and device_allocator), process_workers
// (the worker processes behind the leases: worker_pool, binary_cache,
// tpu_lock), job_runner, object_service and log_service. The agent wires
// them to its server.
//
// Threading: all state lives on the agent's event loop.
#ifndef SHOAL_AGENT_AGENT_H_
#define SHOAL_AGENT_AGENT_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "accel/accelerator_manager.h"
#include "scheduling/resource_set.h"

namespace shoal {

struct AgentOptions {
  std::string head_address;  // host:port
  std::string token;
  std::string node_ip = "127.0.0.1";  // listen address, advertised to peers
  int port = 0;
  std::string session_dir;
  std::string node_id;  // empty: random
  ResourceSet resources;
  std::map<std::string, std::string> labels;
  // One per accelerator kind with devices on this node: validates requests
  // and gives each leased worker the environment that shows it exactly its
  // devices. Immutable snapshots, shared read-only.
  std::vector<std::shared_ptr<const accel::AcceleratorManager>> accelerators;
  bool is_head_node = false;
  // How long an infeasible lease request waits for a node that fits to join.
  int64_t infeasible_grace_ms = 5000;
  int64_t worker_idle_timeout_ms = 10000;
  // How long the head may go without answering this node (unreachable, or
  // refusing it: another cluster's head on its address) before the node
  // stops: its workers end, its object store is freed and Wait() returns
  // with stop_reason() set. Counted from the last heartbeat or
  // registration the head accepted; long enough to ride out a restart of
  // the head (`--head-timeout-s`, like Ray's
  // gcs_rpc_server_reconnect_timeout_s).
  int64_t head_timeout_ms = 60000;
};

class NodeAgent {
 public:
  static absl::StatusOr<std::unique_ptr<NodeAgent>> Create(
      const AgentOptions& options);
  virtual ~NodeAgent() = default;
  virtual std::string address() const = 0;
  virtual std::string node_id() const = 0;
  // Blocks until SHUTDOWN_AGENT, Stop(), or the head is lost for
  // head_timeout_ms.
  virtual void Wait() = 0;
  // Unregisters from the head (unless it is lost) and ends every worker
  // and what they started.
  virtual void Stop() = 0;
  // Why the agent stopped by itself: OK unless it lost its head
  // (Unavailable, with the line it logged), when its process should exit
  // non-zero.
  virtual absl::Status stop_reason() const = 0;
};

}  // namespace shoal

#endif  // SHOAL_AGENT_AGENT_H_
