#include "scheduling/placement.h"

#include <set>

namespace shoal {
namespace {

const LabelSelector kAnyNode;

const LabelSelector& SelectorOf(const std::vector<LabelSelector>& selectors,
                                size_t bundle) {
  return bundle < selectors.size() ? selectors[bundle] : kAnyNode;
}

// First-fit of `bundles` onto `nodes`, each bundle on a node its selector
// matches, and not on one used before if `distinct`; updates the free
// resources it uses.
std::optional<std::vector<std::string>> Fill(
    const std::vector<ResourceSet>& bundles, std::vector<PlacementNode> nodes,
    const std::vector<LabelSelector>& selectors, bool distinct,
    bool prefer_distinct) {
  std::vector<std::string> out;
  std::set<size_t> used;
  for (size_t b = 0; b < bundles.size(); ++b) {
    const ResourceSet& bundle = bundles[b];
    const LabelSelector& selector = SelectorOf(selectors, b);
    std::optional<size_t> chosen;
    for (int pass = 0; pass < 2 && !chosen; ++pass) {
      bool avoid_used = distinct || (prefer_distinct && pass == 0);
      for (size_t i = 0; i < nodes.size(); ++i) {
        if (avoid_used && used.count(i)) continue;
        if (nodes[i].available.Contains(bundle) &&
            NodeMatches(selector, nodes[i])) {
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

bool NodeMatches(const LabelSelector& selector, const PlacementNode& node) {
  if (selector.empty()) return true;
  if (node.info != nullptr) return selector.Matches(*node.info);
  proto::NodeInfo bare;
  bare.set_node_id(node.node_id);
  return selector.Matches(bare);
}

std::optional<std::vector<std::string>> PlaceBundles(
    const std::vector<ResourceSet>& bundles, PlacementStrategy strategy,
    const std::vector<PlacementNode>& nodes,
    const std::vector<LabelSelector>& selectors) {
  if (bundles.empty()) return std::vector<std::string>();
  switch (strategy) {
    case PlacementStrategy::kStrictPack:
    case PlacementStrategy::kPack: {
      ResourceSet sum;
      for (const auto& b : bundles) sum.Add(b);
      auto holds_all = [&](const PlacementNode& n) {
        if (!n.available.Contains(sum)) return false;
        for (size_t b = 0; b < bundles.size(); ++b) {
          if (!NodeMatches(SelectorOf(selectors, b), n)) return false;
        }
        return true;
      };
      for (const auto& n : nodes) {
        if (holds_all(n)) {
          return std::vector<std::string>(bundles.size(), n.node_id);
        }
      }
      if (strategy == PlacementStrategy::kStrictPack) return std::nullopt;
      return Fill(bundles, nodes, selectors, /*distinct=*/false,
                  /*prefer_distinct=*/false);
    }
    case PlacementStrategy::kStrictSpread:
      if (bundles.size() > nodes.size()) return std::nullopt;
      return Fill(bundles, nodes, selectors, /*distinct=*/true,
                  /*prefer_distinct=*/false);
    case PlacementStrategy::kSpread:
      return Fill(bundles, nodes, selectors, /*distinct=*/false,
                  /*prefer_distinct=*/true);
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
