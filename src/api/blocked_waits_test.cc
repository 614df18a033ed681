// A worker's node hears the shallowest depth its threads wait at, only when
// it changes, and -1 once none waits.
#include "api/blocked_waits.h"

#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::internal {
namespace {

using ::testing::ElementsAre;

TEST(BlockedWaitsTest, TellsTheShallowestDepthWhenItChanges) {
  std::vector<int> told;
  BlockedWaits waits([] { return 0; }, [&](int d) { told.push_back(d); });
  waits.Begin(3);  // 3
  waits.Begin(5);  // still 3: not told
  waits.Begin(1);  // 1
  waits.End(3);    // still 1
  waits.End(1);    // 5
  waits.End(5);    // none
  EXPECT_THAT(told, ElementsAre(3, 1, 5, -1));
}

TEST(BlockedWaitsTest, TwoWaitsAtOneDepthEndOneAtATime) {
  std::vector<int> told;
  BlockedWaits waits([] { return 0; }, [&](int d) { told.push_back(d); });
  waits.Begin(2);
  waits.Begin(2);
  waits.End(2);
  EXPECT_THAT(told, ElementsAre(2));
  waits.End(2);
  EXPECT_THAT(told, ElementsAre(2, -1));
}

TEST(BlockedWaitsTest, AnEndWithoutABeginChangesNothing) {
  std::vector<int> told;
  BlockedWaits waits([] { return 0; }, [&](int d) { told.push_back(d); });
  waits.End(4);
  EXPECT_TRUE(told.empty());
}

TEST(BlockedWaitsTest, AWaitEndsAtTheDepthItBeganAt) {
  // The thread's task depth changes while it waits (a later task started):
  // the wait still ends at the depth it was counted at.
  int depth = 2;
  std::vector<int> told;
  BlockedWaits waits([&] { return depth; }, [&](int d) { told.push_back(d); });
  std::thread([&] {
    waits.Blocked(true);
    depth = 7;
    waits.Blocked(false);
  }).join();
  EXPECT_THAT(told, ElementsAre(2, -1));
}

}  // namespace
}  // namespace shoal::internal
