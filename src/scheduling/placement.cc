#include "scheduling/placement.h"

#include <set>

namespace shoal {
namespace {

// First-fit of `bundles` onto `nodes`, each bundle on a node not in `avoid`
// if `distinct`; updates the free resources it uses.
std::optional<std::vector<std::string>> Fill(
    const std::vector<ResourceSet>& bundles, std::vector<PlacementNode> nodes,
    bool distinct, bool prefer_distinct) {
  std::vector<std::string> out;
  std::set<size_t> used;
  for (const ResourceSet& bundle : bundles) {
    std::optional<size_t> chosen;
    for (int pass = 0; pass < 2 && !chosen; ++pass) {
      bool avoid_used = distinct || (prefer_distinct && pass == 0);
      for (size_t i = 0; i < nodes.size(); ++i) {
        if (avoid_used && used.count(i)) continue;
        if (nodes[i].available.Contains(bundle)) {
          chosen = i;
          break;
        }
      }
      if (!prefer_distinct) break;
    }
    if (!chosen) return std::nullopt;
    nodes[*chosen].available.Subtract(bundle);
    used.insert(*chosen);
    out.push_back(nodes[*chosen].node_id);
  }
  return out;
}

}  // namespace

std::optional<std::vector<std::string>> PlaceBundles(
    const std::vector<ResourceSet>& bundles, PlacementStrategy strategy,
    const std::vector<PlacementNode>& nodes) {
  if (bundles.empty()) return std::vector<std::string>();
  switch (strategy) {
    case PlacementStrategy::kStrictPack:
    case PlacementStrategy::kPack: {
      ResourceSet sum;
      for (const auto& b : bundles) sum.Add(b);
      for (const auto& n : nodes) {
        if (n.available.Contains(sum)) {
          return std::vector<std::string>(bundles.size(), n.node_id);
        }
      }
      if (strategy == PlacementStrategy::kStrictPack) return std::nullopt;
      return Fill(bundles, nodes, /*distinct=*/false,
                  /*prefer_distinct=*/false);
    }
    case PlacementStrategy::kStrictSpread:
      if (bundles.size() > nodes.size()) return std::nullopt;
      return Fill(bundles, nodes, /*distinct=*/true, /*prefer_distinct=*/false);
    case PlacementStrategy::kSpread:
      return Fill(bundles, nodes, /*distinct=*/false, /*prefer_distinct=*/true);
  }
  return std::nullopt;
}

std::string StrategyName(PlacementStrategy strategy) {
  switch (strategy) {
    case PlacementStrategy::kPack:
      return "PACK";
    case PlacementStrategy::kSpread:
      return "SPREAD";
    case PlacementStrategy::kStrictPack:
      return "STRICT_PACK";
    case PlacementStrategy::kStrictSpread:
      return "STRICT_SPREAD";
  }
  return "?";
}

}  // namespace shoal
