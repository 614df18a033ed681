// The head's placement groups: their specs, states (PENDING, CREATED,
// REMOVED, FAILED), names, the node of each bundle, the line of groups
// waiting to be placed, and where each pending group's bundles go
// (Plan). Every change is kept in storage (table "placement_groups";
// removed groups are dropped there) so that a restarted head has them.
//
// No IO besides storage and no timers: PlacementGroupManager reserves the
// bundles on the agents. Times are given by the caller (monotonic us).
//
// Threading: thread-compatible; the head uses it from its event loop only.
#ifndef SHOAL_HEAD_PLACEMENT_GROUP_TABLE_H_
#define SHOAL_HEAD_PLACEMENT_GROUP_TABLE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduling/placement.h"
#include "shoal/shoal.pb.h"

namespace shoal {

class TableStorage;

struct PlacementGroupEntry {
  proto::PlacementGroupInfo info;
  int64_t created_us = 0;
  // A created group whose nodes died, being placed again: the bundles
  // each dead node took (for the error it fails with if they cannot be
  // placed again).
  std::map<std::string, std::set<int>> lost;  // dead node -> bundles
  std::string lost_why;                       // the first death's reason

  // "bundle 3 lost with node n2: <why>", or for many, a summary.
  std::string LostText() const;
};

// What to do with a pending group (PlacementGroupTable::Plan).
struct PlacementPlan {
  enum Kind {
    kNothing,  // not a pending group (any more)
    kFailed,   // cannot be placed even on idle nodes: now FAILED
    kWait,     // no room now: back in line
    kReserve,  // reserve `by_node` on each node, then it is `bundle_nodes`
  };
  Kind kind = kNothing;
  // Every bundle's node once reserved (those it kept and the new ones).
  std::vector<std::string> bundle_nodes;
  // The bundles to reserve on each node: (index, shape).
  std::map<std::string, std::vector<std::pair<int, proto::ResourceMap>>>
      by_node;
};

class PlacementGroupTable {
 public:
  // Alive nodes in placement order, with their totals or what is free.
  using NodesFn = std::function<std::vector<PlacementNode>(bool use_totals)>;

  // REQUIRES: `storage` (null: nowhere) outlives this table.
  explicit PlacementGroupTable(TableStorage* storage) : storage_(storage) {}

  // Takes up the groups a head that ran before kept (pending ones in line
  // again, each as created at `now_us`); returns how many.
  size_t Restore(int64_t now_us);

  // A new PENDING group of `job_id` (empty: none), kept and in line.
  // InvalidArgument for a spec without bundles or with an empty bundle,
  // AlreadyExists for a name a group holds, or the storage's error.
  absl::StatusOr<proto::PlacementGroupInfo> Create(
      const proto::PlacementGroupSpec& spec, const std::string& job_id,
      int64_t now_us);
  // By id, else by name; null when there is none.
  PlacementGroupEntry* Find(const proto::GetPlacementGroupRequest& request);
  PlacementGroupEntry* Find(const std::string& pg_id);

  // REMOVED: its name free, out of the line. Returns the nodes its bundles
  // were reserved on (to cancel there), which it forgets.
  std::set<std::string> Remove(PlacementGroupEntry& pg);
  // The live groups of `job_id` that end with it (not detached).
  std::vector<std::string> GroupsOfJob(const std::string& job_id) const;
  // The CREATED and PENDING groups.
  std::vector<std::string> LiveGroups() const;
  // The CREATED or PENDING group `id` had bundles on `dead`: they are
  // lost (the group PENDING, in line, as created at `now_us`, its other
  // bundles kept), and its error says so. False when it had none there.
  bool LoseBundles(const std::string& id, const proto::NodeInfo& dead,
                   const std::string& why, int64_t now_us);
  // Groups whose bundles `node` reports holding that are no longer its
  // (the group ended, or placed them elsewhere when it was taken for dead).
  std::set<std::string> StaleGroups(const proto::NodeInfo& node) const;

  // The next group in line, taken out of it; nullopt when none waits.
  std::optional<std::string> NextPending();
  void Requeue(const std::string& id) { pending_.push_back(id); }
  size_t pending() const { return pending_.size(); }

  // Where group `id`'s bundles without a node go, on the nodes that hold
  // none of its others (an agent keeps one reservation per group). One
  // that fits nowhere even when idle fails once `grace_us` has passed
  // since it was created (its kept bundles stay reserved until removed).
  PlacementPlan Plan(const std::string& id, const NodesFn& nodes,
                     int64_t now_us, int64_t grace_us);
  // Its bundles were reserved on `bundle_nodes`: CREATED.
  void Created(const std::string& id,
               const std::vector<std::string>& bundle_nodes);

  // Pending and created groups, each with its age at `now_us`.
  void AddToStatus(proto::ClusterStatus* status, int64_t now_us) const;

 private:
  // Keeps the group's state in storage (removed ones are forgotten there).
  absl::Status Persist(const PlacementGroupEntry& pg);

  TableStorage* const storage_;
  std::map<std::string, PlacementGroupEntry> pgs_;
  std::map<std::string, std::string> by_name_;
  std::deque<std::string> pending_;
};

}  // namespace shoal

#endif  // SHOAL_HEAD_PLACEMENT_GROUP_TABLE_H_
