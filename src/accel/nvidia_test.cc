#include "accel/nvidia.h"

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "accel/fake_host.h"
#include "accel/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::accel {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

struct ModelCase {
  std::string model;
  std::string short_name;
};

class ModelShortNameTest : public ::testing::TestWithParam<ModelCase> {};

TEST_P(ModelShortNameTest, KeepsTheModelNumber) {
  EXPECT_EQ(GpuModelShortName(GetParam().model), GetParam().short_name);
}

INSTANTIATE_TEST_SUITE_P(
    Models, ModelShortNameTest,
    ::testing::Values(ModelCase{"NVIDIA H200", "H200"},
                      ModelCase{"NVIDIA H100 80GB HBM3", "H100"},
                      ModelCase{"NVIDIA A100-SXM4-80GB", "A100"},
                      ModelCase{"Tesla V100-SXM2-16GB", "V100"},
                      ModelCase{"Tesla T4", "T4"}, ModelCase{"NVIDIA L4", "L4"},
                      ModelCase{"NVIDIA A10G", "A10G"},
                      ModelCase{"NVIDIA GH200 480GB", "GH200"},
                      ModelCase{"NVIDIA GeForce RTX 4090", "RTX4090"},
                      ModelCase{"NVIDIA RTX A6000", "RTXA6000"},
                      ModelCase{"Quadro RTX 8000", "RTX8000"},
                      ModelCase{"NVIDIA", ""}, ModelCase{"", ""}));

TEST(ParseProcfsGpuModelTest, ReadsTheModelLine) {
  EXPECT_EQ(ParseProcfsGpuModel("Model: \t\t NVIDIA H200\nIRQ:   \t\t 42\n"),
            "NVIDIA H200");
  EXPECT_EQ(ParseProcfsGpuModel("IRQ: 42\n"), "");
}

TEST(ScanGpusFromProcfsTest, ReadsEveryGpuInBusOrder) {
  testing::ScopedTempDir root;
  ASSERT_TRUE(MakeFakeNvidiaHost(root.path(), 3, "NVIDIA H200").ok());
  GpuScan scan = ScanGpusFromProcfs(root.path());
  ASSERT_EQ(scan.devices.size(), 3u);
  EXPECT_EQ(scan.source, "/proc/driver/nvidia");
  for (const GpuDevice& gpu : scan.devices) {
    EXPECT_EQ(gpu.model, "NVIDIA H200");
    EXPECT_FALSE(gpu.memory_bytes.has_value());
  }
}

TEST(ScanGpusFromProcfsTest, EmptyRootHasNoGpus) {
  testing::ScopedTempDir root;
  GpuScan scan = ScanNvidiaGpus(root.path());
  EXPECT_THAT(scan.devices, IsEmpty());
  EXPECT_EQ(scan.source, "");
}

TEST(ScanGpusFromProcfsTest, FakeTreeWinsOverTheRealMachine) {
  // Under a device root other than "/", NVML (the real GPUs) is not asked.
  testing::ScopedTempDir root;
  ASSERT_TRUE(MakeFakeNvidiaHost(root.path(), 1, "NVIDIA L4").ok());
  GpuScan scan = ScanNvidiaGpus(root.path());
  ASSERT_EQ(scan.devices.size(), 1u);
  EXPECT_EQ(scan.devices[0].model, "NVIDIA L4");
}

TEST(ScanGpusWithNvmlTest, ReturnsQuicklyWithOrWithoutADriver) {
  auto start = std::chrono::steady_clock::now();
  std::optional<GpuScan> scan = ScanGpusWithNvml();
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_LT(elapsed, std::chrono::seconds(10));
  if (scan.has_value()) {
    EXPECT_EQ(scan->source, "nvml");
    for (const GpuDevice& gpu : scan->devices) EXPECT_FALSE(gpu.model.empty());
  }
}

struct IsolationCase {
  std::string name;
  std::vector<int> ids;
  int num_gpus;
  std::vector<std::string> names;
  std::string want;  // CUDA_VISIBLE_DEVICES; "!" for an error
};

class CudaIsolationTest : public ::testing::TestWithParam<IsolationCase> {};

TEST_P(CudaIsolationTest, SetsCudaVisibleDevices) {
  const IsolationCase& c = GetParam();
  absl::StatusOr<DeviceEnvironment> env =
      CudaVisibleDevicesEnvironment(c.ids, c.num_gpus, c.names);
  if (c.want == "!") {
    EXPECT_EQ(env.status().code(), absl::StatusCode::kInvalidArgument);
    return;
  }
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_THAT(env->set,
              UnorderedElementsAre(Pair("CUDA_VISIBLE_DEVICES", c.want)));
  EXPECT_THAT(env->unset, IsEmpty());
}

INSTANTIATE_TEST_SUITE_P(
    Isolation, CudaIsolationTest,
    ::testing::Values(
        IsolationCase{"One", {3}, 8, {}, "3"},
        IsolationCase{"SortedPair", {5, 1}, 8, {}, "1,5"},
        IsolationCase{"None", {}, 8, {}, ""},
        IsolationCase{
            "MappedThroughNames", {0, 1}, 2, {"2", "GPU-abc"}, "2,GPU-abc"},
        IsolationCase{"OutOfRange", {8}, 8, {}, "!"},
        IsolationCase{"Negative", {-1}, 8, {}, "!"},
        IsolationCase{"Duplicate", {1, 1}, 8, {}, "!"}),
    [](const ::testing::TestParamInfo<IsolationCase>& info) {
      return info.param.name;
    });

struct RequestCase {
  double quantity;
  int num_gpus;
  std::string error_part;  // empty: OK
};

class GpuRequestTest : public ::testing::TestWithParam<RequestCase> {};

TEST_P(GpuRequestTest, AllowsFractionsOrWholeGpus) {
  const RequestCase& c = GetParam();
  absl::Status status = ValidateGpuRequest(c.quantity, c.num_gpus);
  if (c.error_part.empty()) {
    EXPECT_TRUE(status.ok()) << status;
  } else {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.ToString(), HasSubstr(c.error_part));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Requests, GpuRequestTest,
    ::testing::Values(RequestCase{0, 0, ""}, RequestCase{0.5, 1, ""},
                      RequestCase{1, 1, ""}, RequestCase{8, 8, ""},
                      RequestCase{1.5, 8, "a fraction of one GPU"},
                      RequestCase{-1, 8, "a fraction of one GPU"},
                      RequestCase{9, 8, "at most 8 GPU(s) on this node"},
                      RequestCase{1, 0, "this node has no GPU"}));

TEST(NvidiaGpuManagerTest, AdvertisesModelAndMemory) {
  GpuScan scan;
  scan.source = "nvml";
  scan.devices = {{"NVIDIA H200", int64_t{150'754'909'312}},
                  {"NVIDIA H200", int64_t{150'754'909'312}}};
  NvidiaGpuManager manager(2, scan, {});
  EXPECT_EQ(manager.ResourceName(), "GPU");
  EXPECT_EQ(manager.NumDevices(), 2);
  EXPECT_EQ(manager.AcceleratorType(), "H200");
  EXPECT_THAT(manager.ExtraResources(),
              UnorderedElementsAre(Pair("accelerator_type:H200", 1.0)));
  EXPECT_THAT(manager.Labels(),
              UnorderedElementsAre(Pair("shoal.io/accelerator-type", "H200"),
                                   Pair("shoal.io/gpu-model", "NVIDIA H200"),
                                   Pair("shoal.io/gpu-memory-mib", "143771")));
  EXPECT_EQ(manager.Summary(), "GPU 2 x H200 (nvml, 143771 MiB each)");
}

struct CountCase {
  std::string name;
  int gpus_in_tree;
  std::optional<double> num_gpus;
  std::optional<std::string> visible;  // CUDA_VISIBLE_DEVICES
  int want_count;                      // -1: error
  std::string want_gpu0;               // CUDA_VISIBLE_DEVICES for id 0
};

class GpuCountTest : public ::testing::TestWithParam<CountCase> {};

TEST_P(GpuCountTest, OverridesAndVisibleDevices) {
  const CountCase& c = GetParam();
  testing::ScopedTempDir root;
  ASSERT_TRUE(
      MakeFakeNvidiaHost(root.path(), c.gpus_in_tree, "NVIDIA H200").ok());
  std::map<std::string, std::string> env;
  if (c.visible) env["CUDA_VISIBLE_DEVICES"] = *c.visible;
  auto manager = NvidiaGpuManager::Create(root.path(), env, c.num_gpus);
  if (c.want_count < 0) {
    EXPECT_EQ(manager.status().code(), absl::StatusCode::kInvalidArgument);
    return;
  }
  ASSERT_TRUE(manager.ok()) << manager.status();
  EXPECT_EQ((*manager)->NumDevices(), c.want_count);
  if (c.want_count > 0) {
    auto env0 = (*manager)->VisibleDevicesEnvironment({0});
    ASSERT_TRUE(env0.ok());
    EXPECT_EQ(env0->set.at("CUDA_VISIBLE_DEVICES"), c.want_gpu0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Counts, GpuCountTest,
    ::testing::Values(
        CountCase{"Detected", 4, std::nullopt, std::nullopt, 4, "0"},
        CountCase{"OverrideDown", 4, 1.0, std::nullopt, 1, "0"},
        CountCase{"OverrideWithoutGpus", 0, 2.0, std::nullopt, 2, "0"},
        CountCase{"OverrideFraction", 4, 0.5, std::nullopt, -1, ""},
        CountCase{"VisibleLimit", 4, std::nullopt, "2,3", 2, "2"},
        CountCase{"VisibleStopsAtMinusOne", 4, std::nullopt, "1,-1,2", 1, "1"},
        CountCase{"VisibleEmpty", 4, std::nullopt, "", 0, ""},
        CountCase{"NoDevFiles", 4, std::nullopt, "NoDevFiles", 0, ""},
        CountCase{"OverrideAboveVisible", 4, 3.0, "0,1", -1, ""}),
    [](const ::testing::TestParamInfo<CountCase>& info) {
      return info.param.name;
    });

}  // namespace
}  // namespace shoal::accel
