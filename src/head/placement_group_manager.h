// The head's side of placement groups (CREATE_PLACEMENT_GROUP,
// GET_PLACEMENT_GROUP, REMOVE_PLACEMENT_GROUP as transport-free calls): the
// state is PlacementGroupTable's; this reserves bundles on the nodes'
// agents (PREPARE_BUNDLES, COMMIT_BUNDLES, CANCEL_BUNDLES) and reacts to
// nodes dying and registering and to jobs ending.
//
// One group is placed at a time: its bundles are prepared on every node
// they go to, then committed; if any node refuses, the prepared ones are
// cancelled and the group waits for its next turn. Because no two groups
// hold partial reservations at once, groups competing for the same nodes
// never deadlock.
//
// Threading: runs on the head's event loop; not thread-safe. Its timers and
// agent replies that outlive it do nothing.
#ifndef SHOAL_HEAD_PLACEMENT_GROUP_MANAGER_H_
#define SHOAL_HEAD_PLACEMENT_GROUP_MANAGER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "head/agent_call.h"
#include "head/placement_group_table.h"
#include "shoal/shoal.pb.h"

namespace shoal {

struct PlacementGroupManagerOptions {
  // How long a group that fits no node set waits for nodes.
  int64_t infeasible_grace_ms = 5000;
  // Before a group that could not be placed is tried again.
  int64_t retry_ms = 200;
  AgentCall call_agent;
  RunAfter run_after;
  std::function<int64_t()> now_us;  // monotonic
  // The node's record; null for a node the head does not know.
  std::function<const proto::NodeInfo*(const std::string& node_id)> node;
  // Alive nodes in placement order (NodeTable::PlacementNodes).
  PlacementGroupTable::NodesFn placement_nodes;
  TableStorage* storage = nullptr;  // null: nowhere
};

class PlacementGroupManager {
 public:
  explicit PlacementGroupManager(PlacementGroupManagerOptions options);
  ~PlacementGroupManager();
  PlacementGroupManager(const PlacementGroupManager&) = delete;
  PlacementGroupManager& operator=(const PlacementGroupManager&) = delete;

  // Takes up the groups a head that ran before kept, placing pending ones
  // again; returns how many.
  size_t Restore();

  // A new group of `job_id` (the driver's that asked; empty: none): kept,
  // then placed as soon as it is its turn. Its info as it is now (PENDING).
  absl::StatusOr<proto::PlacementGroupInfo> Create(
      const proto::PlacementGroupSpec& spec, const std::string& job_id);
  absl::StatusOr<proto::PlacementGroupInfo> Get(
      const proto::GetPlacementGroupRequest& request);
  // Releases its bundles; a group that is not there is no error.
  void Remove(const proto::GetPlacementGroupRequest& request);

  // A job's groups end with it, as Ray's do, unless detached.
  void JobEnded(const std::string& job_id);
  // Groups with bundles on `dead` lost them: each goes back to PENDING
  // (tasks of its lost bundles wait), its other bundles staying where they
  // are with the work in them, and its lost bundles are placed again on
  // the nodes still alive. Its error names the lost bundles and hosts, and
  // so does the failure of one that cannot be placed again (a TPU slice
  // with a host gone), after the infeasible grace period.
  void NodeDied(const proto::NodeInfo& dead, const std::string& why);
  // A node that registers again holding bundles of groups that no longer
  // have them there is told to let them go.
  void NodeRegistered(const proto::NodeInfo& node);

  void AddToStatus(proto::ClusterStatus* status) const;
  const PlacementGroupTable& table() const { return table_; }

 private:
  using Bundles = std::vector<std::pair<int, proto::ResourceMap>>;

  // Gives every pending group one try, in order, until one is being placed.
  void SchedulePlacementGroups();
  // Starts placing group `id`, fails it, or puts it back in line. A group
  // that lost bundles places only those. If they fit nowhere, it fails
  // after the grace period like any group that cannot be placed; the
  // bundles it kept stay reserved, and nothing running in them is ended,
  // until its owner removes it (or its job ends): a gang's driver, which
  // sees its own ranks fail, decides.
  void TryPlaceGroup(const std::string& id);
  void RetryPlacementSoon();
  void FinishPrepare(const std::string& id,
                     const std::vector<std::string>& placed,
                     const std::vector<std::string>& ok_nodes,
                     const absl::Status& failure);
  void FinishCommit(const std::string& id,
                    const std::vector<std::string>& placed,
                    const std::vector<std::string>& nodes,
                    const absl::Status& failure);
  // Cancels what `nodes` hold of `id`; true when the group still waits
  // for placement after the failure (it is back in line).
  bool Abandon(const std::string& id, const std::vector<std::string>& nodes,
               const absl::Status& failure);
  bool StillPending(const std::string& id);
  // Sends a bundle request to the agent of `node_id`; `done` (optional)
  // gets its status, Unavailable for a node that is not alive.
  void SendBundles(const std::string& node_id, int method,
                   const std::string& pg_id, const Bundles& bundles,
                   std::function<void(absl::Status)> done);
  void Release(PlacementGroupEntry& pg);

  const PlacementGroupManagerOptions options_;
  PlacementGroupTable table_;
  bool placing_ = false;
  bool retry_timer_armed_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace shoal

#endif  // SHOAL_HEAD_PLACEMENT_GROUP_MANAGER_H_
