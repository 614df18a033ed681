#include "scheduling/placement.h"

#include <map>
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

TEST(PlaceBundlesTest, LabelSelectorsLimitEachBundlesNodes) {
  proto::NodeInfo a, b, c;
  a.set_node_id("a");
  (*a.mutable_labels())["zone"] = "z1";
  (*a.mutable_labels())["shoal.io/tpu-worker-id"] = "1";
  b.set_node_id("b");
  (*b.mutable_labels())["zone"] = "z2";
  (*b.mutable_labels())["shoal.io/tpu-worker-id"] = "0";
  c.set_node_id("c");
  std::vector<PlacementNode> nodes = {
      {"a", R(4, 4), &a}, {"b", R(4, 4), &b}, {"c", R(4, 4), &c}};
  auto sel = [](std::map<std::string, std::string> m) {
    return *LabelSelector::Parse(m);
  };
  // Worker order, whatever the nodes' order.
  EXPECT_EQ(PlaceBundles({R(1), R(1)}, PlacementStrategy::kStrictSpread, nodes,
                         {sel({{"ray.io/tpu-worker-id", "0"}}),
                          sel({{"shoal.io/tpu-worker-id", "1"}})}),
            (std::vector<std::string>{"b", "a"}));
  // An empty selector: any node; "!in" keeps a bundle off some.
  EXPECT_EQ(PlaceBundles({R(1), R(1)}, PlacementStrategy::kSpread, nodes,
                         {LabelSelector(), sel({{"zone", "!in(z1,z2)"}})}),
            (std::vector<std::string>{"a", "c"}));
  // PACK on one node needs a node every bundle's selector matches.
  EXPECT_EQ(PlaceBundles({R(1), R(1)}, PlacementStrategy::kStrictPack, nodes,
                         {sel({{"zone", "z1"}}), sel({{"zone", "z2"}})}),
            std::nullopt);
  EXPECT_EQ(PlaceBundles({R(1), R(1)}, PlacementStrategy::kPack, nodes,
                         {sel({{"zone", "z1"}}), sel({{"zone", "z2"}})}),
            (std::vector<std::string>{"a", "b"}));
  // The node id is a label too.
  EXPECT_EQ(PlaceBundles({R(1)}, PlacementStrategy::kPack, nodes,
                         {sel({{"ray.io/node-id", "c"}})}),
            (std::vector<std::string>{"c"}));
  EXPECT_EQ(PlaceBundles({R(1)}, PlacementStrategy::kPack, nodes,
                         {sel({{"zone", "z9"}})}),
            std::nullopt);
}

TEST(PlaceBundlesTest, StrategyNames) {
  EXPECT_EQ(StrategyName(PlacementStrategy::kStrictSpread), "STRICT_SPREAD");
  EXPECT_EQ(StrategyName(PlacementStrategy::kPack), "PACK");
}

}  // namespace
}  // namespace shoal
