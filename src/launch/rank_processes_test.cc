#include "launch/rank_processes.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launch/gang_plan.h"

namespace shoal::launch {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::Key;
using ::testing::Not;
using ::testing::Pair;

proto::LaunchHost Host(const std::string& address, const std::string& kind,
                       int devices, int worker = 0) {
  proto::LaunchHost h;
  h.set_node_id("node-" + address);
  h.set_address(address);
  h.set_kind(kind);
  h.set_num_devices(devices);
  if (kind == "TPU") {
    h.set_tpu_type("v5p-16");
    h.set_tpu_worker_id(worker);
  }
  return h;
}

// Host `index` of a two-host gang of `kind` hosts running `python train.py`.
proto::LaunchHostSpec Spec(const std::string& kind, int devices, int index,
                           bool per_host = false) {
  proto::LaunchHostSpec spec;
  spec.set_launch_id("g1-0");
  spec.set_host_index(index);
  spec.add_argv("python");
  spec.add_argv("train.py");
  *spec.add_hosts() = Host("10.0.0.1", kind, devices, 0);
  *spec.add_hosts() = Host("10.0.0.2", kind, devices, 1);
  spec.set_per_host(per_host);
  return spec;
}

std::vector<RankProcessPlan> Plan(const proto::LaunchHostSpec& spec,
                                  const std::string& gloo = "eth1") {
  LaunchSpec gang = GangOf(spec);
  gang.rendezvous.master_port = 41000;
  gang.rendezvous.coordinator_port = 41000;
  auto envs = ComputeLaunchEnvironments(gang);
  EXPECT_TRUE(envs.ok()) << envs.status();
  if (!envs.ok()) return {};
  return PlanRanks(spec, *envs, gloo, "/s/logs/launch-g1-0");
}

TEST(PlanRanksTest, ATpuHostRunsOneProcessPerChipWithTheXlaContract) {
  std::vector<RankProcessPlan> plans = Plan(Spec("TPU", 4, 1));
  ASSERT_EQ(plans.size(), 4u);
  const RankProcessPlan& p = plans[2];
  EXPECT_EQ(p.rank, 6);
  EXPECT_THAT(p.argv, ElementsAre("python", "train.py"));
  EXPECT_EQ(p.prefix, "[rank 6 host 1 chip 2]");
  EXPECT_EQ(p.log_path, "/s/logs/launch-g1-0/rank-6.log");
  EXPECT_THAT(p.env, Contains(Pair("TPU_VISIBLE_CHIPS", "2")));
  EXPECT_THAT(p.env, Contains(Pair("CLOUD_TPU_TASK_ID", "6")));
  EXPECT_THAT(p.env, Contains(Pair("RANK", "6")));
  EXPECT_THAT(p.env, Contains(Pair("LOCAL_RANK", "2")));
  EXPECT_THAT(p.env, Contains(Pair("WORLD_SIZE", "8")));
  EXPECT_THAT(p.env, Contains(Pair("MASTER_ADDR", "10.0.0.1")));
  EXPECT_THAT(p.env, Contains(Pair("MASTER_PORT", "41000")));
  EXPECT_THAT(p.env, Contains(Pair("GLOO_SOCKET_IFNAME", "eth1")));
  // The command is not a worker, whatever its runner was.
  EXPECT_THAT(p.unset_env, Contains("SHOAL_ROLE"));
  EXPECT_THAT(p.env, Not(Contains(Key("SHOAL_ROLE"))));
}

TEST(PlanRanksTest, RanksOfOtherHostsAreNotStartedHere) {
  std::vector<RankProcessPlan> plans = Plan(Spec("TPU", 4, 0));
  std::vector<int> ranks;
  for (const RankProcessPlan& p : plans) ranks.push_back(p.rank);
  EXPECT_THAT(ranks, ElementsAre(0, 1, 2, 3));
}

TEST(PlanRanksTest, PrefixesNameGpusAndLeaveOutCpuStandIns) {
  EXPECT_EQ(Plan(Spec("GPU", 2, 1))[1].prefix, "[rank 3 host 1 gpu 1]");
  EXPECT_EQ(Plan(Spec("CPU", 2, 1))[1].prefix, "[rank 3 host 1]");
  // One process per host holds every device: no device in its prefix.
  std::vector<RankProcessPlan> per_host = Plan(Spec("TPU", 4, 1, true));
  ASSERT_EQ(per_host.size(), 1u);
  EXPECT_EQ(per_host[0].prefix, "[rank 1 host 1]");
  EXPECT_THAT(per_host[0].env, Contains(Pair("SHOAL_PROCESS_ID", "1")));
  EXPECT_THAT(per_host[0].env,
              Contains(Pair("SHOAL_COORDINATOR_ADDRESS", "10.0.0.1:41000")));
}

TEST(PlanRanksTest, AUsersGlooInterfaceIsLeftAlone) {
  for (const RankProcessPlan& p : Plan(Spec("CPU", 2, 0), "")) {
    EXPECT_THAT(p.env, Not(Contains(Key("GLOO_SOCKET_IFNAME"))));
  }
}

TEST(PlanRanksTest, TheEnvironmentIsTheFrameworkContractsUnchanged) {
  proto::LaunchHostSpec spec = Spec("GPU", 2, 0);
  LaunchSpec gang = GangOf(spec);
  gang.rendezvous.master_port = 41000;
  gang.rendezvous.coordinator_port = 41000;
  auto envs = ComputeLaunchEnvironments(gang);
  ASSERT_TRUE(envs.ok());
  std::vector<RankProcessPlan> plans =
      PlanRanks(spec, *envs, "", "/s/logs/launch-g1-0");
  ASSERT_EQ(plans.size(), 2u);
  for (size_t i = 0; i < plans.size(); ++i) {
    EXPECT_EQ(plans[i].env, (*envs)[i].set);
    std::vector<std::string> unset = (*envs)[i].unset;
    unset.push_back("SHOAL_ROLE");
    EXPECT_EQ(plans[i].unset_env, unset);
  }
}

}  // namespace
}  // namespace shoal::launch
