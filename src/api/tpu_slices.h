// How TPU slices are found on a cluster and laid out as placement groups
// (shoal/tpu.h): pure functions of the cluster's node records and a
// request, so that which slices a reservation takes, and which host each
// bundle goes to, are tested without a cluster.
#ifndef SHOAL_API_TPU_SLICES_H_
#define SHOAL_API_TPU_SLICES_H_

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "accel/tpu.h"
#include "shoal/cluster.h"
#include "shoal/placement.h"
#include "shoal/shoal.pb.h"
#include "shoal/tpu.h"

namespace shoal::internal {

// One slice as the cluster has it, from its hosts' labels.
struct ClusterSlice {
  // Its TPU_NAME (shoal.io/tpu-slice-name); a one-host slice without one
  // is named by its node id.
  std::string name;
  bool named = true;
  accel::TpuAcceleratorType type;
  // Index: TPU worker id; null where no live host is that worker.
  std::vector<const NodeInfo*> hosts;
  // Why it is not intact ("worker 1's host (node ab12, 10.0.0.3) is
  // dead"); empty when every worker's host is alive with all its chips.
  std::string missing;
  // Per worker: some of its chips are held, or a live placement group has
  // a bundle pinned to it (being placed, or placed).
  std::vector<bool> busy;
  // Per worker: a live placement group has a bundle pinned to it. A worker
  // busy but not claimed is held by work that ends, or by a group that was
  // just removed.
  std::vector<bool> claimed;
  // Intact, and no worker busy.
  bool idle = false;

  bool intact() const { return missing.empty(); }
};

// The cluster's nodes as shoal::Nodes() gives them.
std::vector<NodeInfo> NodesOf(const proto::ClusterStatus& status);

// (slice name, worker id) of every host a live (pending or created)
// placement group has pinned a bundle to by label selector.
using ClaimedWorkers = std::set<std::pair<std::string, std::string>>;
ClaimedWorkers ClaimedBy(const proto::ClusterStatus& status);

// Whether group `mine` (in `status`) pins a bundle to a worker that a live
// group made before it (by created_ms; made in the same ms, a smaller id)
// pins too. Two drivers that chose the same slice at once both see it, and
// exactly one of them, the later, is contested: it chooses again.
bool Contested(const proto::ClusterStatus& status, const std::string& mine);

// Every TPU slice that has a host in `nodes` (alive or dead), by name; the
// workers in `claimed` count as busy. Hosts whose labels do not say their
// slice type are left out.
std::vector<ClusterSlice> ClusterSlices(const std::vector<NodeInfo>& nodes,
                                        const ClaimedWorkers& claimed = {});

// How a request's slices are cut into bundles.
struct SliceLayout {
  accel::TpuAcceleratorType type;        // of each slice
  std::map<std::string, double> bundle;  // one bundle's resources
  int bundles_per_host = 1;
  int bundles_per_slice() const { return type.hosts * bundles_per_host; }
};

// InvalidArgument, saying why, for a bad topology or generation, a count
// of slices under 1, or bundles that do not divide a host evenly.
absl::StatusOr<SliceLayout> LayoutSlices(const tpu::SliceRequest& request);

// The layout of a slice of `type` with one bundle per host: its chips and
// a CPU.
SliceLayout WholeHostLayout(const accel::TpuAcceleratorType& type);

// The `count` slices of `type` a reservation takes: intact ones, idle
// first, then those no live group claims, then the rest, each in name
// order (a busy slice is waited for). FailedPrecondition when the cluster has
// fewer intact slices of that type, naming each slice that is not intact
// and why, or the types it has.
absl::StatusOr<std::vector<const ClusterSlice*>> ChooseSlices(
    const std::vector<ClusterSlice>& slices,
    const accel::TpuAcceleratorType& type, int count);

// The sub-slices a slice of type `parent` divides into with a chip grid of
// `sub` ({2, 2, 2}): tiles of its host grid (x fastest, as worker ids
// count hosts), in index order, each as its hosts' worker ids in order.
// InvalidArgument when `sub` does not tile the slice in whole hosts.
absl::StatusOr<std::vector<std::vector<int>>> SubsliceWorkers(
    const accel::TpuAcceleratorType& parent, const std::vector<int>& sub);

// A sub-slice a reservation takes.
struct SubsliceChoice {
  const ClusterSlice* slice = nullptr;
  int index = 0;
  std::vector<int> workers;
};

// The first idle sub-slice of `sub`'s grid (index `index`, or any when -1)
// among the intact slices of `sub`'s generation that it tiles, by slice
// name then index; else the first that no live group claims (to be waited
// for: its hosts are being given back, or run work that ends).
// FailedPrecondition, saying what the cluster has, when live groups claim
// every such sub-slice or none of the slices can be cut so.
absl::StatusOr<SubsliceChoice> ChooseSubslice(
    const std::vector<ClusterSlice>& slices,
    const accel::TpuAcceleratorType& sub, int index);

// The groups that reserve `chosen` with `layout`: one, or one per slice.
// Each bundle is pinned by label selector to its slice and TPU worker;
// `request`'s own selectors are merged in (the slice's labels win).
std::vector<PlacementGroupOptions> SliceGroupOptions(
    const tpu::SliceRequest& request, const SliceLayout& layout,
    const std::vector<const ClusterSlice*>& chosen);

}  // namespace shoal::internal

#endif  // SHOAL_API_TPU_SLICES_H_
