// The IO around the NodeTable: REGISTER_NODE, HEARTBEAT and
// UNREGISTER_NODE as transport-free calls, the nodes kept in storage
// (table "nodes"), the periodic health check that declares silent nodes
// dead, and what the head asks of every node's agent at once (LIST_LOGS,
// LIST_OBJECTS) or of one (READ_LOG).
//
// The rest of the head hears of nodes through the callbacks in its
// options: a node that registered (its stale bundles are released), one
// that died (its jobs, actors and bundles are lost), leases an agent
// reported (stale actor workers are ended).
//
// Threading: runs on the head's event loop; not thread-safe. Its timers and
// agent replies that outlive it do nothing.
#ifndef SHOAL_HEAD_NODE_MANAGER_H_
#define SHOAL_HEAD_NODE_MANAGER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "head/agent_call.h"
#include "head/node_table.h"
#include "shoal/shoal.pb.h"

namespace shoal {

class TableStorage;

struct NodeManagerOptions {
  int64_t heartbeat_interval_ms = 500;  // told to each agent that registers
  // An agent silent for this long is marked dead.
  int64_t health_timeout_ms = 5000;
  AgentCall call_agent;
  RunAfter run_after;
  TableStorage* storage = nullptr;  // where nodes are kept; null: nowhere
  std::function<void(const proto::NodeInfo& node)> on_registered;
  std::function<void(const proto::NodeInfo& node, const std::string& why)>
      on_dead;
  std::function<void(
      const std::string& agent,
      const google::protobuf::RepeatedPtrField<proto::LeaseInfo>& leases)>
      on_leases;
};

class NodeManager {
 public:
  // How long the head waits for a node's agent to answer for it.
  static constexpr int64_t kAgentAskTimeoutMs = 5000;

  NodeManager(NodeManagerOptions options, NodeTable::Clock clock,
              uint64_t view_epoch);
  ~NodeManager();
  NodeManager(const NodeManager&) = delete;
  NodeManager& operator=(const NodeManager&) = delete;

  // Takes up the nodes a head that ran before kept; returns how many.
  size_t Restore();
  // Checks every max(50, health_timeout / 20) ms from now on: a node
  // silent for the timeout is found dead within 5% more.
  void StartHealthChecks();

  // Kept before it is acknowledged (an error: the agent registers again).
  absl::StatusOr<proto::RegisterNodeReply> Register(
      const proto::RegisterNodeRequest& request);
  // The encoded HeartbeatReply (see NodeTable::FillView).
  std::string Heartbeat(const proto::HeartbeatRequest& request);
  void MarkDead(const std::string& node_id, const std::string& reason);

  void ListLogs(const proto::ListLogsRequest& request,
                std::function<void(absl::StatusOr<proto::LogList>)> done);
  void ListObjects(const proto::ListObjectsRequest& request,
                   std::function<void(absl::StatusOr<proto::ObjectList>)> done);
  // Asks the node's agent (the head node's when the request names none);
  // `done` gets its encoded answer.
  void ReadLog(const proto::ReadLogRequest& request,
               std::function<void(absl::StatusOr<std::string>)> done);

  const NodeTable& table() const { return table_; }

 private:
  void ScheduleHealthCheck();
  absl::Status Persist(const proto::NodeInfo& info);
  // Asks the agent of node `node_id` (every alive node when empty) the
  // same `request`, and answers `done` with their replies merged into one;
  // a node that cannot answer is named in the reply's errors.
  template <typename Reply, typename Request, typename MergeFn>
  void AskAgents(int method, const std::string& node_id, const Request& request,
                 std::function<void(absl::StatusOr<Reply>)> done,
                 MergeFn merge);

  const NodeManagerOptions options_;
  NodeTable table_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace shoal

#endif  // SHOAL_HEAD_NODE_MANAGER_H_
