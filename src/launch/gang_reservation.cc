#include "launch/gang_reservation.h"

#include "absl/strings/str_cat.h"
#include "shoal/api.h"

namespace shoal::launch {
namespace {

// Throws shoal::Error when the cluster fails the reservation.
absl::StatusOr<Reservation> ReserveNodes(
    const GangChoice& choice, int timeout_s,
    const std::set<std::string>& excluded) {
  auto pg =
      NodesGroupOptions(Nodes(), choice.num_nodes, choice.nproc, excluded);
  if (!pg.ok()) return pg.status();
  Reservation r;
  if (!pg->bundles.empty()) r.bundle = pg->bundles[0];
  r.group = CreatePlacementGroup(*pg);
  if (!r.group.Wait(int64_t{timeout_s} * 1000)) {
    RemovePlacementGroup(r.group);
    return absl::DeadlineExceededError(
        absl::StrCat("could not reserve ", choice.num_nodes, " nodes within ",
                     timeout_s, " s (--reserve-timeout); they are busy"));
  }
  r.host_ids = r.group.BundleNodes();
  return r;
}

}  // namespace

absl::StatusOr<Reservation> ReserveGang(const GangChoice& choice, int timeout_s,
                                        const std::set<std::string>& excluded) {
  try {
    if (!choice.slice_gang) return ReserveNodes(choice, timeout_s, excluded);
    SliceReservation slice =
        ReserveTpuSlice(choice.slice, int64_t{timeout_s} * 1000);
    Reservation r;
    r.group = slice.group;
    r.host_ids = slice.hosts;
    return r;
  } catch (const TimeoutError& e) {
    return absl::DeadlineExceededError(e.what());
  } catch (const Error& e) {
    return absl::UnavailableError(e.what());
  }
}

void ReleaseGang(const PlacementGroup& group) {
  try {
    RemovePlacementGroup(group);
  } catch (const Error&) {
  }
}

}  // namespace shoal::launch
