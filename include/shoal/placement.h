// Placement groups: bundles of resources reserved together, and a TPU slice
// reserved as one gang.
#ifndef SHOAL_PLACEMENT_H_
#define SHOAL_PLACEMENT_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "shoal/internal/runtime.h"

namespace shoal {

enum class PlacementStrategy { kPack, kSpread, kStrictPack, kStrictSpread };

// How long a placement group (or, later, an actor) lives: with the job
// (the driver that created it) by default, as in Ray, or until removed.
enum class Lifetime { kNonDetached, kDetached };

struct PlacementGroupOptions {
  std::string name;  // optional; GetPlacementGroup(name) finds it
  // Each bundle's resources, e.g. {{"CPU", 1}, {"TPU", 4}}.
  std::vector<std::map<std::string, double>> bundles;
  PlacementStrategy strategy = PlacementStrategy::kPack;
  // kNonDetached: removed when the job that created it ends (its driver
  // exits, however it exits). kDetached: only by RemovePlacementGroup.
  Lifetime lifetime = Lifetime::kNonDetached;
  // None, or one per bundle: the node labels each bundle's node must have,
  // in a task's label_selector syntax ("v", "!v", "in(a,b)", "!in(a,b)"),
  // e.g. {{"ray.io/tpu-worker-id", "0"}, {}} (Ray's bundle_label_selector).
  std::vector<std::map<std::string, std::string>> bundle_label_selector;
};

// A set of resource bundles reserved together on the cluster's nodes: all
// bundles or none (prepared on every node, then committed).
class PlacementGroup {
 public:
  PlacementGroup() = default;
  PlacementGroup(std::string id, std::string name, size_t bundle_count)
      : id_(std::move(id)), name_(std::move(name)), bundles_(bundle_count) {}
  const std::string& id() const { return id_; }
  const std::string& name() const { return name_; }
  size_t bundle_count() const { return bundles_; }
  // True once every bundle is reserved; false if timeout_ms passes first
  // (timeout_ms < 0 waits as long as it takes). Throws
  // shoal::InfeasibleError when the group can never be placed.
  bool Wait(int64_t timeout_ms) const;
  // The node id of each bundle (none until the group is created; "" for a
  // bundle lost with its node and being placed again).
  std::vector<std::string> BundleNodes() const;

 private:
  std::string id_, name_;
  size_t bundles_ = 0;
};

PlacementGroup CreatePlacementGroup(const PlacementGroupOptions& options);

// Every host of a TPU slice reserved as one gang (a STRICT_SPREAD group with
// one whole-host bundle per worker, bundle i on TPU worker i).
struct SliceReservation {
  PlacementGroup group;
  std::string slice_name;
  std::string accelerator_type;  // "v5p-16"
  int chips_per_host = 0;
  std::vector<std::string> hosts;  // node ids, in TPU worker-id order
};
// Reserves slice `slice_name` (empty: the cluster's only slice). Throws
// shoal::Error when the slice is unknown or not all its hosts have joined,
// shoal::TimeoutError when timeout_ms (>= 0) passes first.
SliceReservation ReserveTpuSlice(const std::string& slice_name = "",
                                 int64_t timeout_ms = -1);
// Releases the bundles; tasks still running in them are stopped.
void RemovePlacementGroup(const PlacementGroup& group);
// The live group with this name, if any.
std::optional<PlacementGroup> GetPlacementGroup(const std::string& name);

}  // namespace shoal

#endif  // SHOAL_PLACEMENT_H_
