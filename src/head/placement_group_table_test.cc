#include "head/placement_group_table.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "head/head_fakes_testing.h"
#include "head/table_storage.h"
#include "scheduling/resource_set.h"

namespace shoal {
namespace {

using ::shoal::testing::Resources;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::SizeIs;
using ::testing::UnorderedElementsAre;

constexpr int64_t kGraceUs = 5'000'000;

proto::PlacementGroupSpec Spec(int bundles, double cpus,
                               proto::PlacementStrategy strategy,
                               const std::string& name = "") {
  proto::PlacementGroupSpec spec;
  spec.set_name(name);
  spec.set_strategy(strategy);
  for (int i = 0; i < bundles; ++i) {
    *spec.add_bundles() = Resources({{"CPU", cpus}});
  }
  return spec;
}

// Nodes "n1".."nN" with `cpus` CPUs each, `free` of them available.
PlacementGroupTable::NodesFn Nodes(int n, double cpus, double free) {
  return [=](bool use_totals) {
    std::vector<PlacementNode> out;
    for (int i = 1; i <= n; ++i) {
      absl::StatusOr<ResourceSet> set =
          ResourceSet::FromDoubles({{"CPU", use_totals ? cpus : free}});
      out.push_back({"n" + std::to_string(i), *set});
    }
    return out;
  };
}

proto::NodeInfo DeadNode(const std::string& id) {
  proto::NodeInfo n;
  n.set_node_id(id);
  n.set_address(id + ":1");
  return n;
}

class PlacementGroupTableTest : public ::testing::Test {
 protected:
  std::string CreateAndPlace(const proto::PlacementGroupSpec& spec,
                             const PlacementGroupTable::NodesFn& nodes) {
    absl::StatusOr<proto::PlacementGroupInfo> info =
        table_.Create(spec, "job1", 0);
    EXPECT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(table_.NextPending(), info->pg_id());
    PlacementPlan plan = table_.Plan(info->pg_id(), nodes, 0, kGraceUs);
    EXPECT_EQ(plan.kind, PlacementPlan::kReserve);
    table_.Created(info->pg_id(), plan.bundle_nodes);
    return info->pg_id();
  }

  std::unique_ptr<TableStorage> storage_ = NewInMemoryTableStorage();
  PlacementGroupTable table_{storage_.get()};
};

TEST_F(PlacementGroupTableTest, RefusesGroupsThatAskForNothingOrATakenName) {
  EXPECT_EQ(table_.Create(Spec(0, 1, proto::PACK), "", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      std::string(
          table_.Create(Spec(2, 0, proto::PACK), "", 0).status().message()),
      HasSubstr("{\"CPU\": 1}"));
  ASSERT_TRUE(table_.Create(Spec(1, 1, proto::PACK, "train"), "", 0).ok());
  absl::Status taken =
      table_.Create(Spec(1, 1, proto::PACK, "train"), "", 0).status();
  EXPECT_EQ(taken.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(taken.message()), HasSubstr("pick another name"));
  EXPECT_EQ(table_.pending(), 1u);
  EXPECT_THAT(storage_->Scan("placement_groups"), SizeIs(1));
}

TEST_F(PlacementGroupTableTest, PlansBundlesAcrossNodesThenIsCreated) {
  absl::StatusOr<proto::PlacementGroupInfo> info =
      table_.Create(Spec(2, 1, proto::STRICT_SPREAD, "pg"), "job1", 0);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->state(), proto::PlacementGroupInfo::PENDING);
  EXPECT_EQ(info->job_id(), "job1");
  ASSERT_EQ(table_.NextPending(), info->pg_id());
  EXPECT_EQ(table_.NextPending(), std::nullopt);

  PlacementPlan plan = table_.Plan(info->pg_id(), Nodes(2, 4, 4), 0, kGraceUs);
  ASSERT_EQ(plan.kind, PlacementPlan::kReserve);
  EXPECT_THAT(plan.bundle_nodes, UnorderedElementsAre("n1", "n2"));
  ASSERT_EQ(plan.by_node.size(), 2u);
  for (const auto& [node, bundles] : plan.by_node)
    EXPECT_THAT(bundles, SizeIs(1));

  table_.Created(info->pg_id(), plan.bundle_nodes);
  proto::GetPlacementGroupRequest by_name;
  by_name.set_name("pg");
  PlacementGroupEntry* pg = table_.Find(by_name);
  ASSERT_NE(pg, nullptr);
  EXPECT_EQ(pg->info.state(), proto::PlacementGroupInfo::CREATED);
  EXPECT_THAT(pg->info.bundle_nodes(), SizeIs(2));
  proto::PlacementGroupInfo kept;
  ASSERT_TRUE(
      kept.ParseFromString(*storage_->Get("placement_groups", info->pg_id())));
  EXPECT_EQ(kept.state(), proto::PlacementGroupInfo::CREATED);
}

TEST_F(PlacementGroupTableTest, WaitsForBusyNodesAndFailsWhenItCanNeverFit) {
  const std::string busy =
      table_.Create(Spec(1, 2, proto::PACK), "", 0)->pg_id();
  const std::string huge =
      table_.Create(Spec(1, 64, proto::PACK, "huge"), "", 0)->pg_id();
  table_.NextPending();
  table_.NextPending();
  EXPECT_EQ(table_.Plan(busy, Nodes(1, 4, 1), kGraceUs * 10, kGraceUs).kind,
            PlacementPlan::kWait);
  // Back in line.
  EXPECT_EQ(table_.NextPending(), busy);

  EXPECT_EQ(table_.Plan(huge, Nodes(1, 4, 4), kGraceUs, kGraceUs).kind,
            PlacementPlan::kWait);
  EXPECT_EQ(table_.NextPending(), huge);
  EXPECT_EQ(table_.Plan(huge, Nodes(1, 4, 4), kGraceUs + 1, kGraceUs).kind,
            PlacementPlan::kFailed);
  EXPECT_EQ(table_.NextPending(), std::nullopt);
  PlacementGroupEntry* pg = table_.Find(huge);
  EXPECT_EQ(pg->info.state(), proto::PlacementGroupInfo::FAILED);
  EXPECT_THAT(pg->info.error(), HasSubstr("even when they are idle"));
  // Its name is free again.
  EXPECT_TRUE(table_.Create(Spec(1, 1, proto::PACK, "huge"), "", 0).ok());
  // And a group that is not pending has nothing to plan.
  EXPECT_EQ(table_.Plan(huge, Nodes(1, 4, 4), 0, kGraceUs).kind,
            PlacementPlan::kNothing);
}

TEST_F(PlacementGroupTableTest, BundlesLostWithANodeArePlacedAgainElsewhere) {
  const std::string id =
      CreateAndPlace(Spec(2, 1, proto::STRICT_SPREAD), Nodes(2, 4, 4));
  const std::string lost_node = table_.Find(id)->info.bundle_nodes(1);
  const std::string kept_node = table_.Find(id)->info.bundle_nodes(0);
  EXPECT_FALSE(table_.LoseBundles(id, DeadNode("elsewhere"), "x", 10));
  ASSERT_TRUE(table_.LoseBundles(id, DeadNode(lost_node), "host down", 10));
  PlacementGroupEntry* pg = table_.Find(id);
  EXPECT_EQ(pg->info.state(), proto::PlacementGroupInfo::PENDING);
  EXPECT_THAT(pg->info.bundle_nodes(), ElementsAre(kept_node, ""));
  EXPECT_THAT(pg->info.error(),
              HasSubstr("bundle 1 lost with node " + lost_node));
  EXPECT_THAT(pg->info.error(), HasSubstr("host down"));
  EXPECT_EQ(table_.NextPending(), id);

  // Only bundle 1 is placed, and not where bundle 0 is.
  PlacementPlan plan = table_.Plan(id, Nodes(3, 4, 4), 10, kGraceUs);
  ASSERT_EQ(plan.kind, PlacementPlan::kReserve);
  ASSERT_EQ(plan.by_node.size(), 1u);
  EXPECT_NE(plan.by_node.begin()->first, kept_node);
  EXPECT_THAT(plan.by_node.begin()->second, ElementsAre(Pair(1, ::testing::_)));
  EXPECT_EQ(plan.bundle_nodes[0], kept_node);
  table_.Created(id, plan.bundle_nodes);
  EXPECT_EQ(table_.Find(id)->info.error(), "");
  EXPECT_TRUE(table_.Find(id)->lost.empty());
}

TEST_F(PlacementGroupTableTest, AGroupThatCannotBePlacedAgainSaysWhatWasLost) {
  const std::string id =
      CreateAndPlace(Spec(2, 1, proto::STRICT_SPREAD), Nodes(2, 4, 4));
  const std::string lost_node = table_.Find(id)->info.bundle_nodes(0);
  ASSERT_TRUE(table_.LoseBundles(id, DeadNode(lost_node), "gone", 0));
  table_.NextPending();
  // Only the node with its other bundle is left.
  auto one_node = [&](bool) {
    return std::vector<PlacementNode>{
        {table_.Find(id)->info.bundle_nodes(1),
         *ResourceSet::FromDoubles({{"CPU", 4}})}};
  };
  EXPECT_EQ(table_.Plan(id, one_node, kGraceUs + 1, kGraceUs).kind,
            PlacementPlan::kFailed);
  EXPECT_THAT(table_.Find(id)->info.error(),
              HasSubstr("bundle 0 lost with node " + lost_node));
  EXPECT_THAT(table_.Find(id)->info.error(),
              HasSubstr("other bundles stay reserved"));
}

TEST_F(PlacementGroupTableTest,
       RemovingFreesItsNameAndSaysWhereItsBundlesWere) {
  const std::string id =
      CreateAndPlace(Spec(3, 1, proto::SPREAD, "pg"), Nodes(2, 4, 4));
  std::set<std::string> nodes = table_.Remove(*table_.Find(id));
  EXPECT_EQ(nodes, (std::set<std::string>{"n1", "n2"}));
  EXPECT_EQ(table_.Find(id)->info.state(), proto::PlacementGroupInfo::REMOVED);
  EXPECT_THAT(table_.Find(id)->info.bundle_nodes(), IsEmpty());
  EXPECT_FALSE(storage_->Get("placement_groups", id).has_value());
  EXPECT_TRUE(table_.Create(Spec(1, 1, proto::PACK, "pg"), "", 0).ok());
  EXPECT_THAT(table_.LiveGroups(), SizeIs(1));
}

TEST_F(PlacementGroupTableTest, AJobEndsItsGroupsButNotDetachedOnes) {
  proto::PlacementGroupSpec detached = Spec(1, 1, proto::PACK);
  detached.set_detached(true);
  const std::string mine =
      table_.Create(Spec(1, 1, proto::PACK), "j1", 0)->pg_id();
  table_.Create(detached, "j1", 0).IgnoreError();
  table_.Create(Spec(1, 1, proto::PACK), "j2", 0).IgnoreError();
  EXPECT_THAT(table_.GroupsOfJob("j1"), ElementsAre(mine));
}

TEST_F(PlacementGroupTableTest, ANodeHoldingBundlesNoLongerItsIsToldSo) {
  const std::string id =
      CreateAndPlace(Spec(1, 1, proto::PACK), Nodes(1, 4, 4));
  proto::NodeInfo node;
  node.set_node_id("n1");
  (*node.mutable_total()->mutable_amounts())["CPU"] = 4000;
  (*node.mutable_total()->mutable_amounts())["CPU_group_" + id] = 1000;
  (*node.mutable_total()->mutable_amounts())["CPU_group_0_" + id] = 1000;
  (*node.mutable_total()->mutable_amounts())["CPU_group_0_ended"] = 1000;
  EXPECT_THAT(table_.StaleGroups(node), ElementsAre("ended"));
  node.set_node_id("n2");  // the group's bundles are on n1
  EXPECT_THAT(table_.StaleGroups(node), UnorderedElementsAre("ended", id));
}

TEST_F(PlacementGroupTableTest, BundleSelectorsAreCheckedAndFollowed) {
  proto::PlacementGroupSpec spec = Spec(2, 1, proto::STRICT_SPREAD);
  spec.add_bundle_label_selector();  // one for two bundles
  EXPECT_THAT(table_.Create(spec, "", 0).status().message(),
              HasSubstr("1 selectors for 2 bundles"));
  (*spec.add_bundle_label_selector()->mutable_labels())["zone"] = "in(";
  EXPECT_THAT(table_.Create(spec, "", 0).status().message(),
              HasSubstr("bundle_label_selector of bundle 1"));
  (*spec.mutable_bundle_label_selector(1)->mutable_labels())["zone"] = "z1";
  (*spec.mutable_bundle_label_selector(0)->mutable_labels())["zone"] = "z2";
  proto::NodeInfo n1, n2;
  n1.set_node_id("n1");
  (*n1.mutable_labels())["zone"] = "z1";
  n2.set_node_id("n2");
  (*n2.mutable_labels())["zone"] = "z2";
  auto nodes = [&](bool) {
    ResourceSet cpus = *ResourceSet::FromDoubles({{"CPU", 4}});
    return std::vector<PlacementNode>{{"n1", cpus, &n1}, {"n2", cpus, &n2}};
  };
  const std::string id = table_.Create(spec, "", 0)->pg_id();
  ASSERT_EQ(table_.NextPending(), id);
  PlacementPlan plan = table_.Plan(id, nodes, 0, kGraceUs);
  ASSERT_EQ(plan.kind, PlacementPlan::kReserve);
  EXPECT_THAT(plan.bundle_nodes, ElementsAre("n2", "n1"));
}

TEST_F(PlacementGroupTableTest, ASelectorNoNodeMatchesFailsNamingIt) {
  proto::PlacementGroupSpec spec = Spec(1, 1, proto::PACK, "pinned");
  (*spec.add_bundle_label_selector()
        ->mutable_labels())["ray.io/tpu-worker-id"] = "7";
  const std::string id = table_.Create(spec, "", 0)->pg_id();
  table_.NextPending();
  EXPECT_EQ(table_.Plan(id, Nodes(2, 4, 4), 0, kGraceUs).kind,
            PlacementPlan::kWait);
  table_.NextPending();
  EXPECT_EQ(table_.Plan(id, Nodes(2, 4, 4), kGraceUs + 1, kGraceUs).kind,
            PlacementPlan::kFailed);
  EXPECT_THAT(table_.Find(id)->info.error(),
              HasSubstr("bundle 0's label_selector "
                        "{shoal.io/tpu-worker-id=7} matches no live node"));
}

TEST_F(PlacementGroupTableTest, ARestartedHeadTakesUpTheGroupsKept) {
  const std::string created =
      CreateAndPlace(Spec(1, 1, proto::PACK, "a"), Nodes(1, 4, 4));
  const std::string pending =
      table_.Create(Spec(1, 1, proto::PACK, "b"), "", 0)->pg_id();
  PlacementGroupTable again(storage_.get());
  EXPECT_EQ(again.Restore(7), 2u);
  EXPECT_EQ(again.NextPending(), pending);
  EXPECT_EQ(again.NextPending(), std::nullopt);
  EXPECT_EQ(again.Find(created)->info.state(),
            proto::PlacementGroupInfo::CREATED);
  EXPECT_EQ(again.Create(Spec(1, 1, proto::PACK, "a"), "", 0).status().code(),
            absl::StatusCode::kAlreadyExists);
  proto::ClusterStatus status;
  again.AddToStatus(&status, 7 + 3000);
  ASSERT_EQ(status.placement_groups_size(), 2);
  EXPECT_EQ(status.placement_groups(0).age_ms(), 3);
}

}  // namespace
}  // namespace shoal
