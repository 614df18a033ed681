// The cluster as an agent sees it for spillback: the head sends, in each
// heartbeat reply, only the nodes whose record changed since the version
// the agent holds (or all of them when the agent holds none, or another
// head's), and this merges them by node id. The agent's own spillbacks
// are counted on top (a node it sent work to has that much less available)
// until the next reply, which reflects them. See docs/design/scale.md.
//
// Threading: lives on the agent's event loop; not thread-safe.
#ifndef SHOAL_AGENT_CLUSTER_VIEW_H_
#define SHOAL_AGENT_CLUSTER_VIEW_H_

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "scheduling/resource_set.h"
#include "shoal/shoal.pb.h"

namespace shoal::agent {

class ClusterView {
 public:
  // Says which view this agent holds, so that the reply brings the rest.
  void FillRequest(proto::HeartbeatRequest* request) const;
  // Merges a heartbeat reply's nodes in.
  void Apply(const proto::HeartbeatReply& reply);
  // Forgets the version held (the agent registers again): the next reply
  // brings every node.
  void Reset();

  // Every node the head told of (this one and dead ones included), with
  // the spillbacks counted since.
  const std::vector<proto::NodeInfo>& nodes() const { return adjusted_; }
  // `shape` was sent to `node_id`: it has that much less available (if it
  // had that much) until the next reply.
  void CountSpillback(const std::string& node_id, const ResourceSet& shape);

 private:
  uint64_t epoch_ = 0;
  int64_t version_ = 0;
  std::vector<proto::NodeInfo> nodes_;             // as the head said
  std::unordered_map<std::string, size_t> index_;  // node id -> nodes_
  std::vector<proto::NodeInfo> adjusted_;          // nodes_ and the spillbacks
  bool spilled_ = false;                           // adjusted_ != nodes_
};

}  // namespace shoal::agent

#endif  // SHOAL_AGENT_CLUSTER_VIEW_H_
