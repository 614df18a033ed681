#include "scheduling/placement.h"

#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shoal {
namespace {

ResourceSet R(double cpu, double tpu = 0) {
  std::map<std::string, double> m{{"CPU", cpu}};
  if (tpu > 0) m["TPU"] = tpu;
  return *ResourceSet::FromDoubles(m);
}

struct Case {
  std::string name;
  std::vector<ResourceSet> bundles;
  PlacementStrategy strategy;
  std::vector<PlacementNode> nodes;
  std::optional<std::vector<std::string>> want;
};

TEST(PlaceBundlesTest, Table) {
  std::vector<PlacementNode> two = {{"a", R(4, 4)}, {"b", R(4, 4)}};
  std::vector<Case> cases = {
      {"strict pack fits one node",
       {R(1), R(2)},
       PlacementStrategy::kStrictPack,
       two,
       std::vector<std::string>{"a", "a"}},
      {"strict pack too big for any node",
       {R(3), R(3)},
       PlacementStrategy::kStrictPack,
       two,
       std::nullopt},
      {"pack spills to a second node",
       {R(3), R(3)},
       PlacementStrategy::kPack,
       two,
       std::vector<std::string>{"a", "b"}},
      {"strict spread one per node",
       {R(1, 4), R(1, 4)},
       PlacementStrategy::kStrictSpread,
       two,
       std::vector<std::string>{"a", "b"}},
      {"strict spread needs as many nodes as bundles",
       {R(1), R(1), R(1)},
       PlacementStrategy::kStrictSpread,
       two,
       std::nullopt},
      {"spread reuses nodes when it must",
       {R(1), R(1), R(1)},
       PlacementStrategy::kSpread,
       two,
       std::vector<std::string>{"a", "b", "a"}},
      {"nothing fits", {R(8)}, PlacementStrategy::kPack, two, std::nullopt},
      {"free resources are used up as bundles land",
       {R(1, 4), R(1, 4), R(1, 4)},
       PlacementStrategy::kPack,
       two,
       std::nullopt},
      {"no bundles",
       {},
       PlacementStrategy::kPack,
       two,
       std::vector<std::string>{}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(PlaceBundles(c.bundles, c.strategy, c.nodes), c.want);
  }
}

TEST(PlaceBundlesTest, StrategyNames) {
  EXPECT_EQ(StrategyName(PlacementStrategy::kStrictSpread), "STRICT_SPREAD");
  EXPECT_EQ(StrategyName(PlacementStrategy::kPack), "PACK");
}

}  // namespace
}  // namespace shoal
