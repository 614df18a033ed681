#include "launch/framework_env.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::launch {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Key;
using ::testing::Not;
using ::testing::Pair;

using Vars = std::vector<std::pair<std::string, std::string>>;

GangHost Tpu(std::string address, int worker_id, std::string type = "v5p-16",
             int chips = 4) {
  GangHost host;
  host.address = std::move(address);
  host.kind = DeviceKind::kTpu;
  host.num_devices = chips;
  host.tpu_accelerator_type = std::move(type);
  host.tpu_worker_id = worker_id;
  return host;
}

GangHost Gpu(std::string address, int gpus, std::vector<int> held = {}) {
  GangHost host;
  host.address = std::move(address);
  host.kind = DeviceKind::kGpu;
  host.num_devices = gpus;
  host.device_ids = std::move(held);
  return host;
}

GangHost Cpu(std::string address, int devices) {
  GangHost host;
  host.address = std::move(address);
  host.kind = DeviceKind::kCpu;
  host.num_devices = devices;
  return host;
}

LaunchSpec Spec(std::vector<GangHost> hosts,
                LaunchMode mode = LaunchMode::kPerDevice) {
  LaunchSpec spec;
  spec.hosts = std::move(hosts);
  spec.mode = mode;
  return spec;
}

// The slice of LAUNCH_CONTRACTS' example: v5p-16, hosts A and B, 4 chips each.
LaunchSpec V5p16(LaunchMode mode = LaunchMode::kPerDevice) {
  return Spec({Tpu("A", 0), Tpu("B", 1)}, mode);
}

LaunchSpec V4_32() {
  return Spec({Tpu("10.0.0.1", 0, "v4-32"), Tpu("10.0.0.2", 1, "v4-32"),
               Tpu("10.0.0.3", 2, "v4-32"), Tpu("10.0.0.4", 3, "v4-32")});
}

// The LAUNCH_CONTRACTS row (h=1, r=2), every variable: nothing more, nothing
// less.
TEST(FrameworkEnvTest, LaunchContractsExampleRowExactly) {
  absl::StatusOr<std::vector<ProcessEnvironment>> procs =
      ComputeLaunchEnvironments(V5p16());
  ASSERT_TRUE(procs.ok()) << procs.status();
  ASSERT_EQ(procs->size(), 8u);
  const ProcessEnvironment& p = (*procs)[6];
  EXPECT_EQ(p.rank, 6);
  EXPECT_EQ(p.local_rank, 2);
  EXPECT_EQ(p.node_rank, 1);
  EXPECT_EQ(p.world_size, 8);
  EXPECT_EQ(p.local_world_size, 4);
  EXPECT_THAT(p.device_ids, ElementsAre(2));
  const std::map<std::string, std::string> want = {
      {"PJRT_DEVICE", "TPU"},
      {"TPU_VISIBLE_CHIPS", "2"},
      {"TPU_CHIPS_PER_PROCESS_BOUNDS", "1,1,1"},
      {"TPU_PROCESS_BOUNDS", "2,2,2"},
      {"TPU_PROCESS_ADDRESSES",
       "A:8476,A:8477,A:8478,A:8479,B:8476,B:8477,B:8478,B:8479"},
      {"TPU_PROCESS_PORT", "8478"},
      {"CLOUD_TPU_TASK_ID", "6"},
      {"PJRT_LOCAL_PROCESS_RANK", "2"},
      {"PJRT_LOCAL_PROCESS_COUNT", "4"},
      {"TPU_SKIP_MDS_QUERY", "1"},
      {"TPU_ACCELERATOR_TYPE", "v5p-16"},
      {"TPU_WORKER_ID", "1"},
      {"TPU_WORKER_HOSTNAMES", "A,B"},
      {"RANK", "6"},
      {"LOCAL_RANK", "2"},
      {"WORLD_SIZE", "8"},
      {"LOCAL_WORLD_SIZE", "4"},
      {"GROUP_RANK", "1"},
      {"GROUP_WORLD_SIZE", "2"},
      {"MASTER_ADDR", "A"},
      {"MASTER_PORT", "29500"},
      {"TORCHELASTIC_RESTART_COUNT", "0"},
      {"SHOAL_RANK", "6"},
      {"SHOAL_LOCAL_RANK", "2"},
      {"SHOAL_WORLD_SIZE", "8"},
      {"SHOAL_LOCAL_WORLD_SIZE", "4"},
      {"SHOAL_NODE_RANK", "1"},
      {"SHOAL_NUM_NODES", "2"},
      {"SHOAL_LAUNCH_MODE", "per-device"},
      {"SHOAL_DEVICE_KIND", "TPU"},
      {"SHOAL_DEVICE_IDS", "2"},
      {"SHOAL_RESTART_COUNT", "0"},
  };
  EXPECT_EQ(p.set, want);
  // A one-slice gang's processes lose any MEGASCALE_* they inherit.
  EXPECT_THAT(
      p.unset,
      ElementsAre("MEGASCALE_COORDINATOR_ADDRESS", "MEGASCALE_NUM_SLICES",
                  "MEGASCALE_PORT", "MEGASCALE_SLICE_ID",
                  "TPU_CHIPS_PER_HOST_BOUNDS", "TPU_HOST_BOUNDS"));
}

// Two v5p-16 slices: hosts A, B (slice 0) and C, D (slice 1).
LaunchSpec TwoV5p16(LaunchMode mode) {
  std::vector<GangHost> hosts = {Tpu("A", 0), Tpu("B", 1), Tpu("C", 0),
                                 Tpu("D", 1)};
  hosts[2].tpu_slice_index = hosts[3].tpu_slice_index = 1;
  return Spec(std::move(hosts), mode);
}

TEST(FrameworkEnvTest, MultiSliceHostCentricIsSliceScopedWithMegascale) {
  absl::StatusOr<std::vector<ProcessEnvironment>> procs =
      ComputeLaunchEnvironments(TwoV5p16(LaunchMode::kPerHost));
  ASSERT_TRUE(procs.ok()) << procs.status();
  ASSERT_EQ(procs->size(), 4u);
  const std::vector<std::string> hostnames = {"A,B", "A,B", "C,D", "C,D"};
  for (int p = 0; p < 4; ++p) {
    SCOPED_TRACE(p);
    const auto& set = (*procs)[p].set;
    EXPECT_EQ(set.at("TPU_WORKER_ID"), absl::StrCat(p % 2));
    EXPECT_EQ(set.at("TPU_WORKER_HOSTNAMES"), hostnames[p]);
    EXPECT_EQ(set.at("JAX_PROCESS_ID"), absl::StrCat(p));
    EXPECT_EQ(set.at("JAX_NUM_PROCESSES"), "4");
    EXPECT_EQ(set.at("JAX_COORDINATOR_ADDRESS"), "A:8482");
    EXPECT_EQ(set.at("SHOAL_GLOBAL_DEVICE_COUNT"), "16");
    EXPECT_EQ(set.at("MEGASCALE_COORDINATOR_ADDRESS"), "A");
    EXPECT_EQ(set.at("MEGASCALE_PORT"), "8081");
    EXPECT_EQ(set.at("MEGASCALE_NUM_SLICES"), "2");
    EXPECT_EQ(set.at("MEGASCALE_SLICE_ID"), absl::StrCat(p / 2));
    EXPECT_THAT((*procs)[p].unset, Not(Contains("MEGASCALE_SLICE_ID")));
  }
}

TEST(FrameworkEnvTest, MultiSliceDeviceCentricRanksSpanTheSlices) {
  LaunchSpec spec = TwoV5p16(LaunchMode::kPerDevice);
  spec.rendezvous.megascale_coordinator_host = "coord";
  spec.rendezvous.megascale_port = 9000;
  absl::StatusOr<std::vector<ProcessEnvironment>> procs =
      ComputeLaunchEnvironments(spec);
  ASSERT_TRUE(procs.ok()) << procs.status();
  ASSERT_EQ(procs->size(), 16u);
  const ProcessEnvironment& p = (*procs)[13];  // slice 1, host D, chip 1
  EXPECT_EQ(p.set.at("RANK"), "13");
  EXPECT_EQ(p.set.at("WORLD_SIZE"), "16");
  EXPECT_EQ(p.set.at("CLOUD_TPU_TASK_ID"), "5");
  EXPECT_EQ(p.set.at("TPU_WORKER_ID"), "1");
  EXPECT_EQ(p.set.at("TPU_WORKER_HOSTNAMES"), "C,D");
  EXPECT_EQ(p.set.at("TPU_PROCESS_BOUNDS"), "2,2,2");
  EXPECT_EQ(p.set.at("TPU_PROCESS_ADDRESSES"),
            "C:8476,C:8477,C:8478,C:8479,D:8476,D:8477,D:8478,D:8479");
  EXPECT_EQ(p.set.at("MEGASCALE_COORDINATOR_ADDRESS"), "coord");
  EXPECT_EQ(p.set.at("MEGASCALE_PORT"), "9000");
  EXPECT_EQ(p.set.at("MEGASCALE_SLICE_ID"), "1");
  EXPECT_EQ((*procs)[3].set.at("MEGASCALE_SLICE_ID"), "0");
}

TEST(FrameworkEnvTest, MultiSliceGangsMustBeWholeSlicesInOrder) {
  LaunchSpec spec = TwoV5p16(LaunchMode::kPerHost);
  spec.hosts.pop_back();  // slice 1 lacks worker 1
  EXPECT_THAT(ComputeLaunchEnvironments(spec).status().message(),
              HasSubstr("include every host of each slice"));
  spec = TwoV5p16(LaunchMode::kPerHost);
  std::swap(spec.hosts[1], spec.hosts[2]);  // slices interleaved
  EXPECT_THAT(ComputeLaunchEnvironments(spec).status().message(),
              HasSubstr("must be in slice 0"));
  spec = TwoV5p16(LaunchMode::kPerHost);
  spec.rendezvous.megascale_port = 0;
  EXPECT_THAT(ComputeLaunchEnvironments(spec).status().message(),
              HasSubstr("MEGASCALE_PORT 0 is not a TCP port"));
  // Stable order puts slice 0 first, then each slice by worker id.
  std::vector<GangHost> shuffled = TwoV5p16(LaunchMode::kPerHost).hosts;
  std::swap(shuffled[0], shuffled[3]);
  std::vector<GangHost> ordered = OrderHostsStably(shuffled);
  EXPECT_EQ(ordered[0].address, "A");
  EXPECT_EQ(ordered[3].address, "D");
}

// Every process of a launch: ranks dense and in order, ids and ports follow.
TEST(FrameworkEnvTest, PerDeviceRanksAreDenseAndConsistent) {
  absl::StatusOr<std::vector<ProcessEnvironment>> procs =
      ComputeLaunchEnvironments(V4_32());
  ASSERT_TRUE(procs.ok()) << procs.status();
  ASSERT_EQ(procs->size(), 16u);
  for (int i = 0; i < 16; ++i) {
    const ProcessEnvironment& p = (*procs)[i];
    SCOPED_TRACE(i);
    EXPECT_EQ(p.rank, i);
    EXPECT_EQ(p.node_rank, i / 4);
    EXPECT_EQ(p.local_rank, i % 4);
    EXPECT_EQ(p.set.at("CLOUD_TPU_TASK_ID"), absl::StrCat(i));
    EXPECT_EQ(p.set.at("TPU_VISIBLE_CHIPS"), absl::StrCat(i % 4));
    EXPECT_EQ(p.set.at("TPU_PROCESS_PORT"), absl::StrCat(8476 + i % 4));
    EXPECT_EQ(p.set.at("TPU_WORKER_ID"), absl::StrCat(i / 4));
    EXPECT_EQ(p.set.at("MASTER_ADDR"), "10.0.0.1");
  }
}

struct ProcessCase {
  std::string name;
  LaunchSpec spec;
  size_t index;  // of the process checked
  int rank;
  int local_rank;
  int node_rank;
  int world_size;
  int local_world_size;
  std::vector<int> device_ids;
  Vars want;                        // each must be set to this value
  std::vector<std::string> absent;  // must not be set
  std::vector<std::string> unset;   // exactly
};

class ProcessEnvTest : public ::testing::TestWithParam<ProcessCase> {};

TEST_P(ProcessEnvTest, MatchesLaunchContracts) {
  const ProcessCase& c = GetParam();
  absl::StatusOr<std::vector<ProcessEnvironment>> procs =
      ComputeLaunchEnvironments(c.spec);
  ASSERT_TRUE(procs.ok()) << procs.status();
  ASSERT_LT(c.index, procs->size());
  const ProcessEnvironment& p = (*procs)[c.index];
  EXPECT_EQ(p.rank, c.rank);
  EXPECT_EQ(p.local_rank, c.local_rank);
  EXPECT_EQ(p.node_rank, c.node_rank);
  EXPECT_EQ(p.world_size, c.world_size);
  EXPECT_EQ(p.local_world_size, c.local_world_size);
  EXPECT_EQ(p.device_ids, c.device_ids);
  for (const auto& [name, value] : c.want) {
    EXPECT_THAT(p.set, Contains(Pair(name, value))) << name;
  }
  for (const std::string& name : c.absent) {
    EXPECT_THAT(p.set, Not(Contains(Key(name)))) << name;
  }
  // A one-slice TPU gang's processes also lose any MEGASCALE_* they
  // inherit (checked in the multi-slice tests).
  std::set<std::string> unset(c.unset.begin(), c.unset.end());
  if (c.spec.hosts[0].kind == DeviceKind::kTpu) {
    unset.insert({"MEGASCALE_COORDINATOR_ADDRESS", "MEGASCALE_NUM_SLICES",
                  "MEGASCALE_PORT", "MEGASCALE_SLICE_ID"});
  }
  EXPECT_THAT(p.unset, ElementsAreArray(unset));
}

LaunchSpec GpuSpec() {
  LaunchSpec spec =
      Spec({Gpu("10.1.0.1", 8, {0, 1}), Gpu("10.1.0.2", 8, {4, 6})});
  spec.restart_count = 2;
  spec.rendezvous.master_port = 12355;
  return spec;
}

LaunchSpec Ipv6Spec(LaunchMode mode) {
  LaunchSpec spec = Spec({Tpu("fd00::1", 0), Tpu("fd00::2", 1)}, mode);
  return spec;
}

LaunchSpec HostCentricGpu() {
  LaunchSpec spec = Spec({Gpu("10.1.0.1", 8, {0, 1, 2, 3}), Gpu("10.1.0.2", 8)},
                         LaunchMode::kPerHost);
  spec.rendezvous.coordinator_port = 41000;
  return spec;
}

const std::vector<std::string> kTpuPerHostUnset = {
    "CLOUD_TPU_TASK_ID",
    "PJRT_LOCAL_PROCESS_COUNT",
    "PJRT_LOCAL_PROCESS_RANK",
    "TPU_CHIPS_PER_HOST_BOUNDS",
    "TPU_CHIPS_PER_PROCESS_BOUNDS",
    "TPU_HOST_BOUNDS",
    "TPU_PROCESS_ADDRESSES",
    "TPU_PROCESS_BOUNDS",
    "TPU_PROCESS_PORT"};

INSTANTIATE_TEST_SUITE_P(
    Cases, ProcessEnvTest,
    ::testing::Values(
        ProcessCase{
            "V5p8SingleHost",
            Spec({Tpu("10.0.0.7", 0, "v5p-8")}),
            3,
            3,
            3,
            0,
            4,
            4,
            {3},
            {{"TPU_PROCESS_BOUNDS", "2,2,1"},
             {"TPU_CHIPS_PER_PROCESS_BOUNDS", "1,1,1"},
             {"TPU_PROCESS_ADDRESSES",
              "10.0.0.7:8476,10.0.0.7:8477,10.0.0.7:8478,10.0.0.7:8479"},
             {"TPU_PROCESS_PORT", "8479"},
             {"TPU_VISIBLE_CHIPS", "3"},
             {"CLOUD_TPU_TASK_ID", "3"},
             {"TPU_WORKER_ID", "0"},
             {"TPU_WORKER_HOSTNAMES", "10.0.0.7"},
             {"TPU_ACCELERATOR_TYPE", "v5p-8"},
             {"GROUP_RANK", "0"},
             {"MASTER_ADDR", "10.0.0.7"}},
            {},
            {"TPU_CHIPS_PER_HOST_BOUNDS", "TPU_HOST_BOUNDS"}},
        ProcessCase{
            "V4_32HostBounds114",
            V4_32(),
            13,
            13,
            1,
            3,
            16,
            4,
            {1},
            {{"TPU_PROCESS_BOUNDS", "2,2,4"},
             {"TPU_PROCESS_PORT", "8477"},
             {"CLOUD_TPU_TASK_ID", "13"},
             {"TPU_WORKER_ID", "3"},
             {"TPU_WORKER_HOSTNAMES", "10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4"},
             {"GROUP_RANK", "3"},
             {"WORLD_SIZE", "16"},
             {"SHOAL_NUM_NODES", "4"}},
            {},
            {"TPU_CHIPS_PER_HOST_BOUNDS", "TPU_HOST_BOUNDS"}},
        ProcessCase{"V5litepod8SingleHostEightChips",
                    Spec({Tpu("h", 0, "v5litepod-8", 8)}),
                    7,
                    7,
                    7,
                    0,
                    8,
                    8,
                    {7},
                    {{"TPU_PROCESS_BOUNDS", "2,4,1"},
                     {"TPU_PROCESS_PORT", "8483"},
                     {"PJRT_LOCAL_PROCESS_COUNT", "8"}},
                    {},
                    {"TPU_CHIPS_PER_HOST_BOUNDS", "TPU_HOST_BOUNDS"}},
        ProcessCase{
            "Ipv6AddressesInBrackets",
            Ipv6Spec(LaunchMode::kPerDevice),
            0,
            0,
            0,
            0,
            8,
            4,
            {0},
            {{"TPU_PROCESS_ADDRESSES",
              "[fd00::1]:8476,[fd00::1]:8477,[fd00::1]:8478,[fd00::1]:8479,"
              "[fd00::2]:8476,[fd00::2]:8477,[fd00::2]:8478,[fd00::2]:8479"},
             {"TPU_WORKER_HOSTNAMES", "fd00::1,fd00::2"},
             {"MASTER_ADDR", "fd00::1"}},
            {},
            {"TPU_CHIPS_PER_HOST_BOUNDS", "TPU_HOST_BOUNDS"}},
        ProcessCase{"GpuPerDeviceHeldIds",
                    GpuSpec(),
                    3,
                    3,
                    1,
                    1,
                    4,
                    2,
                    {6},
                    {{"CUDA_VISIBLE_DEVICES", "6"},
                     {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
                     {"OMP_NUM_THREADS", "1"},
                     {"RANK", "3"},
                     {"LOCAL_RANK", "1"},
                     {"WORLD_SIZE", "4"},
                     {"LOCAL_WORLD_SIZE", "2"},
                     {"GROUP_RANK", "1"},
                     {"MASTER_ADDR", "10.1.0.1"},
                     {"MASTER_PORT", "12355"},
                     {"TORCHELASTIC_RESTART_COUNT", "2"},
                     {"SHOAL_RESTART_COUNT", "2"},
                     {"SHOAL_DEVICE_KIND", "GPU"},
                     {"SHOAL_DEVICE_IDS", "6"},
                     {"SHOAL_LAUNCH_MODE", "per-device"}},
                    {"PJRT_DEVICE", "TPU_VISIBLE_CHIPS", "JAX_NUM_CPU_DEVICES"},
                    {}},
        ProcessCase{"GpuOneProcessPerHostKeepsOmpThreads",
                    Spec({Gpu("g1", 1), Gpu("g2", 1)}),
                    1,
                    1,
                    0,
                    1,
                    2,
                    1,
                    {0},
                    {{"CUDA_VISIBLE_DEVICES", "0"}, {"GROUP_RANK", "1"}},
                    {"OMP_NUM_THREADS"},
                    {}},
        ProcessCase{"CpuStandInPerDevice",
                    Spec({Cpu("127.0.0.1", 2), Cpu("127.0.0.1", 2)}),
                    2,
                    2,
                    0,
                    1,
                    4,
                    2,
                    {0},
                    {{"SHOAL_DEVICE_KIND", "CPU"},
                     {"SHOAL_DEVICE_IDS", "0"},
                     {"JAX_NUM_CPU_DEVICES", "1"},
                     {"XLA_FLAGS", "--xla_force_host_platform_device_count=1"},
                     {"OMP_NUM_THREADS", "1"},
                     {"RANK", "2"},
                     {"MASTER_ADDR", "127.0.0.1"}},
                    {"CUDA_VISIBLE_DEVICES", "PJRT_DEVICE"},
                    {}},
        ProcessCase{
            "HostCentricV5p16Process0",
            V5p16(LaunchMode::kPerHost),
            0,
            0,
            0,
            0,
            2,
            1,
            {0, 1, 2, 3},
            {{"SHOAL_PROCESS_ID", "0"},
             {"SHOAL_NUM_PROCESSES", "2"},
             {"SHOAL_COORDINATOR_ADDRESS", "A:8482"},
             {"JAX_COORDINATOR_ADDRESS", "A:8482"},
             {"JAX_COORDINATOR_PORT", "8482"},
             {"JAX_NUM_PROCESSES", "2"},
             {"JAX_PROCESS_ID", "0"},
             {"SHOAL_LOCAL_DEVICE_IDS", "0,1,2,3"},
             {"SHOAL_LOCAL_DEVICE_COUNT", "4"},
             {"SHOAL_GLOBAL_DEVICE_COUNT", "8"},
             {"SHOAL_LAUNCH_MODE", "per-host"},
             {"TPU_WORKER_ID", "0"},
             {"TPU_WORKER_HOSTNAMES", "A,B"},
             {"TPU_ACCELERATOR_TYPE", "v5p-16"},
             {"TPU_SKIP_MDS_QUERY", "1"},
             {"PJRT_DEVICE", "TPU"},
             {"TPU_VISIBLE_CHIPS", "0,1,2,3"},
             {"RANK", "0"},
             {"WORLD_SIZE", "2"},
             {"MASTER_ADDR", "A"},
             {"MASTER_PORT", "29500"}},
            {"TPU_HOST_BOUNDS", "TPU_CHIPS_PER_HOST_BOUNDS",
             "TPU_PROCESS_BOUNDS", "TPU_CHIPS_PER_PROCESS_BOUNDS",
             "TPU_PROCESS_ADDRESSES", "TPU_PROCESS_PORT", "CLOUD_TPU_TASK_ID"},
            kTpuPerHostUnset},
        ProcessCase{"HostCentricV5p16Process1",
                    V5p16(LaunchMode::kPerHost),
                    1,
                    1,
                    0,
                    1,
                    2,
                    1,
                    {0, 1, 2, 3},
                    {{"SHOAL_PROCESS_ID", "1"},
                     {"SHOAL_NUM_PROCESSES", "2"},
                     {"SHOAL_COORDINATOR_ADDRESS", "A:8482"},
                     {"JAX_COORDINATOR_ADDRESS", "A:8482"},
                     {"JAX_NUM_PROCESSES", "2"},
                     {"JAX_PROCESS_ID", "1"},
                     {"SHOAL_GLOBAL_DEVICE_COUNT", "8"},
                     {"SHOAL_LOCAL_DEVICE_COUNT", "4"},
                     {"TPU_WORKER_ID", "1"},
                     {"TPU_WORKER_HOSTNAMES", "A,B"},
                     {"RANK", "1"},
                     {"GROUP_RANK", "1"}},
                    {"TPU_HOST_BOUNDS", "TPU_CHIPS_PER_HOST_BOUNDS",
                     "TPU_PROCESS_BOUNDS"},
                    kTpuPerHostUnset},
        ProcessCase{"HostCentricIpv6Coordinator",
                    Ipv6Spec(LaunchMode::kPerHost),
                    1,
                    1,
                    0,
                    1,
                    2,
                    1,
                    {0, 1, 2, 3},
                    {{"JAX_COORDINATOR_ADDRESS", "[fd00::1]:8482"}},
                    {},
                    kTpuPerHostUnset},
        ProcessCase{"HostCentricGpu",
                    HostCentricGpu(),
                    0,
                    0,
                    0,
                    0,
                    2,
                    1,
                    {0, 1, 2, 3},
                    {{"CUDA_VISIBLE_DEVICES", "0,1,2,3"},
                     {"SHOAL_LOCAL_DEVICE_COUNT", "4"},
                     {"SHOAL_GLOBAL_DEVICE_COUNT", "12"},
                     {"JAX_COORDINATOR_ADDRESS", "10.1.0.1:41000"},
                     {"JAX_COORDINATOR_PORT", "41000"},
                     {"SHOAL_DEVICE_KIND", "GPU"}},
                    {"OMP_NUM_THREADS", "PJRT_DEVICE", "TPU_WORKER_ID"},
                    {}},
        ProcessCase{"HostCentricCpuStandIn",
                    Spec({Cpu("127.0.0.1", 4), Cpu("127.0.0.1", 4)},
                         LaunchMode::kPerHost),
                    1,
                    1,
                    0,
                    1,
                    2,
                    1,
                    {0, 1, 2, 3},
                    {{"JAX_NUM_CPU_DEVICES", "4"},
                     {"XLA_FLAGS", "--xla_force_host_platform_device_count=4"},
                     {"SHOAL_GLOBAL_DEVICE_COUNT", "8"},
                     {"SHOAL_PROCESS_ID", "1"},
                     {"SHOAL_COORDINATOR_ADDRESS", "127.0.0.1:8482"}},
                    {"CUDA_VISIBLE_DEVICES", "TPU_WORKER_ID"},
                    {}}),
    [](const ::testing::TestParamInfo<ProcessCase>& info) {
      return info.param.name;
    });

// spmd::Initialize() on each host of a v5p-16 reports 8 global devices.
TEST(FrameworkEnvTest, HostCentricV5p16GlobalDeviceCountOnEveryHost) {
  absl::StatusOr<std::vector<ProcessEnvironment>> procs =
      ComputeLaunchEnvironments(V5p16(LaunchMode::kPerHost));
  ASSERT_TRUE(procs.ok()) << procs.status();
  ASSERT_EQ(procs->size(), 2u);
  for (const ProcessEnvironment& p : *procs) {
    EXPECT_EQ(p.set.at("SHOAL_GLOBAL_DEVICE_COUNT"), "8");
    EXPECT_EQ(p.set.at("SHOAL_COORDINATOR_ADDRESS"), "A:8482");
  }
}

TEST(FrameworkEnvTest, RendezvousOverrides) {
  LaunchSpec spec = V5p16(LaunchMode::kPerHost);
  spec.rendezvous.master_addr = "head";
  spec.rendezvous.coordinator_host = "coord";
  spec.rendezvous.coordinator_port = 9000;
  absl::StatusOr<std::vector<ProcessEnvironment>> procs =
      ComputeLaunchEnvironments(spec);
  ASSERT_TRUE(procs.ok()) << procs.status();
  EXPECT_EQ((*procs)[1].set.at("MASTER_ADDR"), "head");
  EXPECT_EQ((*procs)[1].set.at("JAX_COORDINATOR_ADDRESS"), "coord:9000");

  LaunchSpec device = V5p16();
  device.rendezvous.tpu_base_port = 9100;
  procs = ComputeLaunchEnvironments(device);
  ASSERT_TRUE(procs.ok()) << procs.status();
  EXPECT_EQ((*procs)[5].set.at("TPU_PROCESS_PORT"), "9101");
  EXPECT_EQ((*procs)[5].set.at("TPU_PROCESS_ADDRESSES"),
            "A:9100,A:9101,A:9102,A:9103,B:9100,B:9101,B:9102,B:9103");
}

struct ErrorCase {
  std::string name;
  LaunchSpec spec;
  std::vector<std::string> message_parts;
};

class ValidationTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(ValidationTest, IsInvalidArgumentThatSaysWhatToDo) {
  const ErrorCase& c = GetParam();
  absl::StatusOr<std::vector<ProcessEnvironment>> procs =
      ComputeLaunchEnvironments(c.spec);
  ASSERT_FALSE(procs.ok());
  EXPECT_EQ(procs.status().code(), absl::StatusCode::kInvalidArgument);
  for (const std::string& part : c.message_parts) {
    EXPECT_THAT(procs.status().message(), HasSubstr(part));
  }
}

LaunchSpec WithPorts(int master, int coordinator, int tpu_base) {
  LaunchSpec spec = V5p16();
  spec.rendezvous.master_port = master;
  spec.rendezvous.coordinator_port = coordinator;
  spec.rendezvous.tpu_base_port = tpu_base;
  return spec;
}

LaunchSpec WithRestart(int restart) {
  LaunchSpec spec = V5p16();
  spec.restart_count = restart;
  return spec;
}

LaunchSpec PartialTpuHost() {
  LaunchSpec spec = V5p16();
  spec.hosts[1].device_ids = {0, 1};
  return spec;
}

INSTANTIATE_TEST_SUITE_P(
    Errors, ValidationTest,
    ::testing::Values(
        ErrorCase{"EmptyGang", Spec({}), {"no hosts", "at least one host"}},
        ErrorCase{
            "EmptyAddress", Spec({Cpu("", 1)}), {"host 0 has no address"}},
        ErrorCase{"MixedKinds",
                  Spec({Gpu("a", 2), Cpu("b", 2)}),
                  {"host 1 (b) has CPU devices", "host 0 (a) has GPU",
                   "launch each kind separately"}},
        ErrorCase{"HostWithoutDevices",
                  Spec({Gpu("a", 2), Gpu("b", 0)}),
                  {"host 1 (b) has no GPU devices", "drop it from the gang"}},
        ErrorCase{"DeviceIdOutOfRange",
                  Spec({Gpu("a", 8, {0, 8})}),
                  {"device id 8 of host 0 (a) is out of range", "ids 0..7"}},
        ErrorCase{"NegativeDeviceId",
                  Spec({Gpu("a", 8, {-1})}),
                  {"device id -1", "out of range"}},
        ErrorCase{"DeviceIdHeldTwice",
                  Spec({Gpu("a", 8, {3, 3})}),
                  {"device id 3 of host 0 (a) is held twice"}},
        ErrorCase{"TpuHostsDifferInChips",
                  Spec({Tpu("A", 0), Tpu("B", 1, "v5p-16", 2)}),
                  {"same number of chips", "host 1 (B) has 2",
                   "host 0 (A) has 4", "--num-tpus"}},
        ErrorCase{"TpuTypeNeedsMoreHosts",
                  Spec({Tpu("A", 0)}),
                  {"v5p-16 is 2 host(s) x 4 chips",
                   "the gang has 1 host(s) x 4 chips",
                   "include every host of each slice"}},
        ErrorCase{"TpuTypeHasFewerHosts",
                  Spec({Tpu("A", 0, "v5p-8"), Tpu("B", 1, "v5p-8")}),
                  {"v5p-8 is 1 host(s) x 4 chips", "2 host(s) x 4 chips"}},
        ErrorCase{"TpuTypeChipsPerHostMismatch",
                  Spec({Tpu("A", 0, "v5p-16", 8), Tpu("B", 1, "v5p-16", 8)}),
                  {"v5p-16 is 2 host(s) x 4 chips", "2 host(s) x 8 chips"}},
        ErrorCase{"TpuHostsOfDifferentSlices",
                  Spec({Tpu("A", 0), Tpu("B", 1, "v4-16")}),
                  {"host 1 (B) is in a TPU slice of type \"v4-16\"",
                   "launch on each type separately"}},
        ErrorCase{"TpuUnknownType",
                  Spec({Tpu("A", 0, "v5e-8")}),
                  {"host 0 (A)", "v5e is written v5litepod-N"}},
        ErrorCase{"TpuHostsOutOfWorkerOrder",
                  Spec({Tpu("A", 1), Tpu("B", 0)}),
                  {"TPU host 0 (A) has worker id 1", "OrderHostsStably"}},
        ErrorCase{"TpuWorkerIdTwice",
                  Spec({Tpu("A", 0), Tpu("B", 0)}),
                  {"TPU host 1 (B) has worker id 0"}},
        ErrorCase{
            "TpuPartialHost",
            PartialTpuHost(),
            {"host 1 (B) holds 2 of its 4 TPU chips", "hold the whole host"}},
        ErrorCase{"BadMasterPort",
                  WithPorts(0, 8482, 8476),
                  {"MASTER_PORT 0 is not a TCP port"}},
        ErrorCase{"BadCoordinatorPort",
                  WithPorts(29500, 70000, 8476),
                  {"coordinator port 70000 is not a TCP port"}},
        ErrorCase{"TpuBasePortTooHigh",
                  WithPorts(29500, 8482, 65534),
                  {"TPU base port 65534 leaves no room for 4", "use 1..65532"}},
        ErrorCase{"NegativeRestartCount",
                  WithRestart(-1),
                  {"restart count -1 is negative"}}),
    [](const ::testing::TestParamInfo<ErrorCase>& info) {
      return info.param.name;
    });

struct OrderCase {
  std::string name;
  std::vector<GangHost> hosts;
  std::vector<size_t> order;
};

class HostOrderTest : public ::testing::TestWithParam<OrderCase> {};

TEST_P(HostOrderTest, IsStable) {
  const OrderCase& c = GetParam();
  EXPECT_EQ(StableHostOrder(c.hosts), c.order);
  std::vector<GangHost> sorted = OrderHostsStably(c.hosts);
  ASSERT_EQ(sorted.size(), c.order.size());
  for (size_t i = 0; i < sorted.size(); ++i) {
    EXPECT_EQ(sorted[i].address, c.hosts[c.order[i]].address);
    EXPECT_EQ(sorted[i].num_devices, c.hosts[c.order[i]].num_devices);
  }
  // The order of the order is itself: a restart ranks hosts the same way.
  std::vector<size_t> identity(sorted.size());
  for (size_t i = 0; i < identity.size(); ++i) identity[i] = i;
  EXPECT_EQ(StableHostOrder(sorted), identity);
}

INSTANTIATE_TEST_SUITE_P(
    Orders, HostOrderTest,
    ::testing::Values(
        OrderCase{"Empty", {}, {}},
        OrderCase{"TpuByWorkerIdNotAddress",
                  {Tpu("10.0.0.1", 2, "v4-32"), Tpu("10.0.0.2", 0, "v4-32"),
                   Tpu("10.0.0.3", 3, "v4-32"), Tpu("10.0.0.4", 1, "v4-32")},
                  {1, 3, 0, 2}},
        OrderCase{"Ipv4Numerically",
                  {Gpu("10.0.0.10", 1), Gpu("10.0.0.9", 1),
                   Gpu("10.0.0.100", 1), Gpu("9.255.0.1", 1)},
                  {3, 1, 0, 2}},
        OrderCase{"Ipv4BeforeNamesThenStrings",
                  {Gpu("node-b", 1), Gpu("10.0.0.2", 1), Gpu("node-a", 1),
                   Gpu("10.0.0.256", 1), Gpu("fd00::1", 1)},
                  {1, 3, 4, 2, 0}},
        OrderCase{
            "SameAddressKeepsInputOrder",
            {Cpu("127.0.0.1", 2), Cpu("127.0.0.1", 3), Cpu("127.0.0.0", 1)},
            {2, 0, 1}},
        OrderCase{"TpuBeforeOtherKinds",
                  {Gpu("10.0.0.1", 1), Tpu("10.0.0.9", 0, "v5p-8")},
                  {1, 0}}),
    [](const ::testing::TestParamInfo<OrderCase>& info) {
      return info.param.name;
    });

TEST(FrameworkEnvTest, Names) {
  EXPECT_EQ(DeviceKindName(DeviceKind::kTpu), "TPU");
  EXPECT_EQ(DeviceKindName(DeviceKind::kGpu), "GPU");
  EXPECT_EQ(DeviceKindName(DeviceKind::kCpu), "CPU");
  EXPECT_EQ(LaunchModeName(LaunchMode::kPerDevice), "per-device");
  EXPECT_EQ(LaunchModeName(LaunchMode::kPerHost), "per-host");
}

TEST(FrameworkEnvTest, UnsetNeverContainsASetVariable) {
  for (LaunchMode mode : {LaunchMode::kPerDevice, LaunchMode::kPerHost}) {
    absl::StatusOr<std::vector<ProcessEnvironment>> procs =
        ComputeLaunchEnvironments(V5p16(mode));
    ASSERT_TRUE(procs.ok()) << procs.status();
    for (const ProcessEnvironment& p : *procs) {
      for (const std::string& name : p.unset) {
        EXPECT_THAT(p.set, Not(Contains(Key(name)))) << name;
      }
    }
  }
  absl::StatusOr<std::vector<ProcessEnvironment>> gpu =
      ComputeLaunchEnvironments(GpuSpec());
  ASSERT_TRUE(gpu.ok());
  EXPECT_THAT((*gpu)[0].unset, IsEmpty());
}

}  // namespace
}  // namespace shoal::launch
