// The reservation phase of `shoal launch`: the gang's hosts held as one
// placement group (STRICT_SPREAD), all of them or none, through the
// cluster's API.
#ifndef SHOAL_LAUNCH_GANG_RESERVATION_H_
#define SHOAL_LAUNCH_GANG_RESERVATION_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "launch/gang_plan.h"
#include "shoal/placement.h"

namespace shoal::launch {

struct Reservation {
  PlacementGroup group;
  std::vector<std::string> host_ids;     // the bundles' nodes, in order
  std::vector<int> slice_of_host;        // multi-slice: each host's slice
  std::map<std::string, double> bundle;  // of an N-node gang's hosts
  // A sub-slice: its type and grid as a slice of its own ("v5p-16",
  // "2x2x2"); its hosts are its workers 0..n-1 in host order.
  std::string subslice_type;
  std::string subslice_topology;
};

// The gang's hosts as the reservation holds them (a sub-slice's as a slice
// of its own), in rank order.
std::vector<proto::LaunchHost> HostsOfReservation(const Reservation& r,
                                                  int nproc_per_node);

// Reserves the gang `choice` names, waiting up to `timeout_s` for its hosts
// to be free; an N-node gang avoids the nodes in `excluded`. Fails with
// DeadlineExceeded when the hosts stayed busy (or the slice did not
// come), InvalidArgument when the cluster has too few nodes, else with the
// cluster's error.
absl::StatusOr<Reservation> ReserveGang(const GangChoice& choice, int timeout_s,
                                        const std::set<std::string>& excluded);

// Releases the reservation's hosts; a head that cannot be told is not the
// launch's problem (it drops the group when the launcher's job ends).
void ReleaseGang(const PlacementGroup& group);

}  // namespace shoal::launch

#endif  // SHOAL_LAUNCH_GANG_RESERVATION_H_
