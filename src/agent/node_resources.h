// The node's resources as its agent keeps them: what the node has (total),
// what no lease, prepared bundle or committed bundle holds (available), and
// the part of `available` that blocked workers lend back (lent).
//
// Lent CPU serves only requests deeper than the blocked task (see
// LeaseTable), so it is not free for anything else: bundles, the head's
// view of the node and shallower requests see `Unlent()`.
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
  ResourceSet lent;  // kept by LeaseTable

  // True while some resource is lent out more than once over (below zero).
  bool OverCommitted() const;

  // `available` less what is lent: what the node has free for work that may
  // not use lent CPU. A resource that is below zero only because its lent
  // part was granted again shows 0; one below zero in `available` keeps that.
  ResourceSet Unlent() const;

  // True when a lease of `shape` may be granted now: it fits what is free
  // less `withheld` (the lent CPU this request may not use), and the node is
  // not over-committed (in any resource: a node that runs more than it has
  // takes nothing new until it is back within bounds).
  bool CanGrant(const ResourceSet& shape,
                const ResourceSet& withheld = ResourceSet()) const;
};

}  // namespace shoal::agent

#endif  // SHOAL_AGENT_NODE_RESOURCES_H_
