// The node's resources as its agent keeps them: what the node has (total)
// and what no lease, prepared bundle or committed bundle holds (available).
//
// `available` may go below zero in CPU: a blocked worker lends its CPU back
// and may take it again once that CPU was granted to another lease. The node
// is then over-committed and grants nothing until enough leases end (or
// other workers block). ResourceSet::Subtract keeps negative amounts, so
// giving back what was taken restores the books exactly.
//
// A value type; the agent's copy lives on its event loop.
#ifndef SHOAL_AGENT_NODE_RESOURCES_H_
#define SHOAL_AGENT_NODE_RESOURCES_H_

#include "scheduling/resource_set.h"

namespace shoal::agent {

struct NodeResources {
  ResourceSet total;
  ResourceSet available;

  // True while some resource is lent out more than once over (below zero).
  bool OverCommitted() const {
    for (const auto& [name, amount] : available.amounts()) {
      if (amount < 0) return true;
    }
    return false;
  }

  // True when a lease of `shape` may be granted now: it fits what is free
  // and the node is not over-committed (in any resource: a node that runs
  // more than it has takes nothing new until it is back within bounds).
  bool CanGrant(const ResourceSet& shape) const {
    return !OverCommitted() && available.Contains(shape);
  }
};

}  // namespace shoal::agent

#endif  // SHOAL_AGENT_NODE_RESOURCES_H_
