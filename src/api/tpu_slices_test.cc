#include "api/tpu_slices.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace shoal::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

// A host of a v5p-16 slice (2 hosts of 4 chips, 2x2x2), as its agent
// labels it.
NodeInfo V5pHost(const std::string& slice, int worker, bool alive = true,
                 double free_chips = 4) {
  NodeInfo n;
  n.node_id = slice + "-node-" + std::to_string(worker);
  n.address = "10.0.0." + std::to_string(worker + 1) + ":7000";
  n.alive = alive;
  n.total = {{"CPU", 8}, {"TPU", 4}};
  n.available = {{"CPU", 8}, {"TPU", free_chips}};
  n.labels = {{"shoal.io/tpu-pod-type", "v5p-16"},
              {"shoal.io/accelerator-type", "TPU-V5P"},
              {"shoal.io/tpu-topology", "2x2x2"},
              {"shoal.io/tpu-slice-name", slice},
              {"shoal.io/tpu-worker-id", std::to_string(worker)}};
  return n;
}

// A one-host v6e-8 without a slice name.
NodeInfo V6eHost(const std::string& id) {
  NodeInfo n;
  n.node_id = id;
  n.alive = true;
  n.total = {{"CPU", 8}, {"TPU", 8}};
  n.available = n.total;
  n.labels = {{"shoal.io/tpu-pod-type", "v6e-8"},
              {"shoal.io/tpu-topology", "2x4"}};
  return n;
}

tpu::SliceRequest V5p16(int slices) {
  tpu::SliceRequest r;
  r.topology = "2x2x2";
  r.accelerator_version = "v5p";
  r.num_slices = slices;
  return r;
}

accel::TpuAcceleratorType TypeOf(const tpu::SliceRequest& r) {
  return LayoutSlices(r).value().type;
}

TEST(ClusterSlicesTest, GroupsHostsBySliceInWorkerOrder) {
  std::vector<NodeInfo> nodes = {V5pHost("b", 1), V5pHost("a", 1),
                                 V6eHost("lone"), V5pHost("a", 0),
                                 V5pHost("b", 0)};
  std::vector<ClusterSlice> slices = ClusterSlices(nodes);
  ASSERT_EQ(slices.size(), 3u);
  EXPECT_EQ(slices[0].name, "a");
  EXPECT_EQ(slices[0].hosts[0]->node_id, "a-node-0");
  EXPECT_EQ(slices[0].hosts[1]->node_id, "a-node-1");
  EXPECT_TRUE(slices[0].intact());
  EXPECT_TRUE(slices[0].idle);
  EXPECT_EQ(slices[1].name, "b");
  // A one-host slice without a name is named by its node.
  EXPECT_EQ(slices[2].name, "lone");
  EXPECT_FALSE(slices[2].named);
  EXPECT_EQ(slices[2].type.name, "v6e-8");
}

TEST(ClusterSlicesTest, ADeadOrMissingWorkerMakesASliceNotIntact) {
  std::vector<NodeInfo> nodes = {V5pHost("a", 0), V5pHost("a", 1, false),
                                 V5pHost("b", 1)};
  std::vector<ClusterSlice> slices = ClusterSlices(nodes);
  ASSERT_EQ(slices.size(), 2u);
  EXPECT_EQ(slices[0].missing,
            "worker 1's host (node a-node-1, 10.0.0.2) is dead");
  EXPECT_EQ(slices[1].missing, "worker 0 has no host");
  EXPECT_FALSE(slices[0].idle);
}

TEST(ClusterSlicesTest, AHostWithChipsHeldIsBusy) {
  std::vector<NodeInfo> nodes = {V5pHost("a", 0), V5pHost("a", 1, true, 0)};
  std::vector<ClusterSlice> slices = ClusterSlices(nodes);
  ASSERT_EQ(slices.size(), 1u);
  EXPECT_TRUE(slices[0].intact());
  EXPECT_FALSE(slices[0].idle);
}

TEST(ChooseSlicesTest, TakesIdleSlicesBeforeBusyOnes) {
  std::vector<NodeInfo> nodes = {V5pHost("a", 0, true, 0), V5pHost("a", 1),
                                 V5pHost("b", 0),          V5pHost("b", 1),
                                 V5pHost("c", 0),          V5pHost("c", 1)};
  std::vector<ClusterSlice> slices = ClusterSlices(nodes);
  auto chosen = ChooseSlices(slices, TypeOf(V5p16(3)), 3);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  std::vector<std::string> names;
  for (const ClusterSlice* s : *chosen) names.push_back(s->name);
  EXPECT_THAT(names, ElementsAre("b", "c", "a"));
}

TEST(ChooseSlicesTest, TooFewIntactSlicesNameWhatIsMissing) {
  std::vector<NodeInfo> nodes = {V5pHost("a", 0), V5pHost("a", 1),
                                 V5pHost("b", 0), V5pHost("b", 1, false)};
  std::vector<ClusterSlice> slices = ClusterSlices(nodes);
  auto chosen = ChooseSlices(slices, TypeOf(V5p16(2)), 2);
  ASSERT_FALSE(chosen.ok());
  EXPECT_THAT(chosen.status().message(),
              HasSubstr("cannot reserve 2 v5p-16 (2x2x2) slices: the cluster "
                        "has 1 intact; slice b: worker 1's host (node "
                        "b-node-1, 10.0.0.2) is dead"));
}

TEST(ChooseSlicesTest, NoSliceOfTheTypeListsTheTypesThereAre) {
  std::vector<NodeInfo> nodes = {V5pHost("a", 0), V5pHost("a", 1),
                                 V6eHost("lone")};
  std::vector<ClusterSlice> slices = ClusterSlices(nodes);
  tpu::SliceRequest r = V5p16(1);
  r.topology = "2x2x4";  // v5p-32
  auto chosen = ChooseSlices(slices, TypeOf(r), 1);
  ASSERT_FALSE(chosen.ok());
  EXPECT_THAT(chosen.status().message(),
              HasSubstr("its TPU slices are: 1 x v5p-16 (2x2x2), 1 x v6e-8 "
                        "(2x4)"));
}

TEST(LayoutSlicesTest, AWholeHostPerBundleByDefault) {
  auto layout = LayoutSlices(V5p16(2));
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->type.name, "v5p-16");
  EXPECT_EQ(layout->type.hosts, 2);
  EXPECT_EQ(layout->bundles_per_slice(), 2);
  EXPECT_THAT(layout->bundle,
              UnorderedElementsAre(Pair("CPU", 1.0), Pair("TPU", 4.0)));
}

TEST(LayoutSlicesTest, ASmallerBundleMakesSeveralPerHost) {
  tpu::SliceRequest r = V5p16(1);
  r.resources_per_bundle = {{"TPU", 1}};
  auto layout = LayoutSlices(r);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->bundles_per_host, 4);
  EXPECT_EQ(layout->bundles_per_slice(), 8);
}

TEST(LayoutSlicesTest, BadRequestsSayWhy) {
  tpu::SliceRequest r = V5p16(1);
  r.resources_per_bundle = {{"TPU", 3}};
  EXPECT_THAT(LayoutSlices(r).status().message(),
              HasSubstr("does not divide a v5p-16 host's 4 chips evenly"));
  r = V5p16(0);
  EXPECT_THAT(LayoutSlices(r).status().message(),
              HasSubstr("num_slices must be 1 or more"));
  r = V5p16(1);
  r.accelerator_version = "v9";
  EXPECT_THAT(LayoutSlices(r).status().message(),
              HasSubstr("unknown TPU generation \"v9\""));
  r = V5p16(1);
  r.topology = "4x4";  // v5p grids are 3-D
  EXPECT_THAT(LayoutSlices(r).status().message(), HasSubstr("3-D grid"));
  r = V5p16(1);
  r.accelerator_version = "TPU-V5P";  // Ray's accelerator type
  EXPECT_TRUE(LayoutSlices(r).ok());
}

TEST(SliceGroupOptionsTest, OneGroupPinsEveryBundleToItsSliceAndWorker) {
  std::vector<NodeInfo> nodes = {V5pHost("a", 0), V5pHost("a", 1),
                                 V5pHost("b", 0), V5pHost("b", 1)};
  std::vector<ClusterSlice> slices = ClusterSlices(nodes);
  tpu::SliceRequest r = V5p16(2);
  r.name = "train";
  // A label of the user's is kept; one on the slice's own key is not.
  r.bundle_label_selector = {
      {{"zone", "z1"}}, {}, {{"ray.io/tpu-slice-name", "elsewhere"}}, {}};
  SliceLayout layout = LayoutSlices(r).value();
  auto groups = SliceGroupOptions(r, layout, {&slices[1], &slices[0]});
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].name, "train");
  ASSERT_EQ(groups[0].bundles.size(), 4u);
  EXPECT_THAT(groups[0].bundle_label_selector[0],
              UnorderedElementsAre(Pair("shoal.io/tpu-slice-name", "b"),
                                   Pair("shoal.io/tpu-worker-id", "0"),
                                   Pair("zone", "z1")));
  EXPECT_THAT(groups[0].bundle_label_selector[1],
              UnorderedElementsAre(Pair("shoal.io/tpu-slice-name", "b"),
                                   Pair("shoal.io/tpu-worker-id", "1")));
  EXPECT_THAT(groups[0].bundle_label_selector[2],
              UnorderedElementsAre(Pair("shoal.io/tpu-slice-name", "a"),
                                   Pair("shoal.io/tpu-worker-id", "0")));
}

TEST(SliceGroupOptionsTest, AGroupPerSliceIsNamedAfterIt) {
  std::vector<NodeInfo> nodes = {V5pHost("a", 0), V5pHost("a", 1),
                                 V5pHost("b", 0), V5pHost("b", 1)};
  std::vector<ClusterSlice> slices = ClusterSlices(nodes);
  tpu::SliceRequest r = V5p16(2);
  r.name = "train";
  r.group_per_slice = true;
  r.resources_per_bundle = {{"TPU", 2}};
  SliceLayout layout = LayoutSlices(r).value();
  auto groups = SliceGroupOptions(r, layout, {&slices[0], &slices[1]});
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[1].name, "train_slice_1");
  ASSERT_EQ(groups[1].bundles.size(), 4u);  // 2 hosts x 2 bundles
  EXPECT_THAT(groups[1].bundle_label_selector[3],
              UnorderedElementsAre(Pair("shoal.io/tpu-slice-name", "b"),
                                   Pair("shoal.io/tpu-worker-id", "1")));
}

TEST(SliceGroupOptionsTest, AnUnnamedOneHostSliceIsPinnedByNode) {
  std::vector<NodeInfo> nodes = {V6eHost("lone")};
  std::vector<ClusterSlice> slices = ClusterSlices(nodes);
  tpu::SliceRequest r;
  r.topology = "2x4";
  r.accelerator_version = "v6e";
  SliceLayout layout = LayoutSlices(r).value();
  auto groups = SliceGroupOptions(r, layout, {&slices[0]});
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_THAT(groups[0].bundle_label_selector[0],
              ElementsAre(Pair("shoal.io/node-id", "lone")));
  EXPECT_THAT(groups[0].bundles[0],
              UnorderedElementsAre(Pair("CPU", 1.0), Pair("TPU", 8.0)));
}

// A host of a v5p-32 slice (4 hosts of 4 chips, 2x2x4).
NodeInfo V5p32Host(const std::string& slice, int worker, double free = 4) {
  NodeInfo n = V5pHost(slice, worker, true, free);
  n.labels["shoal.io/tpu-pod-type"] = "v5p-32";
  n.labels["shoal.io/tpu-topology"] = "2x2x4";
  return n;
}

accel::TpuAcceleratorType Type(const std::string& version,
                               const std::string& topology) {
  return accel::TpuTypeFromTopology(version, topology).value();
}

TEST(SubsliceWorkersTest, TilesTheHostGridXFirst) {
  auto v5p32 = Type("v5p", "2x2x4");
  EXPECT_THAT(SubsliceWorkers(v5p32, {2, 2, 2}).value(),
              ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3)));
  EXPECT_THAT(SubsliceWorkers(v5p32, {2, 2, 1}).value(),
              ElementsAre(ElementsAre(0), ElementsAre(1), ElementsAre(2),
                          ElementsAre(3)));
  // v6e 4x4: hosts (0,0) (1,0) / (0,1) (1,1); a 2x4 is a column.
  EXPECT_THAT(SubsliceWorkers(Type("v6e", "4x4"), {2, 4}).value(),
              ElementsAre(ElementsAre(0, 2), ElementsAre(1, 3)));
  EXPECT_THAT(SubsliceWorkers(v5p32, {1, 2, 2}).status().message(),
              HasSubstr("does not cut a v5p-32 (2x2x4) slice into whole "
                        "hosts"));
  EXPECT_THAT(SubsliceWorkers(v5p32, {2, 2, 3}).status().message(),
              HasSubstr("into whole hosts"));
  EXPECT_THAT(SubsliceWorkers(v5p32, {2, 4}).status().message(),
              HasSubstr("has 2 dimensions"));
}

TEST(ChooseSubsliceTest, TakesTheFirstIdleTile) {
  std::vector<NodeInfo> nodes = {V5p32Host("big", 0, 0), V5p32Host("big", 1),
                                 V5p32Host("big", 2), V5p32Host("big", 3)};
  std::vector<ClusterSlice> slices = ClusterSlices(nodes);
  auto chosen = ChooseSubslice(slices, Type("v5p", "2x2x2"), -1);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(chosen->slice->name, "big");
  EXPECT_EQ(chosen->index, 1);
  EXPECT_THAT(chosen->workers, ElementsAre(2, 3));
  // Asked for tile 0, busy with work no group holds: it is waited for.
  chosen = ChooseSubslice(slices, Type("v5p", "2x2x2"), 0);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(chosen->index, 0);
}

TEST(ChooseSubsliceTest, AWorkerAGroupClaimsIsBusy) {
  std::vector<NodeInfo> nodes = {V5p32Host("big", 0), V5p32Host("big", 1),
                                 V5p32Host("big", 2), V5p32Host("big", 3)};
  proto::ClusterStatus status;
  proto::PlacementGroupInfo* pg = status.add_placement_groups();
  pg->set_state(proto::PlacementGroupInfo::PENDING);
  auto* s = pg->mutable_spec()->add_bundle_label_selector();
  (*s->mutable_labels())["ray.io/tpu-slice-name"] = "big";
  (*s->mutable_labels())["shoal.io/tpu-worker-id"] = "3";
  ClaimedWorkers claimed = ClaimedBy(status);
  EXPECT_THAT(claimed, ElementsAre(Pair("big", "3")));
  std::vector<ClusterSlice> slices = ClusterSlices(nodes, claimed);
  EXPECT_FALSE(slices[0].idle);
  auto chosen = ChooseSubslice(slices, Type("v5p", "2x2x2"), -1);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(chosen->index, 0);
  // Every tile claimed: refused, not waited for.
  for (const char* w : {"0", "1", "2"}) {
    auto* more = pg->mutable_spec()->add_bundle_label_selector();
    (*more->mutable_labels())["shoal.io/tpu-slice-name"] = "big";
    (*more->mutable_labels())["shoal.io/tpu-worker-id"] = w;
  }
  slices = ClusterSlices(nodes, ClaimedBy(status));
  EXPECT_THAT(
      ChooseSubslice(slices, Type("v5p", "2x2x2"), -1).status().message(),
      HasSubstr("every 2x2x2 sub-slice of big (v5p-32) is held by a "
                "placement group"));
  // A removed group claims nothing.
  pg->set_state(proto::PlacementGroupInfo::REMOVED);
  EXPECT_TRUE(ClaimedBy(status).empty());
}

TEST(ContestedTest, TheLaterOfTwoGroupsOnOneWorkerGivesWay) {
  proto::ClusterStatus status;
  auto group = [&](const std::string& id, int64_t made, const char* worker) {
    proto::PlacementGroupInfo* pg = status.add_placement_groups();
    pg->set_pg_id(id);
    pg->set_created_ms(made);
    pg->set_state(proto::PlacementGroupInfo::PENDING);
    auto* s = pg->mutable_spec()->add_bundle_label_selector();
    (*s->mutable_labels())["shoal.io/tpu-slice-name"] = "big";
    (*s->mutable_labels())["shoal.io/tpu-worker-id"] = worker;
    return pg;
  };
  group("a", 3, "0");
  group("b", 10, "0");
  group("c", 10, "1");
  EXPECT_FALSE(Contested(status, "a"));  // made first
  EXPECT_TRUE(Contested(status, "b"));
  EXPECT_FALSE(Contested(status, "c"));  // another worker
  // Made in the same millisecond: the smaller id goes first.
  proto::PlacementGroupInfo* d = group("d", 10, "1");
  EXPECT_TRUE(Contested(status, "d"));
  EXPECT_FALSE(Contested(status, "c"));
  // A removed group contests nothing.
  status.mutable_placement_groups(0)->set_state(
      proto::PlacementGroupInfo::REMOVED);
  EXPECT_FALSE(Contested(status, "b"));
  EXPECT_FALSE(Contested(status, "unknown"));
  (void)d;
}

TEST(ChooseSubsliceTest, NoSliceThatCanBeCutSaysWhy) {
  std::vector<NodeInfo> nodes = {V5pHost("a", 0), V5pHost("a", 1)};
  std::vector<ClusterSlice> slices = ClusterSlices(nodes);
  EXPECT_THAT(
      ChooseSubslice(slices, Type("v5p", "2x2x4"), -1).status().message(),
      HasSubstr("no intact v5p slice can be cut into a 2x2x4 "
                "sub-slice"));
  EXPECT_THAT(ChooseSubslice(slices, Type("v6e", "2x2"), -1).status().message(),
              HasSubstr("no intact v6e slice"));
}

}  // namespace
}  // namespace shoal::internal
