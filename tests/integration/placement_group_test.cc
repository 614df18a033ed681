// Placement groups on a real cluster: all-or-nothing reservation across
// nodes, the four strategies, tasks placed into bundles, removal, and many
// groups competing for the same nodes without deadlock.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shoal/api.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::PlacementStrategy;
using ::shoal::testing::ClusterSpec;
using ::shoal::testing::DriverClusterTest;
using ::testing::HasSubstr;

std::string Where() { return shoal::CurrentNodeId(); }
SHOAL_REMOTE(Where);

std::string SleepThenWhere(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return shoal::CurrentNodeId();
}
SHOAL_REMOTE(SleepThenWhere);

class PlacementGroupTest : public DriverClusterTest {
 protected:
  void SetUp() override {
    ClusterSpec spec;
    spec.nodes = {{"n0", 2, ""}, {"n1", 2, ""}, {"n2", 2, ""}};
    StartAndConnect(spec);
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

// Run by GroupsEndWithTheirJobUnlessDetached as a driver of its own: makes
// one group of each lifetime, runs a task in each, and exits without
// removing them.
TEST(PlacementGroupHelper, DISABLED_MakeGroupsAndExit) {
  shoal::Init();
  auto mine = shoal::CreatePlacementGroup({"mine", {{{"CPU", 1}}}});
  shoal::PlacementGroupOptions keep{"kept", {{{"CPU", 1}}}};
  keep.lifetime = shoal::Lifetime::kDetached;
  auto kept = shoal::CreatePlacementGroup(keep);
  ASSERT_TRUE(mine.Wait(30000));
  ASSERT_TRUE(kept.Wait(30000));
  shoal::Get(shoal::Task(Where).SetPlacementGroup(mine, 0).Remote());
  shoal::Get(shoal::Task(Where).SetPlacementGroup(kept, 0).Remote());
  std::exit(0);  // no RemovePlacementGroup, no Shutdown
}

// As in Ray: a job's groups end with it, however it ends; detached ones stay.
TEST_F(PlacementGroupTest, GroupsEndWithTheirJobUnlessDetached) {
  cluster_->ExportEnvironment();  // the helper's Init() finds the cluster
  for (const char* how : {"exit", "kill"}) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      execl("/proc/self/exe", "placement_group_test",
            "--gtest_filter=PlacementGroupHelper.DISABLED_MakeGroupsAndExit",
            "--gtest_also_run_disabled_tests", static_cast<char*>(nullptr));
      _exit(127);
    }
    if (std::string(how) == "kill") {
      // Killed once its groups exist.
      for (int i = 0; i < 600 && !shoal::GetPlacementGroup("kept"); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      kill(pid, SIGKILL);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (std::string(how) == "exit") {
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << how;
    }
    bool gone = false;
    for (int i = 0; i < 40 && !gone; ++i) {
      gone = !shoal::GetPlacementGroup("mine").has_value();
      if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_TRUE(gone) << "the job's group outlived it (" << how << ")";
    auto kept = shoal::GetPlacementGroup("kept");
    ASSERT_TRUE(kept.has_value()) << how;
    ExpectFreeCpu(5);  // the detached group's bundle stays reserved
    shoal::RemovePlacementGroup(*kept);
    ExpectFreeCpu(6);
  }
}

// A task of a group that is still being placed waits for the group, however
// long that takes, instead of failing as a request no node can hold.
TEST_F(PlacementGroupTest, TasksOfAGroupBeingPlacedWaitForIt) {
  // Every CPU of n0..n2 held: the next group waits.
  auto blocker =
      shoal::CreatePlacementGroup({"",
                                   {{{"CPU", 2}}, {{"CPU", 2}}, {{"CPU", 2}}},
                                   PlacementStrategy::kStrictSpread});
  ASSERT_TRUE(blocker.Wait(30000));
  auto later = shoal::CreatePlacementGroup({"", {{{"CPU", 1}}}});
  auto where = shoal::Task(Where).SetPlacementGroup(later, 0).Remote();
  // Well past the grace period (1 s here).
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  EXPECT_FALSE(later.Wait(0));
  shoal::RemovePlacementGroup(blocker);
  std::string node = shoal::Get(where, 30000);
  EXPECT_EQ(node, later.BundleNodes().at(0));
  shoal::RemovePlacementGroup(later);
}

TEST_F(PlacementGroupTest, ABundleIndexOutOfRangeFailsAtOnce) {
  auto pg = shoal::CreatePlacementGroup({"", {{{"CPU", 1}}}});
  try {
    shoal::Task(Where).SetPlacementGroup(pg, 5).Remote();
    FAIL() << "expected an error";
  } catch (const shoal::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("bundle index 5 is out of range"));
    EXPECT_THAT(e.what(), HasSubstr("has 1 bundle"));
  }
  EXPECT_THROW(shoal::Task(Where).SetPlacementGroup(shoal::PlacementGroup(), 0),
               shoal::Error);
  // A removed group: its tasks fail naming the group, not a resource to add.
  ASSERT_TRUE(pg.Wait(30000));
  shoal::RemovePlacementGroup(pg);
  try {
    shoal::Get(shoal::Task(Where).SetPlacementGroup(pg, 0).Remote(), 30000);
    FAIL() << "expected an error";
  } catch (const shoal::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("placement group " + pg.id()));
    // Said at once by the agent, which asked the head about the group,
    // rather than after the grace period for requests no node can hold.
    EXPECT_THAT(e.what(), HasSubstr("was removed (by RemovePlacementGroup"));
    EXPECT_THAT(e.what(), HasSubstr("its tasks cannot run"));
    EXPECT_THAT(e.what(), ::testing::Not(HasSubstr("--resources")));
  }
  // Bundle resources never show among the cluster's resources.
  for (const auto& [name, amount] : shoal::AvailableResources()) {
    EXPECT_EQ(name.find("_group_"), std::string::npos) << name;
  }
}

// A node that dies takes its bundles with it: the group places those
// again on a node still alive, and its other bundles, with the work in
// them, stay where they are.
TEST_F(PlacementGroupTest, AGroupThatLostANodePlacesItsLostBundleElsewhere) {
  ASSERT_TRUE(cluster_->AddNode({"n3", 2, ""}).ok());
  auto pg =
      shoal::CreatePlacementGroup({"lost-one",
                                   {{{"CPU", 1}}, {{"CPU", 1}}, {{"CPU", 1}}},
                                   PlacementStrategy::kStrictSpread});
  ASSERT_TRUE(pg.Wait(10000));
  const std::vector<std::string> before = pg.BundleNodes();
  int lost = -1, kept = -1;
  for (int b = 0; b < 3; ++b) {
    (before[b] == "n0" ? kept : lost) = b;  // the driver's own node stays
  }
  if (kept < 0) kept = (lost + 1) % 3;
  ASSERT_GE(lost, 0);
  // Running in a bundle that is kept while the other is lost.
  auto running =
      shoal::Task(SleepThenWhere).SetPlacementGroup(pg, kept).Remote(6000);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const std::string victim = before[lost];
  cluster_->KillAgent(static_cast<size_t>(victim.back() - '0'));
  std::vector<std::string> nodes;
  for (int i = 0; i < 200; ++i) {
    nodes = pg.BundleNodes();
    if (nodes.size() == 3 && nodes[lost] != victim && !nodes[lost].empty()) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(pg.Wait(10000));
  nodes = pg.BundleNodes();
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_EQ(std::set<std::string>(nodes.begin(), nodes.end()).size(), 3u);
  EXPECT_NE(nodes[lost], victim) << victim << " is dead";
  for (int b = 0; b < 3; ++b) {
    if (b != lost) {
      EXPECT_EQ(nodes[b], before[b]) << "bundle " << b;
    }
    EXPECT_EQ(
        shoal::Get(shoal::Task(Where).SetPlacementGroup(pg, b).Remote(), 20000),
        nodes[b]);
  }
  EXPECT_EQ(shoal::Get(running, 20000), before[kept]);
  shoal::RemovePlacementGroup(pg);
}

// A node taken for dead (stopped past the health timeout) whose bundles
// were placed again elsewhere lets them go when it registers again.
TEST_F(PlacementGroupTest, ANodeTakenForDeadLetsGoOfBundlesPlacedElsewhere) {
  ASSERT_TRUE(cluster_->AddNode({"n3", 2, ""}).ok());
  auto pg =
      shoal::CreatePlacementGroup({"paused",
                                   {{{"CPU", 1}}, {{"CPU", 1}}, {{"CPU", 1}}},
                                   PlacementStrategy::kStrictSpread});
  ASSERT_TRUE(pg.Wait(10000));
  std::string victim;
  for (const auto& node : pg.BundleNodes()) {
    if (node != "n0") victim = node;
  }
  const pid_t agent = cluster_->agent_pid(victim.back() - '0');
  ASSERT_EQ(kill(agent, SIGSTOP), 0);
  bool moved = false;
  for (int i = 0; i < 200 && !moved; ++i) {
    std::vector<std::string> nodes = pg.BundleNodes();
    moved = nodes.size() == 3 &&
            std::find(nodes.begin(), nodes.end(), victim) == nodes.end() &&
            std::find(nodes.begin(), nodes.end(), "") == nodes.end();
    if (!moved) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(kill(agent, SIGCONT), 0);
  ASSERT_TRUE(moved);
  // 8 CPUs on four nodes, 3 in the group: none left held on the victim.
  ExpectFreeCpu(5);
  shoal::RemovePlacementGroup(pg);
  ExpectFreeCpu(8);
}

// A gang that cannot be placed again without the host it lost (as a TPU
// slice cannot) fails, and says which host and bundle were lost.
TEST_F(PlacementGroupTest, AGangThatCannotBePlacedWithoutItsLostHostFails) {
  auto pg =
      shoal::CreatePlacementGroup({"whole-cluster",
                                   {{{"CPU", 1}}, {{"CPU", 1}}, {{"CPU", 1}}},
                                   PlacementStrategy::kStrictSpread});
  ASSERT_TRUE(pg.Wait(10000));
  std::vector<std::string> nodes = pg.BundleNodes();
  const size_t lost =
      std::find(nodes.begin(), nodes.end(), "n2") - nodes.begin();
  ASSERT_LT(lost, nodes.size());
  cluster_->KillAgent(2);
  try {
    // Created until the head finds n2 dead, then pending, then failed.
    for (int i = 0; i < 30; ++i) {
      pg.Wait(10000);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    FAIL() << "expected InfeasibleError";
  } catch (const shoal::InfeasibleError& e) {
    EXPECT_THAT(e.what(), HasSubstr("whole-cluster"));
    EXPECT_THAT(e.what(),
                HasSubstr(absl::StrCat("bundle ", lost, " lost with node n2")));
  }
  // The bundles it kept stay reserved (nothing in them is ended behind
  // its owner's back) until the group is removed.
  ExpectFreeCpu(2);
  shoal::RemovePlacementGroup(pg);
  ExpectFreeCpu(4);
}

}  // namespace
