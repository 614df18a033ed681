#include "common/mutex.h"

#include <gtest/gtest.h>

#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace shoal {
namespace {

TEST(CondVarTest, AWaitPastItsDeadlineSaysItTimedOut) {
  Mutex mu;
  CondVar cv;
  MutexLock lock(&mu);
  const absl::Time deadline = absl::Now() + absl::Milliseconds(20);
  // Nobody signals: only a spurious wakeup returns false, before it.
  while (!cv.WaitWithDeadline(&mu, deadline)) {
  }
  EXPECT_GE(absl::Now(), deadline);
  EXPECT_TRUE(cv.WaitWithTimeout(&mu, absl::ZeroDuration()));
  EXPECT_TRUE(cv.WaitWithDeadline(&mu, absl::InfinitePast()));
}

// A signal wakes a waiter with the lock held again, before its deadline.
TEST(CondVarTest, ASignalWakesTheWaiterHoldingTheLock) {
  Mutex mu;
  CondVar cv;
  bool ready = false;  // guarded by mu
  std::thread signaller([&] {
    MutexLock lock(&mu);
    ready = true;
    cv.Signal();
  });
  {
    MutexLock lock(&mu);
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    bool timed_out = false;
    while (!ready && !timed_out) timed_out = cv.WaitWithDeadline(&mu, deadline);
    EXPECT_TRUE(ready);
    EXPECT_FALSE(timed_out);
    mu.AssertHeld();
  }
  signaller.join();
}

TEST(CondVarTest, SignalAllWakesEveryWaiter) {
  Mutex mu;
  CondVar cv;
  int waiting = 0, woken = 0;  // guarded by mu
  bool go = false;
  std::thread waiters[3];
  for (auto& t : waiters) {
    t = std::thread([&] {
      MutexLock lock(&mu);
      ++waiting;
      while (!go) cv.Wait(&mu);
      ++woken;
    });
  }
  while (true) {
    MutexLock lock(&mu);
    if (waiting == 3) {
      go = true;
      cv.SignalAll();
      break;
    }
  }
  for (auto& t : waiters) t.join();
  MutexLock lock(&mu);
  EXPECT_EQ(woken, 3);
}

// A global lock needs no constructor run (constant-initialized).
Mutex g_mu;

TEST(MutexTest, AGlobalLockWorksBeforeMain) {
  MutexLock lock(&g_mu);
  g_mu.AssertHeld();
}

}  // namespace
}  // namespace shoal
