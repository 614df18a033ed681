#include "accel/tpu.h"

#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "accel/fake_host.h"
#include "accel/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::accel {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

using Bounds = std::array<int, 3>;

struct TypeCase {
  std::string type;
  int chips;
  int hosts;
  int chips_per_host;
  std::string topology;
  Bounds chips_per_host_bounds;
  Bounds host_bounds;
  std::string generation_label;
};

class ParseTypeTest : public ::testing::TestWithParam<TypeCase> {};

TEST_P(ParseTypeTest, MatchesLaunchContracts) {
  const TypeCase& c = GetParam();
  absl::StatusOr<TpuAcceleratorType> type = ParseTpuAcceleratorType(c.type);
  ASSERT_TRUE(type.ok()) << type.status();
  EXPECT_EQ(type->name, c.type);
  EXPECT_EQ(type->chips, c.chips);
  EXPECT_EQ(type->hosts, c.hosts);
  EXPECT_EQ(type->chips_per_host, c.chips_per_host);
  EXPECT_EQ(type->TopologyString(), c.topology);
  EXPECT_EQ(type->chips_per_host_bounds, c.chips_per_host_bounds);
  EXPECT_EQ(type->host_bounds, c.host_bounds);
  EXPECT_EQ(type->GenerationLabel(), c.generation_label);
  EXPECT_EQ(type->HeadResourceName(), "TPU-" + c.type + "-head");
}

INSTANTIATE_TEST_SUITE_P(
    LaunchContractsTable, ParseTypeTest,
    ::testing::Values(
        // The table in LAUNCH_CONTRACTS.md.
        TypeCase{"v4-8", 4, 1, 4, "2x2x1", {2, 2, 1}, {1, 1, 1}, "TPU-V4"},
        TypeCase{"v5p-8", 4, 1, 4, "2x2x1", {2, 2, 1}, {1, 1, 1}, "TPU-V5P"},
        TypeCase{"v4-16", 8, 2, 4, "2x2x2", {2, 2, 1}, {1, 1, 2}, "TPU-V4"},
        TypeCase{"v5p-16", 8, 2, 4, "2x2x2", {2, 2, 1}, {1, 1, 2}, "TPU-V5P"},
        TypeCase{"v4-32", 16, 4, 4, "2x2x4", {2, 2, 1}, {1, 1, 4}, "TPU-V4"},
        TypeCase{"v5p-32", 16, 4, 4, "2x2x4", {2, 2, 1}, {1, 1, 4}, "TPU-V5P"},
        TypeCase{"v5litepod-4",
                 4,
                 1,
                 4,
                 "2x2",
                 {2, 2, 1},
                 {1, 1, 1},
                 "TPU-V5LITEPOD"},
        TypeCase{"v5litepod-8",
                 8,
                 1,
                 8,
                 "2x4",
                 {2, 4, 1},
                 {1, 1, 1},
                 "TPU-V5LITEPOD"},
        TypeCase{"v5litepod-16",
                 16,
                 4,
                 4,
                 "4x4",
                 {2, 2, 1},
                 {2, 2, 1},
                 "TPU-V5LITEPOD"},
        TypeCase{"v5litepod-32",
                 32,
                 8,
                 4,
                 "4x8",
                 {2, 2, 1},
                 {2, 4, 1},
                 "TPU-V5LITEPOD"},
        TypeCase{"v6e-4", 4, 1, 4, "2x2", {2, 2, 1}, {1, 1, 1}, "TPU-V6E"},
        TypeCase{"v6e-8", 8, 1, 8, "2x4", {2, 4, 1}, {1, 1, 1}, "TPU-V6E"},
        TypeCase{"v6e-16", 16, 4, 4, "4x4", {2, 2, 1}, {2, 2, 1}, "TPU-V6E"},
        // Beyond the table: older generations, larger and odd-sized slices.
        TypeCase{"v2-8", 4, 1, 4, "2x2", {2, 2, 1}, {1, 1, 1}, "TPU-V2"},
        TypeCase{"v2-32", 16, 4, 4, "4x4", {2, 2, 1}, {2, 2, 1}, "TPU-V2"},
        TypeCase{"v3-8", 4, 1, 4, "2x2", {2, 2, 1}, {1, 1, 1}, "TPU-V3"},
        TypeCase{"v3-64", 32, 8, 4, "4x8", {2, 2, 1}, {2, 4, 1}, "TPU-V3"},
        TypeCase{"v4-64", 32, 8, 4, "2x4x4", {2, 2, 1}, {1, 2, 4}, "TPU-V4"},
        TypeCase{"v4-128", 64, 16, 4, "4x4x4", {2, 2, 1}, {2, 2, 4}, "TPU-V4"},
        TypeCase{"v5p-24", 12, 3, 4, "2x2x3", {2, 2, 1}, {1, 1, 3}, "TPU-V5P"},
        TypeCase{
            "v5p-384", 192, 48, 4, "4x4x12", {2, 2, 1}, {2, 2, 12}, "TPU-V5P"},
        TypeCase{"v6e-1", 1, 1, 1, "1x1", {1, 1, 1}, {1, 1, 1}, "TPU-V6E"},
        TypeCase{
            "v6e-256", 256, 64, 4, "16x16", {2, 2, 1}, {8, 8, 1}, "TPU-V6E"}),
    [](const ::testing::TestParamInfo<TypeCase>& info) {
      std::string name = info.param.type;
      for (char& c : name) {
        if (c == '-') c = '_';
      }
      return name;
    });

TEST(ParseTpuAcceleratorTypeTest, AcceptsUpperCaseAndSpaces) {
  absl::StatusOr<TpuAcceleratorType> type = ParseTpuAcceleratorType(" V5P-16 ");
  ASSERT_TRUE(type.ok()) << type.status();
  EXPECT_EQ(type->name, "v5p-16");
}

struct BadTypeCase {
  std::string type;
  std::string topology;
  std::vector<std::string> message_parts;
};

class BadTypeTest : public ::testing::TestWithParam<BadTypeCase> {};

TEST_P(BadTypeTest, FailsWithAClearError) {
  const BadTypeCase& c = GetParam();
  absl::StatusOr<TpuAcceleratorType> type =
      ParseTpuAcceleratorType(c.type, c.topology);
  ASSERT_FALSE(type.ok()) << c.type << " parsed as " << type->TopologyString();
  EXPECT_EQ(type.status().code(), absl::StatusCode::kInvalidArgument);
  for (const std::string& part : c.message_parts) {
    EXPECT_THAT(type.status().ToString(), HasSubstr(part)) << c.type;
  }
}

INSTANTIATE_TEST_SUITE_P(
    BadTypes, BadTypeTest,
    ::testing::Values(
        BadTypeCase{"", "", {"empty", "v5p-16", "v6e-8"}},
        BadTypeCase{"v5p-15",
                    "",
                    {"\"v5p-15\"", "multiple of 8", "2 per chip", "v5p-16"}},
        BadTypeCase{"v9-8",
                    "",
                    {"unknown TPU generation \"v9\"", "v2, v3, v4, v5p",
                     "v5litepod (v5e)", "v6e"}},
        BadTypeCase{"v5e-8", "", {"v5e is written v5litepod-N"}},
        BadTypeCase{"v5p", "", {"malformed", "<generation>-<number>"}},
        BadTypeCase{"v5p-", "", {"malformed"}},
        BadTypeCase{"v5p-x8", "", {"malformed"}},
        BadTypeCase{"v5p--8", "", {"unknown TPU generation \"v5p-\""}},
        BadTypeCase{"-8", "", {"unknown TPU generation"}},
        BadTypeCase{"v4-4", "", {"multiple of 8 from 8"}},
        BadTypeCase{"v4-12", "", {"multiple of 8"}},
        BadTypeCase{"v2-24", "", {"power of two"}},
        BadTypeCase{"v6e-2", "", {"1, 4, 8, 16"}},
        BadTypeCase{"v6e-512", "", {"1, 4, 8, 16"}},
        BadTypeCase{"v5litepod-0", "", {"1, 4, 8, 16"}},
        BadTypeCase{"v5p-99999999999", "", {"malformed"}},
        BadTypeCase{"v5p-16", "2x4", {"does not fit", "3-D", "2x2x2"}},
        BadTypeCase{"v5p-16", "2x2x4", {"does not fit"}},
        BadTypeCase{"v5p-16", "1x1x8", {"cannot be cut into hosts"}},
        BadTypeCase{"v5p-16", "2x2xx2", {"malformed TPU topology"}},
        BadTypeCase{"v5p-16", "2x0x4", {"malformed TPU topology"}}));

TEST(ParseTpuAcceleratorTypeTest, ExplicitTopologyReplacesTheDefault) {
  absl::StatusOr<TpuAcceleratorType> v5p =
      ParseTpuAcceleratorType("v5p-16", "2x4x1");
  ASSERT_TRUE(v5p.ok()) << v5p.status();
  EXPECT_EQ(v5p->TopologyString(), "2x4x1");
  EXPECT_EQ(v5p->HostBoundsString(), "1,2,1");
  EXPECT_EQ(v5p->ChipsPerHostBoundsString(), "2,2,1");

  absl::StatusOr<TpuAcceleratorType> v5e =
      ParseTpuAcceleratorType("v5litepod-8", "4x2");
  ASSERT_TRUE(v5e.ok()) << v5e.status();
  EXPECT_EQ(v5e->ChipsPerHostBoundsString(), "4,2,1");
  EXPECT_EQ(v5e->HostBoundsString(), "1,1,1");
}

std::map<std::string, std::string> SliceEnv(const std::string& type,
                                            const std::string& worker) {
  std::map<std::string, std::string> env = {{"TPU_ACCELERATOR_TYPE", type},
                                            {"TPU_NAME", "my-tpu"}};
  if (!worker.empty()) env["TPU_WORKER_ID"] = worker;
  return env;
}

TEST(ParseTpuSliceFactsTest, ReadsEveryVariable) {
  std::map<std::string, std::string> env = SliceEnv("v5p-16", "1");
  env["TPU_WORKER_HOSTNAMES"] = "10.0.0.2, 10.0.0.3";
  env["TPU_TOPOLOGY"] = "2x2x2";
  absl::StatusOr<std::optional<TpuSliceFacts>> facts = ParseTpuSliceFacts(env);
  ASSERT_TRUE(facts.ok()) << facts.status();
  ASSERT_TRUE(facts->has_value());
  const TpuSliceFacts& slice = **facts;
  EXPECT_EQ(slice.type.name, "v5p-16");
  EXPECT_EQ(slice.slice_name, "my-tpu");
  EXPECT_EQ(slice.worker_id, 1);
  EXPECT_THAT(slice.worker_hostnames, ElementsAre("10.0.0.2", "10.0.0.3"));
}

TEST(ParseTpuSliceFactsTest, NoTypeMeansNoSlice) {
  absl::StatusOr<std::optional<TpuSliceFacts>> facts =
      ParseTpuSliceFacts({{"TPU_NAME", "my-tpu"}});
  ASSERT_TRUE(facts.ok());
  EXPECT_FALSE(facts->has_value());
}

TEST(ParseTpuSliceFactsTest, WorkerIdDefaultsOnlyOnOneHostSlices) {
  auto single = ParseTpuSliceFacts(SliceEnv("v5litepod-8", ""));
  ASSERT_TRUE(single.ok());
  EXPECT_EQ((*single)->worker_id, 0);
  auto multi = ParseTpuSliceFacts(SliceEnv("v5p-16", ""));
  ASSERT_TRUE(multi.ok());
  EXPECT_FALSE((*multi)->worker_id.has_value());
}

// The environment of a TPU pod on GKE: what GKE sets on every TPU container
// (type, topology, bounds, TPU_SKIP_MDS_QUERY...) with what the StatefulSets
// of deploy/kubernetes (or KubeRay's webhook, or a JobSet) add: the worker
// id, the slice's pods by their DNS names through its headless Service, and
// the slice's name.
struct GkePodCase {
  std::string name;
  std::map<std::string, std::string> env;
  std::string type;
  int hosts;
  int chips_per_host;
  std::string topology;
  int worker_id;
  std::string slice_name;
  std::vector<std::string> hostnames;
};

class GkePodTest : public ::testing::TestWithParam<GkePodCase> {};

// "<slice>-0.<slice>.default.svc.cluster.local,..." for `hosts` pods.
std::vector<std::string> SlicePodNames(const std::string& slice, int hosts) {
  std::vector<std::string> names;
  for (int i = 0; i < hosts; ++i) {
    names.push_back(
        absl::StrCat(slice, "-", i, ".", slice, ".default.svc.cluster.local"));
  }
  return names;
}

std::map<std::string, std::string> GkePodEnv(const std::string& type,
                                             const std::string& topology,
                                             const std::string& host_bounds,
                                             int worker,
                                             const std::string& slice,
                                             int hosts) {
  return {
      {"TPU_ACCELERATOR_TYPE", type},
      {"TPU_TOPOLOGY", topology},
      {"TPU_TOPOLOGY_WRAP", "false,false,false"},
      {"TPU_TOPOLOGY_ALT", "false"},
      {"TPU_CHIPS_PER_HOST_BOUNDS", "2,2,1"},
      {"TPU_HOST_BOUNDS", host_bounds},
      {"TPU_SKIP_MDS_QUERY", "true"},
      {"TPU_RUNTIME_METRICS_PORTS", "8431,8432,8433,8434"},
      {"TPU_WORKER_ID", absl::StrCat(worker)},
      {"TPU_WORKER_HOSTNAMES", absl::StrJoin(SlicePodNames(slice, hosts), ",")},
      {"TPU_NAME", slice}};
}

TEST_P(GkePodTest, ReadsWhatGkeGivesATpuPod) {
  const GkePodCase& c = GetParam();
  absl::StatusOr<std::optional<TpuSliceFacts>> facts =
      ParseTpuSliceFacts(c.env);
  ASSERT_TRUE(facts.ok()) << facts.status();
  ASSERT_TRUE(facts->has_value());
  const TpuSliceFacts& slice = **facts;
  EXPECT_EQ(slice.type.name, c.type);
  EXPECT_EQ(slice.type.hosts, c.hosts);
  EXPECT_EQ(slice.type.chips_per_host, c.chips_per_host);
  EXPECT_EQ(slice.type.TopologyString(), c.topology);
  EXPECT_EQ(slice.type.ChipsPerHostBoundsString(),
            c.env.at("TPU_CHIPS_PER_HOST_BOUNDS"));
  EXPECT_EQ(slice.type.HostBoundsString(), c.env.at("TPU_HOST_BOUNDS"));
  EXPECT_EQ(slice.worker_id, c.worker_id);
  EXPECT_EQ(slice.slice_name, c.slice_name);
  EXPECT_EQ(slice.worker_hostnames, c.hostnames);

  // And a node agent on such a pod, with its chips, labels itself so.
  testing::ScopedTempDir root;
  for (int i = 0; i < c.chips_per_host; ++i) {
    root.Write(absl::StrCat("dev/accel", i), "");
  }
  auto manager = TpuAcceleratorManager::Create(root.path(), c.env,
                                               /*num_tpus=*/std::nullopt);
  ASSERT_TRUE(manager.ok()) << manager.status();
  EXPECT_EQ((*manager)->NumDevices(), c.chips_per_host);
  std::map<std::string, std::string> labels = (*manager)->Labels();
  EXPECT_EQ(labels["shoal.io/tpu-slice-name"], c.slice_name);
  EXPECT_EQ(labels["shoal.io/tpu-worker-id"], absl::StrCat(c.worker_id));
  EXPECT_EQ(labels["shoal.io/tpu-pod-type"], c.type);
  EXPECT_EQ(labels["shoal.io/tpu-num-workers"], absl::StrCat(c.hosts));
  EXPECT_EQ(labels["shoal.io/tpu-topology"], c.topology);
}

INSTANTIATE_TEST_SUITE_P(
    GkePods, GkePodTest,
    ::testing::Values(
        // A v5p-16 (tpu-v5p-slice, 2x2x2): 2 hosts of 4 chips.
        GkePodCase{"V5p16Worker1",
                   GkePodEnv("v5p-16", "2x2x2", "1,1,2", 1, "slice-a", 2),
                   "v5p-16", 2, 4, "2x2x2", 1, "slice-a",
                   SlicePodNames("slice-a", 2)},
        // A v6e-16 (tpu-v6e-slice, 4x4): 4 hosts of 4 chips.
        GkePodCase{"V6e16Worker3",
                   GkePodEnv("v6e-16", "4x4", "2,2,1", 3, "slice-b", 4),
                   "v6e-16", 4, 4, "4x4", 3, "slice-b",
                   SlicePodNames("slice-b", 4)},
        // A v5e-16 (tpu-v5-lite-podslice, 4x4), written v5litepod-16.
        GkePodCase{"V5litepod16Worker0",
                   GkePodEnv("v5litepod-16", "4x4", "2,2,1", 0, "slice-c", 4),
                   "v5litepod-16", 4, 4, "4x4", 0, "slice-c",
                   SlicePodNames("slice-c", 4)}),
    [](const ::testing::TestParamInfo<GkePodCase>& info) {
      return info.param.name;
    });

struct BadFactsCase {
  std::string name;
  std::map<std::string, std::string> env;
  std::string message_part;
};

class BadFactsTest : public ::testing::TestWithParam<BadFactsCase> {};

TEST_P(BadFactsTest, NamesTheVariable) {
  absl::StatusOr<std::optional<TpuSliceFacts>> facts =
      ParseTpuSliceFacts(GetParam().env);
  ASSERT_FALSE(facts.ok());
  EXPECT_EQ(facts.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(facts.status().ToString(), HasSubstr(GetParam().message_part));
}

INSTANTIATE_TEST_SUITE_P(
    BadFacts, BadFactsTest,
    ::testing::Values(
        BadFactsCase{"BadType",
                     {{"TPU_ACCELERATOR_TYPE", "v5p-15"}},
                     "TPU_ACCELERATOR_TYPE=v5p-15"},
        BadFactsCase{
            "WorkerOutOfRange",
            {{"TPU_ACCELERATOR_TYPE", "v5p-16"}, {"TPU_WORKER_ID", "2"}},
            "TPU_WORKER_ID=2 is not a worker of v5p-16, which has "
            "workers 0..1"},
        BadFactsCase{
            "WorkerNotANumber",
            {{"TPU_ACCELERATOR_TYPE", "v5p-16"}, {"TPU_WORKER_ID", "-1"}},
            "TPU_WORKER_ID=-1"},
        BadFactsCase{"HostnamesMismatch",
                     {{"TPU_ACCELERATOR_TYPE", "v5p-16"},
                      {"TPU_WORKER_HOSTNAMES", "a,b,c"}},
                     "lists 3 host(s) but v5p-16 has 2"},
        BadFactsCase{
            "TopologyMismatch",
            {{"TPU_ACCELERATOR_TYPE", "v5p-16"}, {"TPU_TOPOLOGY", "2x2x4"}},
            "TPU_TOPOLOGY=2x2x4"},
        BadFactsCase{"ReservedSliceName",
                     {{"TPU_ACCELERATOR_TYPE", "v5p-16"}, {"TPU_NAME", "TPU"}},
                     "collides with a built-in resource"}),
    [](const ::testing::TestParamInfo<BadFactsCase>& info) {
      return info.param.name;
    });

TEST(ScanTpuChipsTest, CountsAccelFiles) {
  testing::ScopedTempDir root;
  for (int i = 0; i < 4; ++i) root.Write("dev/accel" + std::to_string(i), "");
  root.Write("dev/accelerometer", "");  // not a chip: no number
  TpuChipScan scan = ScanTpuChips(root.path());
  EXPECT_EQ(scan.num_chips, 4);
  EXPECT_EQ(scan.source, "/dev/accel*");
}

TEST(ScanTpuChipsTest, NvidiaAccelDirectoryIsNotATpu) {
  testing::ScopedTempDir root;
  // NVIDIA drivers create /dev/accel/ (a directory of accel nodes).
  root.Write("dev/accel/accel0", "");
  root.MakeDir("dev/accel1");
  TpuChipScan scan = ScanTpuChips(root.path());
  EXPECT_EQ(scan.num_chips, 0);
  EXPECT_EQ(scan.source, "");
}

TEST(ScanTpuChipsTest, MissingRootHasNoChips) {
  EXPECT_EQ(ScanTpuChips("/nonexistent/shoal/root").num_chips, 0);
}

struct VfioCase {
  std::string name;
  std::vector<std::string> vendors;  // one IOMMU group per entry
  int want_chips;
};

class ScanVfioTest : public ::testing::TestWithParam<VfioCase> {};

TEST_P(ScanVfioTest, CountsGoogleGroupsOnly) {
  testing::ScopedTempDir root;
  root.Write("dev/vfio/vfio", "");  // the container node, never a chip
  const auto& vendors = GetParam().vendors;
  for (size_t i = 0; i < vendors.size(); ++i) {
    std::string group = std::to_string(i);
    root.Write("dev/vfio/" + group, "");
    root.Write("sys/kernel/iommu_groups/" + group + "/devices/0000:00:0" +
                   group + ".0/vendor",
               vendors[i] + "\n");
  }
  EXPECT_EQ(ScanTpuChips(root.path()).num_chips, GetParam().want_chips);
}

INSTANTIATE_TEST_SUITE_P(
    Vfio, ScanVfioTest,
    ::testing::Values(
        VfioCase{"FourGoogle", {"0x1ae0", "0x1ae0", "0x1ae0", "0x1ae0"}, 4},
        VfioCase{"UpperCaseVendor", {"0x1AE0"}, 1},
        VfioCase{"NvidiaOnly", {"0x10de", "0x10de"}, 0},
        VfioCase{"Mixed", {"0x1ae0", "0x8086", "0x1ae0"}, 2},
        VfioCase{"None", {}, 0}),
    [](const ::testing::TestParamInfo<VfioCase>& info) {
      return info.param.name;
    });

TEST(ScanTpuChipsTest, VfioGroupWithoutSysfsIsNotAChip) {
  testing::ScopedTempDir root;
  root.Write("dev/vfio/0", "");
  EXPECT_EQ(ScanTpuChips(root.path()).num_chips, 0);
}

TEST(ScanTpuChipsTest, FakeVfioHostMirrorsSysfsLinks) {
  testing::ScopedTempDir root;
  FakeTpuHostOptions options;
  options.accelerator_type = "v4-8";
  options.use_vfio = true;
  std::map<std::string, std::string> env;
  ASSERT_TRUE(MakeFakeTpuHost(root.path(), options, &env).ok());
  TpuChipScan scan = ScanTpuChips(root.path());
  EXPECT_EQ(scan.num_chips, 4);
  EXPECT_EQ(scan.source, "/dev/vfio");
}

struct RequestCase {
  double quantity;
  int chips_on_host;
  std::string error;  // empty: OK
};

class ValidateRequestTest : public ::testing::TestWithParam<RequestCase> {};

TEST_P(ValidateRequestTest, AllowsOneTwoFourOrEightChipsOfOneHost) {
  const RequestCase& c = GetParam();
  absl::Status status = ValidateTpuChipRequest(c.quantity, c.chips_on_host);
  if (c.error.empty()) {
    EXPECT_TRUE(status.ok()) << status;
  } else {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(status.message()), c.error);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Requests, ValidateRequestTest,
    ::testing::Values(
        RequestCase{0, 4, ""}, RequestCase{1, 4, ""}, RequestCase{2, 4, ""},
        RequestCase{4, 4, ""}, RequestCase{8, 8, ""}, RequestCase{4, 8, ""},
        RequestCase{3, 4,
                    "a task may hold 1, 2, 4 or 8 TPU chips of one host (asked "
                    "for 3); use a gang (placement group) for more than one "
                    "host"},
        RequestCase{0.5, 4,
                    "a task may hold 1, 2, 4 or 8 TPU chips of one host (asked "
                    "for 0.5); use a gang (placement group) for more than one "
                    "host"},
        RequestCase{16, 8,
                    "a task may hold 1, 2, 4 or 8 TPU chips of one host (asked "
                    "for 16); use a gang (placement group) for more than one "
                    "host"},
        RequestCase{8, 4,
                    "a task may hold at most 4 TPU chips on this host (asked "
                    "for 8); use a gang (placement group) for more than one "
                    "host"},
        RequestCase{1, 0,
                    "this node has no TPU chips (asked for 1); run the task on "
                    "a TPU host"}));

struct IsolationCase {
  std::string name;
  std::vector<int> chips;
  int chips_on_host;
  std::map<std::string, std::string> want_set;
  std::vector<std::string> want_unset;
};

class IsolationTest : public ::testing::TestWithParam<IsolationCase> {};

TEST_P(IsolationTest, SetsVisibleChipsAndBounds) {
  const IsolationCase& c = GetParam();
  absl::StatusOr<DeviceEnvironment> env =
      TpuVisibleChipsEnvironment(c.chips, c.chips_on_host);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->set, c.want_set);
  EXPECT_EQ(env->unset, c.want_unset);
}

INSTANTIATE_TEST_SUITE_P(
    Isolation, IsolationTest,
    ::testing::Values(
        IsolationCase{"OneChip",
                      {2},
                      4,
                      {{"TPU_VISIBLE_CHIPS", "2"},
                       {"TPU_CHIPS_PER_HOST_BOUNDS", "1,1,1"},
                       {"TPU_HOST_BOUNDS", "1,1,1"}},
                      {}},
        IsolationCase{"TwoChips",
                      {3, 2},
                      4,
                      {{"TPU_VISIBLE_CHIPS", "2,3"},
                       {"TPU_CHIPS_PER_HOST_BOUNDS", "1,2,1"},
                       {"TPU_HOST_BOUNDS", "1,1,1"}},
                      {}},
        IsolationCase{"WholeHostOfFour",
                      {0, 1, 2, 3},
                      4,
                      {{"TPU_VISIBLE_CHIPS", "0,1,2,3"}},
                      {"TPU_CHIPS_PER_HOST_BOUNDS", "TPU_HOST_BOUNDS"}},
        IsolationCase{"FourOfEight",
                      {4, 5, 6, 7},
                      8,
                      {{"TPU_VISIBLE_CHIPS", "4,5,6,7"},
                       {"TPU_CHIPS_PER_HOST_BOUNDS", "2,2,1"},
                       {"TPU_HOST_BOUNDS", "1,1,1"}},
                      {}},
        IsolationCase{"WholeHostOfEight",
                      {0, 1, 2, 3, 4, 5, 6, 7},
                      8,
                      {{"TPU_VISIBLE_CHIPS", "0,1,2,3,4,5,6,7"}},
                      {"TPU_CHIPS_PER_HOST_BOUNDS", "TPU_HOST_BOUNDS"}},
        IsolationCase{"NothingHeld", {}, 4, {}, {}}),
    [](const ::testing::TestParamInfo<IsolationCase>& info) {
      return info.param.name;
    });

TEST(IsolationTest, MapsIdsThroughChipNames) {
  absl::StatusOr<DeviceEnvironment> env =
      TpuVisibleChipsEnvironment({1}, 4, {"4", "5", "6", "7"});
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->set.at("TPU_VISIBLE_CHIPS"), "5");
}

TEST(IsolationTest, RejectsBadChipSets) {
  EXPECT_THAT(TpuVisibleChipsEnvironment({0, 0}, 4).status().ToString(),
              HasSubstr("given twice"));
  EXPECT_THAT(TpuVisibleChipsEnvironment({4}, 4).status().ToString(),
              HasSubstr("not on this host (chips 0..3)"));
  EXPECT_THAT(TpuVisibleChipsEnvironment({0, 1, 2}, 4).status().ToString(),
              HasSubstr("asked for 3"));
}

class SliceManagerTest : public ::testing::Test {
 protected:
  std::unique_ptr<TpuAcceleratorManager> MakeWorker(int worker) {
    std::map<std::string, std::string> env;
    absl::Status made = MakeFakeTpuHost(root_.path(), "v5p-16", worker, &env);
    EXPECT_TRUE(made.ok()) << made;
    auto manager = TpuAcceleratorManager::Create(root_.path(), env,
                                                 /*num_tpus=*/std::nullopt);
    EXPECT_TRUE(manager.ok()) << manager.status();
    return manager.ok() ? *std::move(manager) : nullptr;
  }

  testing::ScopedTempDir root_;
};

TEST_F(SliceManagerTest, WorkerZeroAdvertisesTheSliceHead) {
  auto manager = MakeWorker(0);
  ASSERT_NE(manager, nullptr);
  EXPECT_EQ(manager->ResourceName(), "TPU");
  EXPECT_EQ(manager->NumDevices(), 4);
  EXPECT_EQ(manager->AcceleratorType(), "TPU-V5P");
  EXPECT_THAT(
      manager->ExtraResources(),
      UnorderedElementsAre(Pair("my-tpu", 1.0), Pair("TPU-v5p-16-head", 1.0),
                           Pair("accelerator_type:TPU-V5P", 1.0)));
  EXPECT_THAT(manager->Labels(),
              UnorderedElementsAre(Pair("shoal.io/accelerator-type", "TPU-V5P"),
                                   Pair("shoal.io/tpu-pod-type", "v5p-16"),
                                   Pair("shoal.io/tpu-slice-name", "my-tpu"),
                                   Pair("shoal.io/tpu-worker-id", "0"),
                                   Pair("shoal.io/tpu-num-workers", "2"),
                                   Pair("shoal.io/tpu-topology", "2x2x2")));
  EXPECT_EQ(manager->Summary(),
            "TPU 4 chip(s) (/dev/accel*), v5p-16 slice my-tpu, worker 0 of 2, "
            "topology 2x2x2");
}

TEST_F(SliceManagerTest, OtherWorkersAdvertiseNoHead) {
  auto manager = MakeWorker(1);
  ASSERT_NE(manager, nullptr);
  EXPECT_EQ(manager->NumDevices(), 4);
  EXPECT_THAT(manager->ExtraResources(),
              UnorderedElementsAre(Pair("my-tpu", 1.0),
                                   Pair("accelerator_type:TPU-V5P", 1.0)));
  EXPECT_EQ(manager->Labels().at("shoal.io/tpu-worker-id"), "1");
}

TEST_F(SliceManagerTest, ValidatesAndIsolatesAgainstItsHost) {
  auto manager = MakeWorker(1);
  ASSERT_NE(manager, nullptr);
  EXPECT_TRUE(manager->ValidateRequest(4).ok());
  EXPECT_THAT(manager->ValidateRequest(3).ToString(), HasSubstr("asked for 3"));
  EXPECT_THAT(manager->ValidateRequest(8).ToString(), HasSubstr("at most 4"));
  auto env = manager->VisibleDevicesEnvironment({1});
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->set.at("TPU_VISIBLE_CHIPS"), "1");
  EXPECT_FALSE(manager->VisibleDevicesEnvironment({4}).ok());
}

TEST(TpuManagerTest, NoChipsIgnoresBadSliceVariables) {
  testing::ScopedTempDir root;
  auto manager = TpuAcceleratorManager::Create(
      root.path(), {{"TPU_ACCELERATOR_TYPE", "v9-8"}}, std::nullopt);
  ASSERT_TRUE(manager.ok()) << manager.status();
  EXPECT_EQ((*manager)->NumDevices(), 0);
  EXPECT_THAT((*manager)->ExtraResources(), IsEmpty());
  EXPECT_THAT((*manager)->Labels(), IsEmpty());
}

TEST(TpuManagerTest, ChipsWithBadSliceVariablesFail) {
  testing::ScopedTempDir root;
  root.Write("dev/accel0", "");
  auto manager = TpuAcceleratorManager::Create(
      root.path(), {{"TPU_ACCELERATOR_TYPE", "v9-8"}}, std::nullopt);
  EXPECT_EQ(manager.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(manager.status().ToString(), HasSubstr("TPU_ACCELERATOR_TYPE"));
}

TEST(TpuManagerTest, ChipsWithoutSliceFactsStillCount) {
  testing::ScopedTempDir root;
  root.Write("dev/accel0", "");
  root.Write("dev/accel1", "");
  auto manager = TpuAcceleratorManager::Create(root.path(), {}, std::nullopt);
  ASSERT_TRUE(manager.ok());
  EXPECT_EQ((*manager)->NumDevices(), 2);
  EXPECT_EQ((*manager)->AcceleratorType(), "");
  EXPECT_THAT((*manager)->ExtraResources(), IsEmpty());
  // Two chips are the whole host: no bounds.
  auto env = (*manager)->VisibleDevicesEnvironment({0, 1});
  ASSERT_TRUE(env.ok());
  EXPECT_THAT(env->set, UnorderedElementsAre(Pair("TPU_VISIBLE_CHIPS", "0,1")));
}

struct CountCase {
  std::string name;
  int chips_in_tree;
  std::optional<double> num_tpus;
  std::optional<std::string> visible_chips;  // TPU_VISIBLE_CHIPS
  int want_count;                            // -1: error
  std::string want_isolated_chip0;           // TPU_VISIBLE_CHIPS for id 0
};

class TpuCountTest : public ::testing::TestWithParam<CountCase> {};

TEST_P(TpuCountTest, OverridesAndVisibleChips) {
  const CountCase& c = GetParam();
  testing::ScopedTempDir root;
  for (int i = 0; i < c.chips_in_tree; ++i) {
    root.Write("dev/accel" + std::to_string(i), "");
  }
  std::map<std::string, std::string> env;
  if (c.visible_chips) env["TPU_VISIBLE_CHIPS"] = *c.visible_chips;
  auto manager = TpuAcceleratorManager::Create(root.path(), env, c.num_tpus);
  if (c.want_count < 0) {
    EXPECT_EQ(manager.status().code(), absl::StatusCode::kInvalidArgument);
    return;
  }
  ASSERT_TRUE(manager.ok()) << manager.status();
  EXPECT_EQ((*manager)->NumDevices(), c.want_count);
  if (c.want_count > 0) {
    auto isolated = (*manager)->VisibleDevicesEnvironment({0});
    ASSERT_TRUE(isolated.ok()) << isolated.status();
    EXPECT_EQ(isolated->set.at("TPU_VISIBLE_CHIPS"), c.want_isolated_chip0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Counts, TpuCountTest,
    ::testing::Values(
        CountCase{"Detected", 4, std::nullopt, std::nullopt, 4, "0"},
        CountCase{"OverrideDown", 4, 2.0, std::nullopt, 2, "0"},
        CountCase{"OverrideZero", 4, 0.0, std::nullopt, 0, ""},
        CountCase{"OverrideWithoutChips", 0, 4.0, std::nullopt, 4, "0"},
        CountCase{"OverrideFraction", 4, 1.5, std::nullopt, -1, ""},
        CountCase{"OverrideNegative", 4, -1.0, std::nullopt, -1, ""},
        CountCase{"VisibleChipsLimit", 4, std::nullopt, "2,3", 2, "2"},
        CountCase{"VisibleChipsEmpty", 4, std::nullopt, "", 0, ""},
        CountCase{"OverrideAboveVisible", 4, 4.0, "2,3", -1, ""}),
    [](const ::testing::TestParamInfo<CountCase>& info) {
      return info.param.name;
    });

}  // namespace
}  // namespace shoal::accel
