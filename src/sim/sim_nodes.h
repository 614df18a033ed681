// `shoal dev sim-nodes`: many simulated node agents in one process, for
// measuring and testing what a head does with thousands of nodes.
//
// Each simulated node is what the head and drivers see of a real node
// agent: its own rpc::Server (its address), its own connection to the head,
// a real REGISTER_NODE with the resources and labels a host of its kind
// advertises (accel::DescribeNode over a simulated TPU manager for
// `tpu_type`), HEARTBEAT at the head's interval with jitter (available
// resources, demands and leases, as the agent fills them), registering
// again when the head answers unknown_node, and the agent RPCs that drivers
// and the head call: REQUEST_LEASE, RETURN_LEASE, CANCEL_LEASE_REQUEST,
// PREPARE/COMMIT/CANCEL_BUNDLES, GET_AGENT_INFO, GET_WORKER_EXIT. Leases and
// bundles are the agent's own LeaseService (agent/lease_service.h), with
// simulated workers in place of processes.
//
// What is simulated: a granted lease names a fake worker whose address is
// the node's own server, which answers PUSH_TASK at once with the result of
// a no-op (`void`) task. A simulated node keeps no cluster view (the
// heartbeat reply's nodes are skipped unparsed, so that 10,000 nodes do not
// each hold 10,000 NodeInfos): it never spills back, and a request that
// never fits here fails INFEASIBLE after the grace period.
//
// Threading: every node lives on one event loop owned by SimNodes (not a
// thread per node). Start, Stats and Stop are called from one other thread.
#ifndef SHOAL_SIM_SIM_NODES_H_
#define SHOAL_SIM_SIM_NODES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduling/resource_set.h"

namespace shoal::sim {

struct SimNodesOptions {
  std::string head_address;  // host:port
  std::string token;
  int count = 1;
  std::string node_ip = "127.0.0.1";  // where every node listens
  double num_cpus = 8;
  // Added to (or replacing) what each node advertises.
  std::map<std::string, double> extra_resources;
  // Empty: CPU-only hosts. Else a TPU type ("v5p-2048"): consecutive nodes
  // are the hosts of simulated slices of that type (count must be a
  // multiple of the hosts per slice).
  std::string tpu_type;
  std::string node_id_prefix = "sim";
  // 0: the interval the head gives at registration.
  int64_t heartbeat_ms = 0;
  int64_t infeasible_grace_ms = 5000;
  // Registrations in flight at once (the rest wait their turn), so that
  // thousands of nodes do not all knock on the head in the same instant.
  int register_window = 128;
};

// One simulated node as it registers: what PlanSimNodes decides.
struct SimNodeSpec {
  std::string node_id;
  ResourceSet resources;
  std::map<std::string, std::string> labels;
  int tpu_chips = 0;  // chips of a TPU host; 0 elsewhere
};

// The nodes `options` asks for, with their ids, resources and labels (a
// pure function; InvalidArgument for a bad TPU type, resource or count).
absl::StatusOr<std::vector<SimNodeSpec>> PlanSimNodes(
    const SimNodesOptions& options);

// Counters over every simulated node since Start.
struct SimStats {
  int nodes = 0;
  int registered = 0;  // registered now
  // Nodes whose last heartbeat reply brought no view entries: they hold
  // the head's whole view (the head sends it in paced pages).
  int views_whole = 0;
  int64_t registrations = 0;  // including re-registrations
  int64_t heartbeats = 0;     // answered
  int64_t heartbeat_failures = 0;
  int64_t heartbeat_request_bytes = 0;  // over every answered heartbeat
  int64_t heartbeat_reply_bytes = 0;
  int64_t leases_granted = 0;
  int64_t tasks_run = 0;
};

class SimNodes {
 public:
  // Starts the nodes (their servers listen at once; they register in the
  // background, register_window at a time). Fails when the process may not
  // open enough file descriptors, saying how many nodes it can run.
  static absl::StatusOr<std::unique_ptr<SimNodes>> Start(
      const SimNodesOptions& options);
  virtual ~SimNodes() = default;

  virtual SimStats Stats() = 0;
  // Unregisters every node from the head (as a stopping agent does), then
  // closes every server and connection.
  virtual void Stop() = 0;
};

}  // namespace shoal::sim

#endif  // SHOAL_SIM_SIM_NODES_H_
