#include "launch/gang_plan.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launch/launcher.h"

namespace shoal::launch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

NodeInfo Node(const std::string& id, const std::string& address,
              std::map<std::string, double> total = {{"CPU", 8}},
              std::map<std::string, std::string> labels = {},
              bool alive = true) {
  NodeInfo n;
  n.node_id = id;
  n.address = address;
  n.alive = alive;
  n.total = std::move(total);
  n.labels = std::move(labels);
  return n;
}

NodeInfo TpuNode(const std::string& id, const std::string& address,
                 int worker) {
  return Node(id, address, {{"CPU", 8}, {"TPU", 4}},
              {{"shoal.io/tpu-slice-name", "s1"},
               {"shoal.io/tpu-pod-type", "v5p-16"},
               {"shoal.io/tpu-worker-id", std::to_string(worker)}});
}

// A fixed cluster: three CPU hosts (one dead) and two GPU hosts.
std::vector<NodeInfo> MixedCluster() {
  return {Node("c1", "10.0.0.1:7000"), Node("c2", "10.0.0.2:7000"),
          Node("dead", "10.0.0.9:7000", {{"CPU", 8}}, {}, false),
          Node("g1", "10.0.1.1:7000", {{"CPU", 8}, {"GPU", 2}}),
          Node("g2", "10.0.1.2:7000", {{"CPU", 8}, {"GPU", 2}})};
}

TEST(GangPlanTest, ChoosesEveryAliveNodeByDefault) {
  LaunchOptions options;
  GangChoice c = ChooseGang(options, MixedCluster());
  EXPECT_FALSE(c.slice_gang);
  EXPECT_EQ(c.num_nodes, 4);
  EXPECT_EQ(c.nproc, 1);
}

TEST(GangPlanTest, LocalAndNodesNarrowTheGang) {
  LaunchOptions options;
  options.local = true;
  options.nproc_per_node = 3;
  GangChoice local = ChooseGang(options, MixedCluster());
  EXPECT_EQ(local.num_nodes, 1);
  EXPECT_EQ(local.nproc, 3);
  options.local = false;
  options.nodes = 2;
  EXPECT_EQ(ChooseGang(options, MixedCluster()).num_nodes, 2);
}

TEST(GangPlanTest, AClusterWithASliceLaunchesOnTheSliceUnlessNarrowed) {
  std::vector<NodeInfo> nodes = {TpuNode("t0", "10.0.2.1:7000", 0),
                                 TpuNode("t1", "10.0.2.2:7000", 1),
                                 Node("c1", "10.0.0.1:7000")};
  LaunchOptions options;
  GangChoice c = ChooseGang(options, nodes);
  EXPECT_TRUE(c.slice_gang);
  EXPECT_EQ(c.slice, "");
  options.nodes = 1;
  EXPECT_FALSE(ChooseGang(options, nodes).slice_gang);
  options.nodes = 0;
  options.local = true;
  EXPECT_FALSE(ChooseGang(options, nodes).slice_gang);
  // A named slice wins over everything.
  options.slice = "s1";
  GangChoice named = ChooseGang(options, nodes);
  EXPECT_TRUE(named.slice_gang);
  EXPECT_EQ(named.slice, "s1");
}

TEST(GangPlanTest, DescribesEachKindOfHost) {
  proto::LaunchHost tpu = DescribeHost(TpuNode("t1", "10.0.2.2:7000", 1), 5);
  EXPECT_EQ(tpu.node_id(), "t1");
  EXPECT_EQ(tpu.address(), "10.0.2.2");
  EXPECT_EQ(tpu.kind(), "TPU");
  EXPECT_EQ(tpu.num_devices(), 4);
  EXPECT_EQ(tpu.tpu_type(), "v5p-16");
  EXPECT_EQ(tpu.tpu_worker_id(), 1);
  proto::LaunchHost gpu = DescribeHost(MixedCluster()[3], 5);
  EXPECT_EQ(gpu.kind(), "GPU");
  EXPECT_EQ(gpu.num_devices(), 2);
  proto::LaunchHost cpu = DescribeHost(MixedCluster()[0], 5);
  EXPECT_EQ(cpu.kind(), "CPU");
  EXPECT_EQ(cpu.num_devices(), 5);  // --nproc-per-node stand-ins
  EXPECT_EQ(DescribeHost(MixedCluster()[0], 0).num_devices(), 1);
  // An IPv6 address keeps its colons; only the port goes.
  EXPECT_EQ(DescribeHost(Node("v6", "[::1]:7000"), 1).address(), "[::1]");
}

TEST(GangPlanTest, ABundleHoldsTheDevicesEnoughHostsShare) {
  std::vector<NodeInfo> alive = MixedCluster();
  alive.erase(alive.begin() + 2);  // the dead one
  EXPECT_THAT(GangBundle(alive, 2, 1),
              ElementsAre(Pair("CPU", 1), Pair("GPU", 2)));
  // Three hosts: only two have GPUs, so the bundle is a CPU alone.
  EXPECT_THAT(GangBundle(alive, 3, 1), ElementsAre(Pair("CPU", 1)));
  // TPU hosts win a tie.
  std::vector<NodeInfo> tied = {TpuNode("t0", "a:1", 0),
                                TpuNode("t1", "b:1", 1), MixedCluster()[3],
                                MixedCluster()[4]};
  EXPECT_THAT(GangBundle(tied, 2, 1),
              ElementsAre(Pair("CPU", 1), Pair("TPU", 4)));
}

TEST(GangPlanTest, ANodesGroupSpreadsOverAliveNodesButTheExcluded) {
  auto pg = NodesGroupOptions(MixedCluster(), 2, 1, {"c1", "c2"});
  ASSERT_TRUE(pg.ok()) << pg.status();
  EXPECT_EQ(pg->strategy, PlacementStrategy::kStrictSpread);
  ASSERT_EQ(pg->bundles.size(), 2u);
  EXPECT_THAT(pg->bundles[0], ElementsAre(Pair("CPU", 1), Pair("GPU", 2)));
  // Pinned to the nodes counted, which the head may think alive still.
  ASSERT_EQ(pg->bundle_label_selector.size(), 2u);
  EXPECT_THAT(pg->bundle_label_selector[1],
              ElementsAre(Pair("shoal.io/node-id", "in(g1,g2)")));
  auto too_many = NodesGroupOptions(MixedCluster(), 4, 1, {"g1"});
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.status().message(),
            "asked for 4 nodes; the cluster has 3 alive that the gang may use");
  EXPECT_TRUE(NodesGroupOptions(MixedCluster(), 4, 1, {})
                  ->bundle_label_selector.empty());
  EXPECT_THAT(NodesGroupOptions(MixedCluster(), 0, 1, {"c1", "c2", "g1", "g2"})
                  .status()
                  .message(),
              HasSubstr("no node the gang may use is alive"));
}

// In a Slurm allocation: only the allocation's hosts, by full or short name.
TEST(GangPlanTest, HostsNarrowTheGangToTheAllocation) {
  std::vector<NodeInfo> nodes = MixedCluster();
  nodes[0].hostname = "node1.cluster.local";
  nodes[1].hostname = "node2";
  nodes[3].hostname = "gpu1";
  nodes[4].hostname = "gpu2";
  LaunchOptions options;
  options.hosts = {"node1", "node2", "node3"};
  GangChoice c = ChooseGang(options, nodes);
  EXPECT_EQ(c.num_nodes, 2);
  EXPECT_THAT(c.outside, ElementsAre("g1", "g2"));
  auto pg = NodesGroupOptions(nodes, c.num_nodes, 1, c.outside);
  ASSERT_TRUE(pg.ok()) << pg.status();
  EXPECT_THAT(pg->bundle_label_selector[0],
              ElementsAre(Pair("shoal.io/node-id", "in(c1,c2)")));
}

TEST(GangPlanTest, HostsFollowTheBundlesOrder) {
  std::vector<proto::LaunchHost> hosts =
      HostsOf({"g2", "c1", "gone"}, MixedCluster(), 1);
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[0].node_id(), "g2");
  EXPECT_EQ(hosts[1].node_id(), "c1");
}

TEST(GangPlanTest, CheckGangGivesEachRankItsHost) {
  LaunchOptions options;
  options.nproc_per_node = 2;
  std::vector<proto::LaunchHost> hosts =
      HostsOf({"c1", "c2"}, MixedCluster(), 2);
  auto shape = CheckGang(options, hosts, false);
  ASSERT_TRUE(shape.ok()) << shape.status();
  EXPECT_EQ(shape->expected_processes, 4);
  EXPECT_THAT(shape->rank_hosts,
              ElementsAre(Pair(0, 0), Pair(1, 0), Pair(2, 1), Pair(3, 1)));
  options.per_host = true;
  shape = CheckGang(options, hosts, false);
  ASSERT_TRUE(shape.ok()) << shape.status();
  EXPECT_THAT(shape->rank_hosts, ElementsAre(Pair(0, 0), Pair(1, 1)));
}

TEST(GangPlanTest, NprocPerNodeOnDeviceHostsSaysToDropIt) {
  LaunchOptions options;
  options.nproc_per_node = 3;
  auto shape = CheckGang(options, HostsOf({"g1"}, MixedCluster(), 3), false);
  ASSERT_FALSE(shape.ok());
  EXPECT_EQ(shape.status().message(),
            "--nproc-per-node 3: the gang's hosts have 2 GPU each, and a "
            "launch runs one process per device (--per-device) or per host "
            "(--per-host); drop --nproc-per-node");
}

TEST(GangPlanTest, PartOfATpuSliceSaysToLaunchOnTheWholeSlice) {
  LaunchOptions options;
  options.local = true;
  std::vector<NodeInfo> nodes = {TpuNode("t0", "10.0.2.1:7000", 0),
                                 TpuNode("t1", "10.0.2.2:7000", 1)};
  auto shape = CheckGang(options, HostsOf({"t0"}, nodes, 1), false);
  ASSERT_FALSE(shape.ok());
  EXPECT_THAT(shape.status().message(),
              HasSubstr(". A TPU slice runs as a whole: leave out --local and "
                        "--nodes to launch on every host of the slice"));
  auto whole = CheckGang(options, HostsOf({"t0", "t1"}, nodes, 1), true);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->expected_processes, 8);
}

TEST(GangPlanTest, GangOfCarriesTheHostsModeAndRestart) {
  proto::LaunchHostSpec spec;
  spec.set_per_host(true);
  spec.set_restart_count(2);
  *spec.add_hosts() = DescribeHost(TpuNode("t1", "10.0.2.2:7000", 1), 1);
  LaunchSpec gang = GangOf(spec);
  EXPECT_EQ(gang.mode, LaunchMode::kPerHost);
  EXPECT_EQ(gang.restart_count, 2);
  ASSERT_EQ(gang.hosts.size(), 1u);
  EXPECT_EQ(gang.hosts[0].kind, DeviceKind::kTpu);
  EXPECT_EQ(gang.hosts[0].address, "10.0.2.2");
  EXPECT_EQ(gang.hosts[0].num_devices, 4);
  EXPECT_EQ(gang.hosts[0].tpu_accelerator_type, "v5p-16");
  EXPECT_EQ(gang.hosts[0].tpu_worker_id, 1);
}

}  // namespace
}  // namespace shoal::launch

namespace shoal::launch {
namespace {

TEST(GangPlanTest, EachRunnerIsToldItsHostAndTheWholeGang) {
  LaunchOptions options;
  options.argv = {"python", "train.py"};
  options.per_host = true;
  std::vector<proto::LaunchHost> hosts =
      HostsOf({"c1", "c2"}, MixedCluster(), 1);
  std::vector<proto::LaunchHostSpec> specs =
      RunnerSpecs(options, hosts, "ab-2", "10.0.0.5:4000", 2, "tok");
  ASSERT_EQ(specs.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const proto::LaunchHostSpec& s = specs[i];
    EXPECT_EQ(s.host_index(), i);
    EXPECT_EQ(s.launch_id(), "ab-2");
    EXPECT_EQ(s.launcher_address(), "10.0.0.5:4000");
    EXPECT_THAT(s.argv(), ElementsAre("python", "train.py"));
    ASSERT_EQ(s.hosts_size(), 2);
    EXPECT_EQ(s.hosts(1).node_id(), "c2");
    EXPECT_TRUE(s.per_host());
    EXPECT_EQ(s.restart_count(), 2);
    EXPECT_EQ(s.token(), "tok");
  }
}

TEST(GangPlanTest, ARunnerHoldsItsHostsDevicesWhenItsBundleHasThem) {
  proto::LaunchHost gpu = DescribeHost(MixedCluster()[3], 1);
  proto::LaunchHost cpu = DescribeHost(MixedCluster()[0], 1);
  std::map<std::string, double> cpu_only = {{"CPU", 1}};
  std::map<std::string, double> with_gpus = {{"CPU", 1}, {"GPU", 2}};
  EXPECT_EQ(RunnerDevices(gpu, false, with_gpus),
            (std::pair<std::string, int>("GPU", 2)));
  EXPECT_EQ(RunnerDevices(gpu, false, cpu_only),
            (std::pair<std::string, int>("", 0)));
  EXPECT_EQ(RunnerDevices(cpu, false, with_gpus),
            (std::pair<std::string, int>("", 0)));
  // A slice's bundles hold whole hosts.
  proto::LaunchHost tpu = DescribeHost(TpuNode("t0", "a:1", 0), 1);
  EXPECT_EQ(RunnerDevices(tpu, true, {}),
            (std::pair<std::string, int>("TPU", 4)));
}

}  // namespace
}  // namespace shoal::launch
