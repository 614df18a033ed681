// Placement groups on a real cluster: all-or-nothing reservation across
// nodes, the four strategies, tasks placed into bundles, removal, and many
// groups competing for the same nodes without deadlock.
#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shoal/api.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::PlacementStrategy;
using ::shoal::testing::ClusterSpec;
using ::shoal::testing::TestCluster;
using ::testing::HasSubstr;

std::string Where() { return shoal::CurrentNodeId(); }
SHOAL_REMOTE(Where);

class PlacementGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ClusterSpec spec;
    spec.nodes = {{"n0", 2, ""}, {"n1", 2, ""}, {"n2", 2, ""}};
    auto cluster = TestCluster::Start(spec);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    cluster_->Connect();
  }
  void TearDown() override {
    shoal::Shutdown();
    if (cluster_) {
      cluster_->Stop();
      EXPECT_EQ(cluster_->sanitizer_reports(), "");
    }
  }

  // Waits until the head's view of free CPU is `cpu` (agents report changes
  // within tens of milliseconds).
  void ExpectFreeCpu(double cpu) {
    double seen = -1;
    for (int i = 0; i < 100 && seen != cpu; ++i) {
      seen = shoal::AvailableResources()["CPU"];
      if (seen != cpu)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(seen, cpu);
  }

  std::unique_ptr<TestCluster> cluster_;
};

TEST_F(PlacementGroupTest,
       StrictSpreadPutsBundlesOnDistinctNodesAndTasksFollow) {
  auto pg =
      shoal::CreatePlacementGroup({"spread",
                                   {{{"CPU", 1}}, {{"CPU", 1}}, {{"CPU", 1}}},
                                   PlacementStrategy::kStrictSpread});
  ASSERT_TRUE(pg.Wait(10000));
  std::vector<std::string> nodes = pg.BundleNodes();
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_EQ(std::set<std::string>(nodes.begin(), nodes.end()).size(), 3u);
  for (int i = 0; i < 3; ++i) {
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(
          shoal::Get(shoal::Task(Where).SetPlacementGroup(pg, i).Remote()),
          nodes[i]);
    }
  }
  ExpectFreeCpu(3);
  auto found = shoal::GetPlacementGroup("spread");
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->id(), pg.id());
  shoal::RemovePlacementGroup(pg);
  EXPECT_FALSE(shoal::GetPlacementGroup("spread").has_value());
  ExpectFreeCpu(6);
}

TEST_F(PlacementGroupTest, StrictPackPutsEveryBundleOnOneNode) {
  auto pg = shoal::CreatePlacementGroup(
      {"", {{{"CPU", 1}}, {{"CPU", 1}}}, PlacementStrategy::kStrictPack});
  ASSERT_TRUE(pg.Wait(10000));
  auto nodes = pg.BundleNodes();
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0], nodes[1]);
  EXPECT_EQ(shoal::Get(shoal::Task(Where).SetPlacementGroup(pg, 1).Remote()),
            nodes[0]);
}

TEST_F(PlacementGroupTest, ImpossibleGroupFailsClearly) {
  auto pg = shoal::CreatePlacementGroup(
      {"too-wide",
       {{{"CPU", 1}}, {{"CPU", 1}}, {{"CPU", 1}}, {{"CPU", 1}}},
       PlacementStrategy::kStrictSpread});
  try {
    pg.Wait(20000);
    FAIL() << "expected InfeasibleError";
  } catch (const shoal::InfeasibleError& e) {
    EXPECT_THAT(e.what(), HasSubstr("too-wide"));
    EXPECT_THAT(e.what(), HasSubstr("STRICT_SPREAD"));
  }
  // Nothing stays reserved.
  ExpectFreeCpu(6);
}

TEST_F(PlacementGroupTest, CompetingGroupsNeverDeadlock) {
  // Each group needs two whole nodes; only one fits at a time. If groups
  // held partial reservations, two could each hold one node and wait forever.
  std::vector<shoal::PlacementGroup> groups;
  for (int i = 0; i < 5; ++i) {
    groups.push_back(shoal::CreatePlacementGroup(
        {"", {{{"CPU", 2}}, {{"CPU", 2}}}, PlacementStrategy::kStrictSpread}));
  }
  for (int round = 0; round < 5; ++round) {
    int created = -1;
    for (int tries = 0; tries < 200 && created < 0; ++tries) {
      for (size_t i = 0; i < groups.size(); ++i) {
        if (groups[i].Wait(0)) {
          created = static_cast<int>(i);
          break;
        }
      }
      if (created < 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_GE(created, 0) << "no group was created in round " << round;
    // Exactly one at a time.
    for (size_t i = 0; i < groups.size(); ++i) {
      if (static_cast<int>(i) != created) {
        EXPECT_FALSE(groups[i].Wait(0));
      }
    }
    shoal::RemovePlacementGroup(groups[created]);
    groups.erase(groups.begin() + created);
  }
  ExpectFreeCpu(6);
}

}  // namespace
