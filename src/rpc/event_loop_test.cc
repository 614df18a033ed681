// What becomes of closures handed to an EventLoop around Stop(): each one
// runs, or is destroyed, exactly once.
#include "rpc/event_loop.h"

#include <atomic>
#include <functional>
#include <memory>
#include <thread>

#include "gtest/gtest.h"

namespace shoal::rpc {
namespace {

// Counts the copies of a closure's capture still alive.
struct Counted {
  explicit Counted(std::atomic<int>* live) : live(live) { ++*live; }
  Counted(const Counted& other) : live(other.live) { ++*live; }
  ~Counted() { --*live; }
  std::atomic<int>* live;
};

TEST(EventLoopTest, AClosurePostedAfterStopIsFreedAtOnceAndNeverRun) {
  auto loop = EventLoop::Create("loop_test");
  ASSERT_TRUE(loop.ok()) << loop.status();
  (*loop)->Stop();
  std::atomic<int> live{0};
  bool ran = false;
  auto owned = std::make_unique<Counted>(&live);
  (*loop)->Post([&ran, owned = std::shared_ptr<Counted>(std::move(owned))] {
    ran = true;
  });
  EXPECT_EQ(live.load(), 0) << "what the closure captured is still held";
  EXPECT_FALSE(ran);
}

// A closure that posts the next one, as a manager that frees a channel on a
// later turn does, keeps one closure queued whenever Stop() comes: it must
// run (it may hold the only pointer to what it frees), not be left behind.
TEST(EventLoopTest, EveryClosureAcceptedBeforeStopRunsOrIsFreedByStop) {
  auto loop = EventLoop::Create("loop_test");
  ASSERT_TRUE(loop.ok()) << loop.status();
  EventLoop* raw = loop->get();
  std::atomic<int> live{0};
  std::atomic<int> ran{0};
  std::function<void()> next = [&] {
    ++ran;
    raw->Post([&, guard = Counted(&live)] { next(); });
  };
  raw->Post([&, guard = Counted(&live)] { next(); });
  raw->Stop();
  EXPECT_EQ(live.load(), 0)
      << "a closure accepted before Stop was neither run nor freed";
  EXPECT_GT(ran.load(), 0);
}

// A worker's main thread runs its loop itself: what was posted before it
// runs, on that thread, until another thread stops it.
TEST(EventLoopTest, AnUnstartedLoopRunsOnTheThreadThatRunsIt) {
  auto loop = EventLoop::CreateUnstarted();
  ASSERT_TRUE(loop.ok()) << loop.status();
  EventLoop* raw = loop->get();
  const std::thread::id here = std::this_thread::get_id();
  std::atomic<bool> on_this_thread{false};
  raw->Post([&] { on_this_thread = std::this_thread::get_id() == here; });
  std::thread stopper([raw] {
    std::atomic<bool> ran{false};
    raw->Post([&ran] { ran = true; });
    while (!ran) std::this_thread::yield();
    raw->Stop();
  });
  raw->RunHere();
  stopper.join();
  EXPECT_TRUE(on_this_thread);
}

TEST(EventLoopTest, RunSyncFromAnotherThreadRunsOnTheLoop) {
  auto loop = EventLoop::Create("loop_test");
  ASSERT_TRUE(loop.ok()) << loop.status();
  bool in_loop = false;
  (*loop)->RunSync([&] { in_loop = (*loop)->InLoop(); });
  EXPECT_TRUE(in_loop);
  EXPECT_FALSE((*loop)->InLoop());
}

TEST(RunOnLoopAndWaitTest, ReturnsWhatDoneIsGiven) {
  auto loop = EventLoop::Create("wait-test");
  ASSERT_TRUE(loop.ok()) << loop.status();
  // Finished later by a timer on the loop, not by the closure itself.
  int value =
      RunOnLoopAndWait<int>(loop->get(), [&](std::function<void(int)> done) {
        (*loop)->RunAfter(1, [done] {
          done(42);
          done(7);  // ignored
        });
      });
  EXPECT_EQ(value, 42);
  bool ran = false;
  RunOnLoopAndWait<void>(loop->get(), [&](std::function<void()> done) {
    ran = (*loop)->InLoop();
    done();
  });
  EXPECT_TRUE(ran);
  (*loop)->Stop();
}

}  // namespace
}  // namespace shoal::rpc
