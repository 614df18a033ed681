// TPU slices as units of scheduling: whole slices reserved by topology
// (Ray's ray.util.tpu.SlicePlacementGroup), one group for all of them or one
// per slice, all or nothing.
//
//   shoal::tpu::SliceGroup slices = shoal::tpu::ReserveSlices(
//       {.topology = "2x2x2", .accelerator_version = "v5p", .num_slices = 2});
//   slices.Wait(10'000);
//   // bundle b of slice s is slices.Bundle(s, b); its host is TPU worker b
//   // of slices.slice_names[s] (one bundle per host by default).
//   slices.Release();
#ifndef SHOAL_TPU_H_
#define SHOAL_TPU_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "shoal/placement.h"

namespace shoal::tpu {

struct SliceRequest {
  std::string topology;             // the slice's chip grid: "2x2x2", "4x4"
  std::string accelerator_version;  // "v5p", "TPU-V5P", "v6e", "v5e"
  int num_slices = 1;
  // One placement group per slice (Ray's pg_per_slice) rather than one for
  // all; either way every slice is reserved or none is.
  bool group_per_slice = false;
  // One bundle's resources. Empty: a whole host (its chips and 1 CPU), one
  // bundle per host. A share of a host ({"TPU": 1}) makes several bundles
  // per host, still in worker-id order.
  std::map<std::string, double> resources_per_bundle;
  PlacementStrategy strategy = PlacementStrategy::kSpread;
  std::string name;  // of the group (per slice: "<name>_slice_<i>")
  Lifetime lifetime = Lifetime::kNonDetached;
  // None, or one per bundle of all slices: more labels each bundle's host
  // must have. The slice's own labels (name, worker id) take precedence.
  std::vector<std::map<std::string, std::string>> bundle_label_selector;
};

// Slices reserved together. Bundles are laid out slice after slice, and
// within a slice in TPU worker-id order: bundle b of a slice is on worker
// b / bundles_per_host.
struct SliceGroup {
  std::vector<PlacementGroup> groups;    // one, or one per slice
  std::vector<std::string> slice_names;  // slice i is slice_names[i]
  std::string pod_type;                  // "v5p-16"
  std::string topology;                  // "2x2x2"
  int hosts_per_slice = 0;
  int chips_per_host = 0;
  int bundles_per_host = 1;
  std::map<std::string, double> bundle_resources;
  // Each bundle's label selector, over all slices: its slice and worker.
  std::vector<std::map<std::string, std::string>> bundle_label_selector;

  int num_slices() const { return static_cast<int>(slice_names.size()); }
  int bundles_per_slice() const { return hosts_per_slice * bundles_per_host; }
  // The group and bundle index of bundle `bundle` of slice `slice`.
  std::pair<PlacementGroup, int> Bundle(int slice, int bundle) const;
  // True once every slice is reserved; false if timeout_ms (>= 0) passes
  // first. Throws shoal::InfeasibleError, naming the slice and host, when
  // a slice cannot be held (a host lost); the other groups are released.
  bool Wait(int64_t timeout_ms) const;
  // The node id of each host of slice `slice`, in worker-id order.
  std::vector<std::string> Hosts(int slice) const;
  // Gives every slice back; tasks still running in them are stopped.
  void Release() const;
};

// Reserves `num_slices` whole slices of the request's type. The slices
// taken are intact (every worker's host alive, with all its chips); idle
// ones are taken first, and a busy one is waited for. Throws
// shoal::InfeasibleError when the cluster has fewer intact slices of that
// type (saying which slices lack which hosts), shoal::Error for a bad
// topology or generation. Returns once the groups are made; Wait() for
// them to be placed.
SliceGroup ReserveSlices(const SliceRequest& request);

// The variables that join the slices of a multi-slice JAX program (Ray's
// get_tpu_coordinator_env_vars): MEGASCALE_COORDINATOR_ADDRESS,
// MEGASCALE_PORT, MEGASCALE_NUM_SLICES and MEGASCALE_SLICE_ID, for a process
// of slice `slice_id` of `num_slices` whose coordinator (worker 0 of slice
// 0) is at `coordinator_address`. `shoal launch --num-slices` sets them.
inline constexpr int kMegascalePort = 8081;
std::map<std::string, std::string> CoordinatorEnvVars(
    const std::string& coordinator_address, int num_slices, int slice_id,
    int port = kMegascalePort);

// How many slices of this topology and generation are intact and idle now
// (Ray's get_num_ready_tpu_slices).
int CountReadySlices(const std::string& topology,
                     const std::string& accelerator_version);

// Part of a slice reserved as a slice of its own (Ray's
// SubslicePlacementGroup): a 2x2x2 of a v5p-32 (2x2x4) is two of its four
// hosts. Sub-slices tile the slice's host grid; worker ids count hosts x
// first, then y, then z (a 2x4 of a v6e 4x4 is workers {0, 2} or {1, 3}).
struct SubsliceRequest {
  std::string topology;             // the sub-slice's chip grid: "2x2x2"
  std::string accelerator_version;  // "v5p", "TPU-V5P"
  int subslice_index = -1;          // which tile; -1: the first idle one
  std::string name;
  Lifetime lifetime = Lifetime::kNonDetached;
};

struct Subslice {
  PlacementGroup group;     // one bundle per host: its chips and 1 CPU
  std::string slice_name;   // of the whole slice
  std::string parent_type;  // "v5p-32"
  std::string pod_type;     // the sub-slice as a slice: "v5p-16"
  std::string topology;     // "2x2x2"
  int subslice_index = 0;
  std::vector<int> worker_ids;  // the whole slice's workers, in order
  int chips_per_host = 0;
  std::map<std::string, double> bundle_resources;
  std::vector<std::map<std::string, std::string>> bundle_label_selector;

  int num_hosts() const { return static_cast<int>(worker_ids.size()); }
  // As SliceGroup's: placed within timeout_ms (>= 0), InfeasibleError when
  // a host is lost for good.
  bool Wait(int64_t timeout_ms) const;
  std::vector<std::string> Hosts() const;  // node ids, bundle order
  void Release() const;
};

// Reserves an idle sub-slice of an intact slice of the request's
// generation; a sub-slice that is being reserved counts as busy, so two
// reservations made one after the other get two different sub-slices.
// Throws shoal::InfeasibleError when no slice can be cut so or every such
// sub-slice is busy (saying which), shoal::Error for a bad topology.
Subslice ReserveSubslice(const SubsliceRequest& request);

// What one slice of this topology holds: its type ("v5p-16"), hosts and
// chips per host. Throws shoal::Error for a bad topology or generation.
struct SliceShape {
  std::string pod_type;
  int hosts = 0;
  int chips_per_host = 0;
  int chips = 0;
};
SliceShape ShapeOf(const std::string& topology,
                   const std::string& accelerator_version);

}  // namespace shoal::tpu

#endif  // SHOAL_TPU_H_
