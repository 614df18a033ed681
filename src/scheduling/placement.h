// Where the bundles of a placement group go: a pure function of the bundles,
// the strategy and the nodes' free resources.
#ifndef SHOAL_SCHEDULING_PLACEMENT_H_
#define SHOAL_SCHEDULING_PLACEMENT_H_

#include <optional>
#include <string>
#include <vector>

#include "scheduling/label_selector.h"
#include "scheduling/resource_set.h"
#include "shoal/shoal.pb.h"

namespace shoal {

enum class PlacementStrategy { kPack, kSpread, kStrictPack, kStrictSpread };

struct PlacementNode {
  std::string node_id;
  ResourceSet available;
  // Its record, for its labels; null: a node without labels.
  const proto::NodeInfo* info = nullptr;
};

// True when `node` may hold a bundle of `selector` (an empty one: any).
bool NodeMatches(const LabelSelector& selector, const PlacementNode& node);

// The node of each bundle (same order as `bundles`), or nullopt when the
// nodes cannot hold them now. Nodes are tried in the order given (callers
// pass a stable order, e.g. by address or TPU worker id):
//   STRICT_PACK   every bundle on one node;
//   PACK          as few nodes as possible, filling one before the next;
//   STRICT_SPREAD every bundle on a different node;
//   SPREAD        different nodes while there are any, then reuse.
// `selectors` (empty, or one per bundle) limit each bundle to the nodes
// whose labels match its selector (Ray's bundle_label_selector).
std::optional<std::vector<std::string>> PlaceBundles(
    const std::vector<ResourceSet>& bundles, PlacementStrategy strategy,
    const std::vector<PlacementNode>& nodes,
    const std::vector<LabelSelector>& selectors = {});

std::string StrategyName(PlacementStrategy strategy);

}  // namespace shoal

#endif  // SHOAL_SCHEDULING_PLACEMENT_H_
