#include "launch/gang_reservation.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "accel/tpu.h"
#include "shoal/api.h"
#include "shoal/tpu.h"

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

// The slice type to reserve `choice.num_slices` of: `choice.slice_type`, or
// the only one the cluster's live TPU hosts have; with its topology.
absl::StatusOr<std::pair<std::string, std::string>> SliceTypeOf(
    const GangChoice& choice, const std::vector<NodeInfo>& nodes) {
  std::map<std::string, std::string> types;  // pod type -> topology
  for (const NodeInfo& n : nodes) {
    auto type = n.labels.find("shoal.io/tpu-pod-type");
    auto topology = n.labels.find("shoal.io/tpu-topology");
    if (n.alive && type != n.labels.end() && topology != n.labels.end()) {
      types[type->second] = topology->second;
    }
  }
  std::vector<std::string> names;
  for (const auto& [type, topology] : types) names.push_back(type);
  if (choice.slice_type.empty() && types.size() == 1) {
    return *types.begin();
  }
  auto it = types.find(choice.slice_type);
  if (it != types.end()) return *it;
  return absl::InvalidArgumentError(absl::StrCat(
      choice.slice_type.empty()
          ? ""
          : "no TPU slice of type " + choice.slice_type + " is alive; ",
      "the cluster's TPU slices are of type", names.size() == 1 ? " " : "s ",
      names.empty() ? "(none)" : absl::StrJoin(names, ", "),
      names.size() > 1 && choice.slice_type.empty()
          ? "; say which with --slice-type"
          : ""));
}

// Every host of `choice.num_slices` whole slices, slice after slice, each
// in worker-id order (shoal/tpu.h). Throws shoal::Error when the cluster
// fails the reservation.
absl::StatusOr<Reservation> ReserveSlicesGang(const GangChoice& choice,
                                              int timeout_s) {
  auto type = SliceTypeOf(choice, Nodes());
  if (!type.ok()) return type.status();
  auto parsed = accel::ParseTpuAcceleratorType(type->first, type->second);
  if (!parsed.ok()) return parsed.status();
  tpu::SliceRequest request;
  request.topology = type->second;
  request.accelerator_version = parsed->generation;
  request.num_slices = choice.num_slices;
  request.strategy = PlacementStrategy::kStrictSpread;
  tpu::SliceGroup slices;
  try {
    slices = tpu::ReserveSlices(request);
  } catch (const InfeasibleError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  if (!slices.Wait(int64_t{timeout_s} * 1000)) {
    slices.Release();
    return absl::DeadlineExceededError(absl::StrCat(
        "could not reserve ", choice.num_slices, " ", type->first,
        " slices within ", timeout_s, " s (--reserve-timeout); they are busy"));
  }
  Reservation r;
  r.group = slices.groups.front();
  for (int s = 0; s < slices.num_slices(); ++s) {
    for (const std::string& host : slices.Hosts(s)) {
      r.host_ids.push_back(host);
      r.slice_of_host.push_back(s);
    }
  }
  return r;
}

// An idle sub-slice of `choice.subslice`'s grid, of the generation of
// `choice.slice_type` or of the cluster's only one.
absl::StatusOr<Reservation> ReserveSubsliceGang(const GangChoice& choice,
                                                int timeout_s) {
  std::set<std::string> generations;
  for (const NodeInfo& n : Nodes()) {
    auto type = n.labels.find("shoal.io/tpu-pod-type");
    if (!n.alive || type == n.labels.end()) continue;
    auto parsed = accel::ParseTpuAcceleratorType(type->second);
    if (parsed.ok() &&
        (choice.slice_type.empty() || choice.slice_type == parsed->name)) {
      generations.insert(parsed->generation);
    }
  }
  if (generations.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--subslice ", choice.subslice, ": the cluster has ",
        generations.empty() ? "no live TPU slice"
                            : absl::StrCat("TPU generations ",
                                           absl::StrJoin(generations, ", ")),
        generations.empty() ? ""
                            : "; name the whole slices' type with "
                              "--slice-type"));
  }
  tpu::SubsliceRequest request;
  request.topology = choice.subslice;
  request.accelerator_version = *generations.begin();
  request.subslice_index = choice.subslice_index;
  tpu::Subslice sub;
  try {
    sub = tpu::ReserveSubslice(request);
  } catch (const InfeasibleError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  if (!sub.Wait(int64_t{timeout_s} * 1000)) {
    sub.Release();
    return absl::DeadlineExceededError(absl::StrCat(
        "could not reserve a ", choice.subslice, " sub-slice within ",
        timeout_s, " s (--reserve-timeout); its hosts are busy"));
  }
  Reservation r;
  r.group = sub.group;
  r.host_ids = sub.Hosts();
  r.subslice_type = sub.pod_type;
  r.subslice_topology = sub.topology;
  return r;
}

}  // namespace

std::vector<proto::LaunchHost> HostsOfReservation(const Reservation& r,
                                                  int nproc_per_node) {
  std::vector<proto::LaunchHost> hosts =
      HostsOf(r.host_ids, Nodes(), nproc_per_node, r.slice_of_host);
  if (!r.subslice_type.empty()) {
    for (size_t i = 0; i < hosts.size(); ++i) {
      hosts[i].set_tpu_type(r.subslice_type);
      hosts[i].set_tpu_topology(r.subslice_topology);
      hosts[i].set_tpu_worker_id(static_cast<int>(i));
    }
  }
  return hosts;
}

absl::StatusOr<Reservation> ReserveGang(const GangChoice& choice, int timeout_s,
                                        const std::set<std::string>& excluded) {
  try {
    if (!choice.slice_gang) {
      std::set<std::string> unusable = excluded;
      unusable.insert(choice.outside.begin(), choice.outside.end());
      return ReserveNodes(choice, timeout_s, unusable);
    }
    if (choice.num_slices > 0) return ReserveSlicesGang(choice, timeout_s);
    if (!choice.subslice.empty()) return ReserveSubsliceGang(choice, timeout_s);
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
