// The head's table of nodes: registration, heartbeats, death (a node
// silent for the health timeout, or unregistered), and the cluster view
// that agents hold for spillback, sent to them in versioned pages with
// their heartbeat replies.
//
// Pure state: no IO, no timers. Time comes from the clock it is given
// (MonotonicUs in the head), so that tests move it by hand. NodeManager
// does the IO around it.
//
// Threading: thread-compatible; the head uses it from its event loop only.
#ifndef SHOAL_HEAD_NODE_TABLE_H_
#define SHOAL_HEAD_NODE_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduling/placement.h"
#include "shoal/shoal.pb.h"

namespace shoal {

class NodeTable {
 public:
  // Monotonic microseconds.
  using Clock = std::function<int64_t()>;

  struct Entry {
    proto::NodeInfo info;
    // The view version of the last change of `info` agents see (0: none
    // yet): see ViewChanged.
    int64_t view_version = 0;
    // `info` as a view entry: the `nodes` field of a HeartbeatReply,
    // encoded (tag, length, slim NodeInfo), so that a reply is copies.
    std::string view_entry;
    int64_t last_heartbeat_us = 0;
    std::vector<proto::ResourceDemand> demands;
    std::vector<proto::LeaseInfo> leases;
  };

  // View bytes in one reply, and in one second over all replies.
  static constexpr size_t kViewPageBytes = 64 << 10;
  static constexpr int64_t kViewBytesPerS = 128 << 20;

  // `view_epoch` is new with each head, so that an agent that holds
  // another head's view gets all of this one's.
  NodeTable(Clock clock, uint64_t view_epoch);

  // Adds the node, or takes it up again (same id) as alive and heard from
  // now; a node without an id gets one, its available defaults to its
  // total. InvalidArgument without an agent address.
  absl::StatusOr<const Entry*> Register(proto::NodeInfo info);
  // A node kept by a head that ran before: as it was, heard from now (an
  // alive one has a health timeout to be heard from again).
  void Restore(const proto::NodeInfo& info);
  // Takes an agent's report; false (nothing changed) when the node is
  // unknown or dead: the agent must register again.
  bool Heartbeat(const proto::HeartbeatRequest& request);
  // Marks an alive node dead for `reason`; null when it was not alive.
  const Entry* MarkDead(const std::string& node_id, const std::string& reason);
  // Alive nodes not heard from for more than `timeout_ms`.
  std::vector<std::string> Silent(int64_t timeout_ms) const;

  // The view an agent at (`epoch`, `version`) is missing, as the encoded
  // `nodes` of its reply (the rest of which this sets): the nodes changed
  // since `version`, or, when it holds another head's view, none, or one
  // newer than this head's, every node (full_view). Either comes in pages
  // of up to kViewPageBytes, oldest change first, the reply's version the
  // last change it brings, so that the agent's next heartbeat asks for the
  // rest. Every view byte is paced: past kViewBytesPerS in a second, a
  // reply brings no nodes (an agent that needed a whole view is told it
  // holds none, version 0) and the agent asks again at its next heartbeat,
  // scheduling on its own node meanwhile. N nodes that join at once need
  // N views of up to N nodes; unpaced, the head would build them in a
  // burst and fall behind until heartbeats time out.
  std::string FillView(uint64_t epoch, int64_t version,
                       proto::HeartbeatReply* reply);

  const Entry* Find(const std::string& node_id) const;
  const Entry* FindAlive(const std::string& node_id) const;
  // The alive head node's id; empty when none.
  std::string HeadNodeId() const;
  // Alive nodes as (id, agent address), all or just `node_id`.
  std::vector<std::pair<std::string, std::string>> AliveAgents(
      const std::string& node_id) const;
  // Alive nodes in a stable order: TPU hosts by worker id, others by
  // address; with their totals or what is available.
  std::vector<PlacementNode> PlacementNodes(bool use_totals) const;
  // Every node (alive ones with their heartbeat age), the alive nodes'
  // leases, and their demands summed by shape.
  // `selector` (null: every node) picks the nodes; without `details`, their
  // leases and the demands are left out.
  void AddToStatus(proto::ClusterStatus* status,
                   const LabelSelector* selector = nullptr,
                   bool details = true) const;
  const std::map<std::string, Entry>& entries() const { return nodes_; }

  static bool SameAmounts(const proto::ResourceMap& a,
                          const proto::ResourceMap& b);

 private:
  // `e.info` changed in what agents see (joined, died, resources): it
  // gets the next view version, so that each agent's next heartbeat brings
  // it that node again.
  void ViewChanged(Entry& e);

  const Clock clock_;
  const uint64_t view_epoch_;
  std::map<std::string, Entry> nodes_;
  int64_t view_version_ = 0;
  // view version -> node, for each node its last change: what an agent
  // at version v lacks is upper_bound(v) onwards.
  std::map<int64_t, std::string> view_changes_;
  // View bytes sent in the second since view_bytes_since_us_ (FillView).
  int64_t view_bytes_since_us_ = 0;
  int64_t view_bytes_ = 0;
};

}  // namespace shoal

#endif  // SHOAL_HEAD_NODE_TABLE_H_
