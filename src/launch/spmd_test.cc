// shoal::spmd::Initialize() from a process's environment: what
// `shoal launch --per-host` set, or, in a task holding a whole TPU host,
// the slice's (the seed walkthrough's host-centric step).
#include <stdlib.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "shoal/launch.h"

namespace shoal {
namespace {

class SpmdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name :
         {"SHOAL_PROCESS_ID", "SHOAL_NUM_PROCESSES", "SHOAL_LOCAL_DEVICE_COUNT",
          "SHOAL_GLOBAL_DEVICE_COUNT", "SHOAL_COORDINATOR_ADDRESS",
          "SHOAL_DEVICE_KIND", "SHOAL_DEVICE_IDS", "SHOAL_TPU_WORKER_ID",
          "TPU_WORKER_HOSTNAMES"}) {
      unsetenv(name);
    }
  }
  void TearDown() override { SetUp(); }
};

TEST_F(SpmdTest, AWholeHostTaskCountsItsSlicesDevices) {
  setenv("SHOAL_DEVICE_KIND", "TPU", 1);
  setenv("SHOAL_DEVICE_IDS", "0,1,2,3", 1);
  setenv("SHOAL_TPU_WORKER_ID", "1", 1);  // as the node agent sets it
  setenv("TPU_WORKER_HOSTNAMES", "a,b", 1);
  spmd::ProcessInfo info = spmd::Initialize();
  EXPECT_EQ(info.process_id, 1);
  EXPECT_EQ(info.process_count, 2);
  EXPECT_EQ(info.local_device_count, 4);
  EXPECT_EQ(info.global_device_count, 8);
  EXPECT_EQ(info.coordinator_address, "a:8482");
}

TEST_F(SpmdTest, ALaunchedProcessReadsWhatTheLaunchSet) {
  setenv("SHOAL_PROCESS_ID", "3", 1);
  setenv("SHOAL_NUM_PROCESSES", "4", 1);
  setenv("SHOAL_LOCAL_DEVICE_COUNT", "4", 1);
  setenv("SHOAL_GLOBAL_DEVICE_COUNT", "16", 1);
  setenv("SHOAL_COORDINATOR_ADDRESS", "c:1234", 1);
  spmd::ProcessInfo info = spmd::Initialize();
  EXPECT_EQ(info.process_id, 3);
  EXPECT_EQ(info.process_count, 4);
  EXPECT_EQ(info.global_device_count, 16);
  EXPECT_EQ(info.coordinator_address, "c:1234");
}

}  // namespace
}  // namespace shoal
