#include "api/submit_window.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace shoal::internal {
namespace {

TEST(SubmitWindowTest, BlocksWhenFullAndGoesOnAsTasksEnd) {
  SubmitWindow window(2);
  ASSERT_TRUE(window.Acquire(true).ok());
  ASSERT_TRUE(window.Acquire(true).ok());
  std::atomic<bool> third{false};
  std::thread submitter([&] {
    EXPECT_TRUE(window.Acquire(true).ok());
    third = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(third);  // the window is full
  window.Release();
  submitter.join();
  EXPECT_TRUE(third);
  EXPECT_EQ(window.in_flight(), 2);
  EXPECT_EQ(window.waits(), 1);
  EXPECT_EQ(window.peak(), 2);
}

TEST(SubmitWindowTest, TheLoopThreadIsNeverBlocked) {
  SubmitWindow window(1);
  ASSERT_TRUE(window.Acquire(true).ok());
  ASSERT_TRUE(window.Acquire(/*may_block=*/false).ok());
  EXPECT_EQ(window.in_flight(), 2);
  EXPECT_EQ(window.waits(), 0);
}

TEST(SubmitWindowTest, CloseWakesWaitersWithAnError) {
  SubmitWindow window(1);
  ASSERT_TRUE(window.Acquire(true).ok());
  absl::Status waited;
  std::thread submitter([&] { waited = window.Acquire(true); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  window.Close();
  submitter.join();
  EXPECT_FALSE(waited.ok());
  EXPECT_NE(waited.message().find("shutting down"), std::string::npos);
  EXPECT_FALSE(window.Acquire(false).ok());
}

TEST(SubmitWindowTest, ZeroMeansNoBound) {
  SubmitWindow window(0);
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(window.Acquire(true).ok());
  EXPECT_EQ(window.in_flight(), 1000);
  EXPECT_EQ(window.waits(), 0);
}

}  // namespace
}  // namespace shoal::internal
