#include "agent/device_allocator.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shoal::agent {
namespace {

ResourceSet R(const std::map<std::string, double>& amounts) {
  return *ResourceSet::FromDoubles(amounts);
}

TEST(DeviceKeyTest, NamesKindsAndIds) {
  EXPECT_EQ(DeviceKey({}), "");
  EXPECT_EQ(DeviceKey({{"GPU", {0, 2}}, {"TPU", {1}}}), "GPU:0,2,;TPU:1,;");
  EXPECT_NE(DeviceKey({{"GPU", {0}}}), DeviceKey({{"GPU", {1}}}));
}

TEST(DeviceAllocatorTest, Table) {
  struct Take {
    ResourceSet shape;
    DeviceIds want;
  };
  struct Case {
    std::string name;
    std::vector<Take> takes;  // in order, none returned
    std::set<int> want_free_gpus;
  };
  std::vector<Case> cases = {
      {"whole devices are the lowest free, exclusively",
       {{R({{"GPU", 2}}), {{"GPU", {0, 1}}}},
        {R({{"GPU", 1}}), {{"GPU", {2}}}}},
       {3}},
      {"a fraction shares the lowest free device and takes none",
       {{R({{"GPU", 0.5}}), {{"GPU", {0}}}},
        {R({{"GPU", 0.5}}), {{"GPU", {0}}}}},
       {0, 1, 2, 3}},
      {"a fraction after whole devices shares the next free one",
       {{R({{"GPU", 1}}), {{"GPU", {0}}}},
        {R({{"GPU", 0.25}}), {{"GPU", {1}}}}},
       {1, 2, 3}},
      {"a fraction with none free shares device 0",
       {{R({{"GPU", 4}}), {{"GPU", {0, 1, 2, 3}}}},
        {R({{"GPU", 0.5}}), {{"GPU", {0}}}}},
       {}},
      {"more than are free gives those that are",
       {{R({{"GPU", 3}}), {{"GPU", {0, 1, 2}}}},
        {R({{"GPU", 2}}), {{"GPU", {3}}}}},
       {}},
      {"resources without devices take none",
       {{R({{"CPU", 4}, {"memory", 100}}), {}}},
       {0, 1, 2, 3}},
      {"each kind apart",
       {{R({{"GPU", 1}, {"TPU", 2}}), {{"GPU", {0}}, {"TPU", {0, 1}}}}},
       {1, 2, 3}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    DeviceAllocator devices({{"GPU", 4}, {"TPU", 4}});
    for (const Take& t : c.takes) {
      EXPECT_EQ(devices.Take(t.shape), t.want) << t.shape.DebugString();
    }
    EXPECT_EQ(devices.free("GPU"), c.want_free_gpus);
  }
}

TEST(DeviceAllocatorTest, ReturnFreesWholeDevicesOnly) {
  DeviceAllocator devices({{"GPU", 4}});
  DeviceIds two = devices.Take(R({{"GPU", 2}}));
  DeviceIds half = devices.Take(R({{"GPU", 0.5}}));
  EXPECT_EQ(half, (DeviceIds{{"GPU", {2}}}));
  EXPECT_TRUE(devices.Return(R({{"GPU", 0.5}}), half).ok());
  EXPECT_EQ(devices.free("GPU"), (std::set<int>{2, 3}));
  EXPECT_TRUE(devices.Return(R({{"GPU", 2}}), two).ok());
  EXPECT_EQ(devices.free("GPU"), (std::set<int>{0, 1, 2, 3}));
}

TEST(DeviceAllocatorTest, ReturningTwiceFailsAndChangesNothing) {
  DeviceAllocator devices({{"GPU", 2}});
  DeviceIds one = devices.Take(R({{"GPU", 1}}));
  ASSERT_TRUE(devices.Return(R({{"GPU", 1}}), one).ok());
  EXPECT_EQ(devices.Return(R({{"GPU", 1}}), one).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(devices.Return(R({{"TPU", 1}}), {{"TPU", {0}}}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(devices.free("GPU"), (std::set<int>{0, 1}));
  EXPECT_EQ(devices.free("TPU"), std::set<int>());
}

class FakeGpus : public accel::AcceleratorManager {
 public:
  std::string ResourceName() const override { return "GPU"; }
  int NumDevices() const override { return 2; }
  std::string AcceleratorType() const override { return "H200"; }
  std::map<std::string, double> ExtraResources() const override { return {}; }
  std::map<std::string, std::string> Labels() const override {
    return {{accel::kLabelAcceleratorType, "H200"}};
  }
  absl::Status ValidateRequest(double) const override {
    return absl::OkStatus();
  }
  absl::StatusOr<accel::DeviceEnvironment> VisibleDevicesEnvironment(
      const std::vector<int>& ids) const override {
    accel::DeviceEnvironment env;
    std::string list;
    for (int id : ids) list += (list.empty() ? "" : ",") + std::to_string(id);
    env.set["CUDA_VISIBLE_DEVICES"] = list;
    if (ids.empty()) env.unset.push_back("NVIDIA_VISIBLE_DEVICES");
    return env;
  }
  std::string Summary() const override { return "GPU 2"; }
};

TEST(AddDeviceEnvironmentTest, ShowsHeldDevicesAndHidesTheRest) {
  std::vector<std::shared_ptr<const accel::AcceleratorManager>> gpus = {
      std::make_shared<FakeGpus>()};
  SpawnOptions held;
  ASSERT_TRUE(AddDeviceEnvironment(gpus, {{"GPU", {0, 1}}}, &held).ok());
  EXPECT_EQ(held.env["CUDA_VISIBLE_DEVICES"], "0,1");
  EXPECT_EQ(held.env["SHOAL_DEVICE_KIND"], "GPU");
  EXPECT_EQ(held.env["SHOAL_DEVICE_IDS"], "0,1");
  EXPECT_EQ(held.env["SHOAL_ACCELERATOR_TYPE"], "H200");
  EXPECT_EQ(held.env["SHOAL_ACCELERATOR_NAME"], "H200");

  SpawnOptions none;
  ASSERT_TRUE(AddDeviceEnvironment(gpus, {}, &none).ok());
  EXPECT_EQ(none.env["CUDA_VISIBLE_DEVICES"], "");
  EXPECT_EQ(none.env.count("SHOAL_DEVICE_KIND"), 0u);
  EXPECT_EQ(none.unset_env, std::vector<std::string>{"NVIDIA_VISIBLE_DEVICES"});
}

}  // namespace
}  // namespace shoal::agent
