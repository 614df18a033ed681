// TPU slices reserved as wholes (shoal/tpu.h, and ReserveTpuSlice of
// shoal/placement.h): which slices and bundles come from api/tpu_slices.h;
// this asks the head for the nodes and makes the groups.
#include "shoal/tpu.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "accel/accelerator_manager.h"
#include "api/core_runtime.h"
#include "api/tpu_slices.h"
#include "common/random.h"
#include "head_client/head_client.h"
#include "scheduling/label_selector.h"
#include "shoal/cluster.h"
#include "shoal/errors.h"

namespace shoal {
namespace {

// The cluster's TPU slices whose hosts have label `key` = `value` (every
// node when `key` is empty), from one reading of its nodes and placement
// groups. Not copyable: the slices point into the nodes.
struct SliceView {
  std::vector<NodeInfo> nodes;
  std::vector<internal::ClusterSlice> slices;

  SliceView(const std::string& key, const std::string& value) {
    proto::ClusterStatusRequest request;
    request.set_nodes_and_groups(true);
    if (!key.empty()) (*request.mutable_nodes()->mutable_labels())[key] = value;
    auto status = internal::RequireRuntime()->head().ClusterStatus(request);
    if (!status.ok()) {
      throw Error(
          absl::StrCat("cannot reach the head: ", status.status().message()));
    }
    nodes = internal::NodesOf(*status);
    slices = internal::ClusterSlices(nodes, internal::ClaimedBy(*status));
  }
  SliceView(const SliceView&) = delete;
  SliceView& operator=(const SliceView&) = delete;
};

// The type of `version` slices of `topology`; throws shoal::Error.
accel::TpuAcceleratorType TypeOf(const std::string& version,
                                 const std::string& topology) {
  auto type = accel::TpuTypeFromTopology(version, topology);
  if (!type.ok()) throw Error(std::string(type.status().message()));
  return *type;
}

// True once `groups` are placed; on a failure, releases them all.
bool WaitAll(const std::vector<PlacementGroup>& groups, int64_t timeout_ms);

// Removes `groups`, ignoring the ones already gone.
void RemoveAll(const std::vector<PlacementGroup>& groups) {
  for (const PlacementGroup& g : groups) {
    try {
      RemovePlacementGroup(g);
    } catch (const Error&) {
    }
  }
}

// Makes one group per options, all or none.
std::vector<PlacementGroup> CreateAll(
    const std::vector<PlacementGroupOptions>& options) {
  std::vector<PlacementGroup> made;
  try {
    for (const PlacementGroupOptions& o : options) {
      made.push_back(CreatePlacementGroup(o));
    }
  } catch (...) {
    RemoveAll(made);
    throw;
  }
  return made;
}

bool WaitAll(const std::vector<PlacementGroup>& groups, int64_t timeout_ms) {
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(std::max<int64_t>(0, timeout_ms));
  for (const PlacementGroup& g : groups) {
    int64_t left = -1;
    if (timeout_ms >= 0) {
      left = std::max<int64_t>(
          0, std::chrono::duration_cast<std::chrono::milliseconds>(
                 deadline - std::chrono::steady_clock::now())
                 .count());
    }
    try {
      if (!g.Wait(left)) return false;
    } catch (const Error&) {
      RemoveAll(groups);  // all or none
      throw;
    }
  }
  return true;
}

// How many times a reservation chooses again when one made at the same
// moment took the same slice; then it keeps what it has, and waits.
constexpr int kChoices = 4;

// Whether a reservation made just before contests any of `groups`
// (internal::Contested); if so they are removed, to choose again.
bool GaveWay(const std::vector<PlacementGroup>& groups) {
  proto::ClusterStatusRequest request;
  request.set_nodes_and_groups(true);
  // No node id starts with '.': the groups alone.
  (*request.mutable_nodes()->mutable_labels())[kLabelNodeId].assign(1, '.');
  auto status = internal::RequireRuntime()->head().ClusterStatus(request);
  if (!status.ok()) return false;  // the wait says what is wrong
  for (const PlacementGroup& g : groups) {
    if (internal::Contested(*status, g.id())) {
      RemoveAll(groups);
      return true;
    }
  }
  return false;
}

}  // namespace

namespace tpu {

// One choice and its groups (ReserveSlices and ReserveSubslice choose again
// when a reservation made at the same moment took the same hosts).
SliceGroup ReserveSlicesOnce(const SliceRequest& request);
Subslice ReserveSubsliceOnce(const SubsliceRequest& request);

SliceShape ShapeOf(const std::string& topology,
                   const std::string& accelerator_version) {
  accel::TpuAcceleratorType type = TypeOf(accelerator_version, topology);
  return {type.name, type.hosts, type.chips_per_host, type.chips};
}

SliceGroup ReserveSlices(const SliceRequest& request) {
  for (int choice = 1;; ++choice) {
    SliceGroup out = ReserveSlicesOnce(request);
    if (choice == kChoices || !GaveWay(out.groups)) return out;
  }
}

SliceGroup ReserveSlicesOnce(const SliceRequest& request) {
  auto layout = internal::LayoutSlices(request);
  if (!layout.ok()) throw Error(std::string(layout.status().message()));
  const SliceView view(accel::kLabelTpuPodType, layout->type.name);
  auto chosen =
      internal::ChooseSlices(view.slices, layout->type, request.num_slices);
  if (!chosen.ok() && view.slices.empty()) {
    // None of that type: the error lists the types there are.
    const SliceView all("", "");
    chosen =
        internal::ChooseSlices(all.slices, layout->type, request.num_slices);
  }
  if (!chosen.ok()) {
    throw InfeasibleError(std::string(chosen.status().message()));
  }
  const int per_slice = layout->bundles_per_slice();
  if (!request.bundle_label_selector.empty() &&
      static_cast<int>(request.bundle_label_selector.size()) !=
          per_slice * request.num_slices) {
    throw Error(absl::StrCat("bundle_label_selector has ",
                             request.bundle_label_selector.size(),
                             " selectors for ", per_slice * request.num_slices,
                             " bundles; give one per bundle"));
  }
  SliceGroup out;
  const std::vector<PlacementGroupOptions> options =
      internal::SliceGroupOptions(request, *layout, *chosen);
  out.groups = CreateAll(options);
  for (const PlacementGroupOptions& o : options) {
    out.bundle_label_selector.insert(out.bundle_label_selector.end(),
                                     o.bundle_label_selector.begin(),
                                     o.bundle_label_selector.end());
  }
  for (const internal::ClusterSlice* s : *chosen) {
    out.slice_names.push_back(s->name);
  }
  out.pod_type = layout->type.name;
  out.topology = layout->type.TopologyString();
  out.hosts_per_slice = layout->type.hosts;
  out.chips_per_host = layout->type.chips_per_host;
  out.bundles_per_host = layout->bundles_per_host;
  out.bundle_resources = layout->bundle;
  return out;
}

std::map<std::string, std::string> CoordinatorEnvVars(
    const std::string& coordinator_address, int num_slices, int slice_id,
    int port) {
  return {{"MEGASCALE_COORDINATOR_ADDRESS", coordinator_address},
          {"MEGASCALE_PORT", absl::StrCat(port)},
          {"MEGASCALE_NUM_SLICES", absl::StrCat(num_slices)},
          {"MEGASCALE_SLICE_ID", absl::StrCat(slice_id)}};
}

int CountReadySlices(const std::string& topology,
                     const std::string& accelerator_version) {
  accel::TpuAcceleratorType type = TypeOf(accelerator_version, topology);
  const SliceView view(accel::kLabelTpuPodType, type.name);
  int ready = 0;
  for (const internal::ClusterSlice& s : view.slices) {
    ready +=
        s.idle && s.type.name == type.name && s.type.topology == type.topology;
  }
  return ready;
}

std::pair<PlacementGroup, int> SliceGroup::Bundle(int slice, int bundle) const {
  if (slice < 0 || slice >= num_slices() || bundle < 0 ||
      bundle >= bundles_per_slice()) {
    throw Error(absl::StrCat("no bundle ", bundle, " of slice ", slice,
                             ": the group has ", num_slices(), " slices of ",
                             bundles_per_slice(), " bundles"));
  }
  if (groups.size() == 1) {
    return {groups[0], slice * bundles_per_slice() + bundle};
  }
  return {groups.at(slice), bundle};
}

bool SliceGroup::Wait(int64_t timeout_ms) const {
  return WaitAll(groups, timeout_ms);
}

std::vector<std::string> SliceGroup::Hosts(int slice) const {
  // One question to the head: the slice's bundles are all in one group.
  const PlacementGroup group = Bundle(slice, 0).first;
  const std::vector<std::string> nodes = group.BundleNodes();
  std::vector<std::string> hosts;
  for (int h = 0; h < hosts_per_slice; ++h) {
    const int index = Bundle(slice, h * bundles_per_host).second;
    hosts.push_back(index < static_cast<int>(nodes.size()) ? nodes[index] : "");
  }
  return hosts;
}

void SliceGroup::Release() const { RemoveAll(groups); }

Subslice ReserveSubslice(const SubsliceRequest& request) {
  for (int choice = 1;; ++choice) {
    Subslice out = ReserveSubsliceOnce(request);
    if (choice == kChoices || !GaveWay({out.group})) return out;
  }
}

Subslice ReserveSubsliceOnce(const SubsliceRequest& request) {
  const accel::TpuAcceleratorType sub =
      TypeOf(request.accelerator_version, request.topology);
  const SliceView view(accel::kLabelAcceleratorType, sub.GenerationLabel());
  auto chosen =
      internal::ChooseSubslice(view.slices, sub, request.subslice_index);
  if (!chosen.ok()) {
    throw InfeasibleError(std::string(chosen.status().message()));
  }
  const internal::ClusterSlice& slice = *chosen->slice;
  PlacementGroupOptions options;
  options.name = request.name;
  options.lifetime = request.lifetime;
  options.strategy = PlacementStrategy::kStrictSpread;
  Subslice out;
  out.bundle_resources = internal::WholeHostLayout(slice.type).bundle;
  for (int w : chosen->workers) {
    options.bundles.push_back(out.bundle_resources);
    options.bundle_label_selector.push_back(
        {{accel::kLabelTpuSliceName, slice.name},
         {accel::kLabelTpuWorkerId, absl::StrCat(w)}});
  }
  out.group = CreatePlacementGroup(options);
  out.slice_name = slice.name;
  out.parent_type = slice.type.name;
  out.pod_type = sub.name;
  out.topology = sub.TopologyString();
  out.subslice_index = chosen->index;
  out.worker_ids = chosen->workers;
  out.chips_per_host = slice.type.chips_per_host;
  out.bundle_label_selector = options.bundle_label_selector;
  return out;
}

bool Subslice::Wait(int64_t timeout_ms) const {
  return WaitAll({group}, timeout_ms);
}

std::vector<std::string> Subslice::Hosts() const { return group.BundleNodes(); }

void Subslice::Release() const { RemoveAll({group}); }

}  // namespace tpu

SliceReservation ReserveTpuSlice(const std::string& slice_name,
                                 int64_t timeout_ms) {
  const SliceView view(slice_name.empty() ? "" : accel::kLabelTpuSliceName,
                       slice_name);
  const std::vector<internal::ClusterSlice>& slices = view.slices;
  const internal::ClusterSlice* slice = nullptr;
  if (slice_name.empty()) {
    if (slices.empty()) throw Error("the cluster has no TPU slice hosts");
    if (slices.size() > 1) {
      throw Error(
          "the cluster has several TPU slices; name the one to reserve");
    }
    slice = &slices.front();
  } else {
    for (const auto& s : slices) {
      if (s.name == slice_name) slice = &s;
    }
    if (slice == nullptr) {
      throw Error("no host of TPU slice \"" + slice_name +
                  "\" is in the cluster");
    }
  }
  if (!slice->intact()) {
    throw Error(absl::StrCat("TPU slice ", slice->name,
                             " is not whole: ", slice->missing,
                             "; start node agents on the missing hosts "
                             "(shoal start --address=...)"));
  }
  const internal::SliceLayout layout = internal::WholeHostLayout(slice->type);
  tpu::SliceRequest request;
  request.strategy = PlacementStrategy::kStrictSpread;
  request.name = absl::StrCat("tpu-slice-", slice->name, "-", RandomHex(3));
  std::vector<PlacementGroupOptions> options =
      internal::SliceGroupOptions(request, layout, {slice});
  SliceReservation out;
  out.slice_name = slice->name;
  out.accelerator_type = slice->type.name;
  out.chips_per_host = slice->type.chips_per_host;
  out.group = CreatePlacementGroup(options.front());
  if (!out.group.Wait(timeout_ms)) {
    RemovePlacementGroup(out.group);
    throw TimeoutError(absl::StrCat(
        "TPU slice ", slice->name, " was not free within ", timeout_ms, " ms"));
  }
  out.hosts = out.group.BundleNodes();
  return out;
}

}  // namespace shoal
