// The hierarchical transport: shared memory among the ranks of each host and
// Gloo among one leader per host (its lowest group rank). An all-reduce
// crosses the network once per host instead of once per rank.
//
// It presents itself in the group's numbering, and its failures name group
// ranks (GroupRankFailure). A leader that fails on the network aborts its
// host's shared segment, so that the other ranks of its host fail with the
// same error instead of waiting.
//
// Threading: used by one thread at a time.
#ifndef SHOAL_COLLECTIVE_HIERARCHICAL_TRANSPORT_H_
#define SHOAL_COLLECTIVE_HIERARCHICAL_TRANSPORT_H_

#include <memory>
#include <vector>

#include "collective/transport.h"

namespace shoal::collective::internal {

// options: the whole group (size = world size, rank = group rank, group_ranks
// empty); host_of_rank[r] is the host index of group rank r, hosts numbered
// 0..h-1 by their smallest rank.
absl::StatusOr<std::unique_ptr<Transport>> CreateHierarchicalTransport(
    const TransportOptions& options, const std::vector<int>& host_of_rank);

}  // namespace shoal::collective::internal

#endif  // SHOAL_COLLECTIVE_HIERARCHICAL_TRANSPORT_H_
