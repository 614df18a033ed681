// Named resource quantities ("CPU": 1.5, "accel_x": 4, "memory": bytes) as the
// scheduler keeps them: fixed-point integers (value * kResourceUnit), so that
// adding and subtracting fractional CPUs never drifts.
//
// Thread-compatible value type.
#ifndef SHOAL_SCHEDULING_RESOURCE_SET_H_
#define SHOAL_SCHEDULING_RESOURCE_SET_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace shoal::proto {
class ResourceMap;
}

namespace shoal {

inline constexpr int64_t kResourceUnit = 10000;

class ResourceSet {
 public:
  ResourceSet() = default;

  // From user-facing quantities. Fails (InvalidArgument, naming the resource)
  // for negative or non-finite values, empty names, and fractional amounts of
  // resources that must be whole: every resource except CPU, memory and
  // object_store_memory must be a whole number when it is >= 1 (a fraction
  // below 1 is allowed, as Ray allows GPU: 0.5).
  static absl::StatusOr<ResourceSet> FromDoubles(
      const std::map<std::string, double>& amounts);
  // Parses a JSON object such as {"accel_x": 4, "CPU": 2} (the form of
  // `shoal start --resources`). Errors name the offending key or the JSON
  // problem.
  static absl::StatusOr<ResourceSet> FromJson(const std::string& json);

  static ResourceSet FromProto(const proto::ResourceMap& map);
  void ToProto(proto::ResourceMap* map) const;

  // Fixed-point access.
  int64_t Get(const std::string& name) const;        // 0 when absent
  void Set(const std::string& name, int64_t fixed);  // 0 removes
  double GetDouble(const std::string& name) const;

  bool empty() const { return amounts_.empty(); }
  const std::map<std::string, int64_t>& amounts() const { return amounts_; }
  std::map<std::string, double> ToDoubles() const;

  // True when every quantity in `demand` is <= the same quantity here.
  bool Contains(const ResourceSet& demand) const;
  // Adds / subtracts per name (entries that reach 0 are removed on Subtract).
  // A sum past the int64 range stops at its limit.
  void Add(const ResourceSet& other);
  void Subtract(const ResourceSet& other);

  // {"CPU": 1, "accel_x": 4} in a stable (sorted) order; fractional values
  // printed with up to 4 decimals, memory-like values as bytes.
  std::string DebugString() const;

  // The names in `demand` whose amount exceeds this set's, for error messages.
  std::vector<std::string> MissingFor(const ResourceSet& demand) const;

  bool operator==(const ResourceSet& other) const = default;

 private:
  std::map<std::string, int64_t> amounts_;
};

// Resources that a placement group's bundles add to their nodes:
// "<resource>_group_<index>_<group id>" (one bundle) and
// "<resource>_group_<group id>" (any bundle of the group). Internal: shown
// per group, never among the cluster's resources.
struct BundleResource {
  std::string base;       // "CPU"
  std::string group_id;   // "d04157891339"
  int bundle_index = -1;  // -1: any bundle
};
// Parses `name` as a bundle resource; false for an ordinary resource.
bool ParseBundleResource(const std::string& name, BundleResource* out);
inline bool IsBundleResource(const std::string& name) {
  return name.find("_group_") != std::string::npos;
}
// `set` without its bundle resources.
ResourceSet WithoutBundleResources(const ResourceSet& set);

// Node labels from `--labels`: a JSON object of strings such as
// {"zone": "us-east-1a"}. Fails (InvalidArgument, naming the label and how
// to write it) for anything else.
absl::StatusOr<std::map<std::string, std::string>> ParseLabelsJson(
    const std::string& json);

// Human form of a quantity for `shoal status`: "1.0", "0.5", and for memory
// resources (memory, object_store_memory) bytes as "1.50GiB".
std::string FormatQuantity(const std::string& name, int64_t fixed);

// Why no node can satisfy `demand`, for the infeasible-request error:
// "no node has 8 accel_x; the largest is 4 on node n2 (127.0.0.1:40121)".
// `nodes` pairs a node description ("n2 (127.0.0.1:40121)") with its total
// resources. Picks the first resource of `demand` that no node covers.
struct NodeTotals {
  std::string description;
  ResourceSet total;
};
std::string DescribeInfeasible(const ResourceSet& demand,
                               const std::vector<NodeTotals>& nodes);

}  // namespace shoal

#endif  // SHOAL_SCHEDULING_RESOURCE_SET_H_
