#include "accel/detect.h"

#include <stdlib.h>

#include <chrono>
#include <map>
#include <string>

#include "accel/fake_host.h"
#include "accel/test_util.h"
#include "accel/tpu.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::accel {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Key;
using ::testing::Not;
using ::testing::Pair;

// The resources of a node without CPU, memory and object store (which come
// from the machine running the test).
std::map<std::string, double> DeviceResources(const NodeAccelerators& node) {
  std::map<std::string, double> devices = node.resources;
  devices.erase("CPU");
  devices.erase("memory");
  devices.erase("object_store_memory");
  return devices;
}

struct SliceHostCase {
  std::string name;
  std::string type;
  int worker;
  std::map<std::string, double> want_devices;
  std::map<std::string, std::string> want_labels;
};

class DetectSliceHostTest : public ::testing::TestWithParam<SliceHostCase> {};

TEST_P(DetectSliceHostTest, AdvertisesAsRayDoes) {
  const SliceHostCase& c = GetParam();
  testing::ScopedTempDir root;
  DetectOptions options;
  options.device_root = root.path();
  ASSERT_TRUE(
      MakeFakeTpuHost(root.path(), c.type, c.worker, &options.env).ok());
  absl::StatusOr<NodeAccelerators> node = DetectNode(options);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ(DeviceResources(*node), c.want_devices);
  EXPECT_EQ(node->labels, c.want_labels);
  EXPECT_GE(node->resources.at("CPU"), 1);
  EXPECT_GT(node->resources.at("memory"), 0);
  EXPECT_GT(node->resources.at("object_store_memory"), 0);
  EXPECT_THAT(node->summary, HasSubstr(c.type));
}

INSTANTIATE_TEST_SUITE_P(
    SliceHosts, DetectSliceHostTest,
    ::testing::Values(SliceHostCase{"V5p16Worker0",
                                    "v5p-16",
                                    0,
                                    {{"TPU", 4},
                                     {"my-tpu", 1},
                                     {"TPU-v5p-16-head", 1},
                                     {"accelerator_type:TPU-V5P", 1}},
                                    {{"shoal.io/accelerator-type", "TPU-V5P"},
                                     {"shoal.io/tpu-pod-type", "v5p-16"},
                                     {"shoal.io/tpu-slice-name", "my-tpu"},
                                     {"shoal.io/tpu-worker-id", "0"},
                                     {"shoal.io/tpu-num-workers", "2"},
                                     {"shoal.io/tpu-topology", "2x2x2"}}},
                      SliceHostCase{"V5p16Worker1",
                                    "v5p-16",
                                    1,
                                    {{"TPU", 4},
                                     {"my-tpu", 1},
                                     {"accelerator_type:TPU-V5P", 1}},
                                    {{"shoal.io/accelerator-type", "TPU-V5P"},
                                     {"shoal.io/tpu-pod-type", "v5p-16"},
                                     {"shoal.io/tpu-slice-name", "my-tpu"},
                                     {"shoal.io/tpu-worker-id", "1"},
                                     {"shoal.io/tpu-num-workers", "2"},
                                     {"shoal.io/tpu-topology", "2x2x2"}}},
                      SliceHostCase{"V6e8SingleHost",
                                    "v6e-8",
                                    0,
                                    {{"TPU", 8},
                                     {"my-tpu", 1},
                                     {"TPU-v6e-8-head", 1},
                                     {"accelerator_type:TPU-V6E", 1}},
                                    {{"shoal.io/accelerator-type", "TPU-V6E"},
                                     {"shoal.io/tpu-pod-type", "v6e-8"},
                                     {"shoal.io/tpu-slice-name", "my-tpu"},
                                     {"shoal.io/tpu-worker-id", "0"},
                                     {"shoal.io/tpu-num-workers", "1"},
                                     {"shoal.io/tpu-topology", "2x4"}}}),
    [](const ::testing::TestParamInfo<SliceHostCase>& info) {
      return info.param.name;
    });

TEST(DetectNodeTest, TwoHostsOfASliceAddUpAsInShoalStatus) {
  // `shoal status` for a v5p-16 slice: 8 TPU, 1 head, 2 <slice>.
  std::map<std::string, double> total;
  for (int worker = 0; worker < 2; ++worker) {
    testing::ScopedTempDir root;
    DetectOptions options;
    options.device_root = root.path();
    ASSERT_TRUE(
        MakeFakeTpuHost(root.path(), "v5p-16", worker, &options.env).ok());
    absl::StatusOr<NodeAccelerators> node = DetectNode(options);
    ASSERT_TRUE(node.ok()) << node.status();
    for (const auto& [name, amount] : DeviceResources(*node)) {
      total[name] += amount;
    }
  }
  EXPECT_EQ(total["TPU"], 8);
  EXPECT_EQ(total["TPU-v5p-16-head"], 1);
  EXPECT_EQ(total["my-tpu"], 2);
}

TEST(DetectNodeTest, PlainMachineHasNoAccelerators) {
  testing::ScopedTempDir root;
  DetectOptions options;
  options.device_root = root.path();
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<NodeAccelerators> node = DetectNode(options);
  auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_LT(elapsed, std::chrono::seconds(1));
  EXPECT_TRUE(DeviceResources(*node).empty());
  EXPECT_TRUE(node->labels.empty());
  EXPECT_THAT(node->summary, HasSubstr("no accelerators"));
}

TEST(DetectNodeTest, FakeNvidiaHost) {
  testing::ScopedTempDir root;
  ASSERT_TRUE(MakeFakeNvidiaHost(root.path(), 2, "NVIDIA H200").ok());
  DetectOptions options;
  options.device_root = root.path();
  absl::StatusOr<NodeAccelerators> node = DetectNode(options);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ(DeviceResources(*node),
            (std::map<std::string, double>{{"GPU", 2},
                                           {"accelerator_type:H200", 1}}));
  EXPECT_THAT(node->labels,
              Contains(Pair("shoal.io/accelerator-type", "H200")));
  EXPECT_THAT(node->summary, HasSubstr("GPU 2 x H200 (/proc/driver/nvidia)"));
}

TEST(DetectNodeTest, NvidiaAccelDirectoryCountsNoTpu) {
  testing::ScopedTempDir root;
  ASSERT_TRUE(MakeFakeNvidiaHost(root.path(), 1, "NVIDIA H100 80GB HBM3").ok());
  root.Write("dev/accel/accel0", "");
  DetectOptions options;
  options.device_root = root.path();
  options.env = {{"TPU_ACCELERATOR_TYPE", "v5p-16"}};
  absl::StatusOr<NodeAccelerators> node = DetectNode(options);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_THAT(node->resources, Not(Contains(Key("TPU"))));
  EXPECT_EQ(node->resources.at("GPU"), 1);
}

TEST(DetectNodeTest, OverridesReplaceDetection) {
  testing::ScopedTempDir root;
  DetectOptions options;
  options.device_root = root.path();
  ASSERT_TRUE(MakeFakeTpuHost(root.path(), "v5p-16", 0, &options.env).ok());
  options.num_tpus = 0;
  options.num_gpus = 2;
  options.num_cpus = 3;
  options.memory_bytes = 1 << 30;
  options.object_store_memory_bytes = 1 << 29;
  absl::StatusOr<NodeAccelerators> node = DetectNode(options);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ(node->resources,
            (std::map<std::string, double>{{"CPU", 3},
                                           {"memory", 1 << 30},
                                           {"object_store_memory", 1 << 29},
                                           {"GPU", 2}}));
  EXPECT_TRUE(node->labels.empty());
}

TEST(DetectNodeTest, BadOverrideFails) {
  DetectOptions options;
  options.device_root = "/nonexistent/shoal/root";
  options.num_gpus = 1.5;
  absl::StatusOr<NodeAccelerators> node = DetectNode(options);
  EXPECT_EQ(node.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(node.status().ToString(), HasSubstr("--num-gpus=1.5"));
}

TEST(DetectNodeTest, BadSliceVariableFailsOnlyATpuHost) {
  testing::ScopedTempDir root;
  DetectOptions options;
  options.device_root = root.path();
  options.env = {{"TPU_ACCELERATOR_TYPE", "v5p-16"}, {"TPU_WORKER_ID", "7"}};
  EXPECT_TRUE(DetectNode(options).ok());
  root.Write("dev/accel0", "");
  absl::StatusOr<NodeAccelerators> node = DetectNode(options);
  EXPECT_EQ(node.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(node.status().ToString(), HasSubstr("TPU_WORKER_ID=7"));
}

TEST(DetectAcceleratorsTest, ManagersIsolateDevices) {
  testing::ScopedTempDir root;
  DetectOptions options;
  options.device_root = root.path();
  ASSERT_TRUE(MakeFakeTpuHost(root.path(), "v5p-16", 1, &options.env).ok());
  ASSERT_TRUE(MakeFakeNvidiaHost(root.path(), 2, "NVIDIA H200").ok());
  auto managers = DetectAccelerators(options);
  ASSERT_TRUE(managers.ok()) << managers.status();
  ASSERT_EQ(managers->size(), 2u);

  const AcceleratorManager* tpu = FindManager(*managers, "TPU");
  ASSERT_NE(tpu, nullptr);
  EXPECT_THAT(tpu->ValidateRequest(3).ToString(),
              HasSubstr("a task may hold 1, 2, 4 or 8 TPU chips of one host "
                        "(asked for 3)"));
  auto one = tpu->VisibleDevicesEnvironment({3});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->set, (std::map<std::string, std::string>{
                          {"TPU_VISIBLE_CHIPS", "3"},
                          {"TPU_CHIPS_PER_HOST_BOUNDS", "1,1,1"},
                          {"TPU_HOST_BOUNDS", "1,1,1"}}));
  auto whole = tpu->VisibleDevicesEnvironment({0, 1, 2, 3});
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(
      whole->set,
      (std::map<std::string, std::string>{{"TPU_VISIBLE_CHIPS", "0,1,2,3"}}));

  const AcceleratorManager* gpu = FindManager(*managers, "GPU");
  ASSERT_NE(gpu, nullptr);
  auto cuda = gpu->VisibleDevicesEnvironment({1});
  ASSERT_TRUE(cuda.ok());
  EXPECT_EQ(cuda->set.at("CUDA_VISIBLE_DEVICES"), "1");
  EXPECT_EQ(FindManager(*managers, "XPU"), nullptr);
}

TEST(EnvironmentSnapshotTest, ReadsTpuAndCudaVariablesOnly) {
  ::setenv("TPU_NAME", "snapshot-slice", 1);
  ::setenv("CUDA_VISIBLE_DEVICES", "0,1", 1);
  ::setenv("SHOAL_ACCEL_TEST_UNRELATED", "x", 1);
  std::map<std::string, std::string> env = EnvironmentSnapshot();
  ::unsetenv("TPU_NAME");
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  ::unsetenv("SHOAL_ACCEL_TEST_UNRELATED");
  EXPECT_THAT(env, Contains(Pair("TPU_NAME", "snapshot-slice")));
  EXPECT_THAT(env, Contains(Pair("CUDA_VISIBLE_DEVICES", "0,1")));
  EXPECT_THAT(env, Not(Contains(Key("SHOAL_ACCEL_TEST_UNRELATED"))));
}

TEST(FakeHostTest, FillsTheSliceEnvironment) {
  testing::ScopedTempDir root;
  std::map<std::string, std::string> env = {{"KEEP", "me"}};
  ASSERT_TRUE(MakeFakeTpuHost(root.path(), "v5p-16", 1, &env).ok());
  EXPECT_EQ(env, (std::map<std::string, std::string>{
                     {"KEEP", "me"},
                     {"TPU_ACCELERATOR_TYPE", "v5p-16"},
                     {"TPU_WORKER_ID", "1"},
                     {"TPU_NAME", "my-tpu"},
                     {"TPU_WORKER_HOSTNAMES", "127.0.0.1,127.0.0.1"},
                     {"TPU_TOPOLOGY", "2x2x2"}}));
}

TEST(FakeHostTest, ReplacesAnEarlierFakeHost) {
  testing::ScopedTempDir root;
  std::map<std::string, std::string> env;
  ASSERT_TRUE(MakeFakeTpuHost(root.path(), "v6e-8", 0, &env).ok());
  EXPECT_EQ(ScanTpuChips(root.path()).num_chips, 8);
  ASSERT_TRUE(MakeFakeTpuHost(root.path(), "v5p-16", 1, &env).ok());
  EXPECT_EQ(ScanTpuChips(root.path()).num_chips, 4);
  ASSERT_TRUE(MakeFakeNvidiaHost(root.path(), 4, "NVIDIA H200").ok());
  ASSERT_TRUE(MakeFakeNvidiaHost(root.path(), 1, "NVIDIA L4").ok());
  DetectOptions options;
  options.device_root = root.path();
  auto managers = DetectAccelerators(options);
  ASSERT_TRUE(managers.ok());
  EXPECT_EQ(FindManager(*managers, "GPU")->NumDevices(), 1);
}

struct BadFakeCase {
  std::string name;
  std::string root;  // empty: a fresh temporary directory
  std::string type;
  int worker;
  std::string message_part;
};

class BadFakeHostTest : public ::testing::TestWithParam<BadFakeCase> {};

TEST_P(BadFakeHostTest, Refuses) {
  const BadFakeCase& c = GetParam();
  testing::ScopedTempDir temp;
  std::map<std::string, std::string> env;
  absl::Status status = MakeFakeTpuHost(c.root.empty() ? temp.path() : c.root,
                                        c.type, c.worker, &env);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.ToString(), HasSubstr(c.message_part));
  EXPECT_TRUE(env.empty());
}

INSTANTIATE_TEST_SUITE_P(
    BadFakeHosts, BadFakeHostTest,
    ::testing::Values(
        BadFakeCase{"SystemRoot", "/", "v5p-16", 0, "its own directory"},
        BadFakeCase{"SystemRootSpelledOddly", "/tmp/..", "v5p-16", 0,
                    "its own directory"},
        BadFakeCase{"BadType", "", "v5p-15", 0, "v5p-15"},
        BadFakeCase{"WorkerOutOfRange", "", "v5p-16", 2, "workers 0..1"}),
    [](const ::testing::TestParamInfo<BadFakeCase>& info) {
      return info.param.name;
    });

TEST(FakeHostTest, NvidiaRefusesSystemRoot) {
  EXPECT_EQ(MakeFakeNvidiaHost("/", 1, "NVIDIA H200").code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shoal::accel
