// This node's share of placement groups: the head places a group's bundles
// in two phases. PREPARE_BUNDLES holds the bundles' resources (nothing else
// may take them); COMMIT_BUNDLES turns them into the bundles' own
// resources, named as Ray names them: CPU_group_<index>_<pg> for one bundle
// and CPU_group_<pg> for any bundle of the group, which tasks of the group
// ask for; CANCEL_BUNDLES gives everything back. Retried prepares and
// commits are no-ops, so the head may repeat them.
//
// The accounting is here; the agent ends the leases that run in a cancelled
// group's bundles and expires prepares the head forgets.
//
// Threading: lives on the agent's event loop with the NodeResources it
// changes; not thread-safe.
#ifndef SHOAL_AGENT_BUNDLE_RESERVATIONS_H_
#define SHOAL_AGENT_BUNDLE_RESERVATIONS_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "agent/node_resources.h"
#include "scheduling/resource_set.h"

namespace shoal::agent {

class BundleReservations {
 public:
  // One bundle: its index in the group and its resources.
  using Bundle = std::pair<int, ResourceSet>;

  // REQUIRES: `node` outlives this.
  BundleReservations(std::string node_id, NodeResources* node);

  // Takes the bundles' resources from the node's available resources.
  // FailedPrecondition, naming what is missing, when they are not all free
  // (CPU that blocked workers lend is not free for bundles).
  absl::Status Prepare(const std::string& pg,
                       const std::vector<Bundle>& bundles);

  // Adds the bundles' own resources to the node (total and available).
  // NotFound when `pg` has no prepared bundles here (they expired).
  absl::Status Commit(const std::string& pg);

  // Gives back what `pg` holds, prepared or committed. The bundle resources
  // leases of the group hold are taken from the node's available resources
  // as well: those leases must end (the agent ends them), giving them back.
  void Cancel(const std::string& pg);

  bool IsPrepared(const std::string& pg) const {
    return prepared_.count(pg) > 0;
  }
  bool IsCommitted(const std::string& pg) const {
    return committed_.count(pg) > 0;
  }

 private:
  struct Reservation {
    std::vector<Bundle> bundles;
    ResourceSet held;   // taken from the node's own resources
    ResourceSet added;  // the bundle resources, once committed
  };

  const std::string node_id_;
  NodeResources* const node_;
  std::map<std::string, Reservation> prepared_;
  std::map<std::string, Reservation> committed_;
};

}  // namespace shoal::agent

#endif  // SHOAL_AGENT_BUNDLE_RESERVATIONS_H_
