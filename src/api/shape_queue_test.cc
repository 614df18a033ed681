// ShapeQueue's decisions, on its state alone.
#include "api/shape_queue.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;

std::unique_ptr<LeasedWorker> Worker(const std::string& lease,
                                     std::vector<std::string> in_flight = {},
                                     int64_t idle_since_us = 0) {
  auto w = std::make_unique<LeasedWorker>();
  w->lease_id = lease;
  w->agent = "agent-of-" + lease;
  w->in_flight.assign(in_flight.begin(), in_flight.end());
  w->idle_since_us = idle_since_us;
  return w;
}

std::vector<std::string> Drain(ShapeQueue& q) {
  std::vector<std::string> out;
  while (!q.empty()) out.push_back(q.TakeNext());
  return out;
}

TEST(ShapeQueueTest, RetriesGoFirst) {
  ShapeQueue q("k", ResourceSet(), 0);
  q.Add("t1", /*front=*/false);
  q.Add("t2", /*front=*/false);
  q.Add("retry", /*front=*/true);
  EXPECT_EQ(q.size(), 3u);
  EXPECT_THAT(Drain(q), ElementsAre("retry", "t1", "t2"));
}

TEST(ShapeQueueTest, PipelineDepthFollowsTheMeasuredRunTime) {
  struct Case {
    std::vector<int64_t> exec_us;  // tasks that returned, in order
    size_t want;
  };
  std::vector<Case> cases = {
      {{}, 1},           // nothing measured yet
      {{2000}, 1},       // 2 ms tasks: one at a time
      {{100}, 20},       // 0.1 ms: 2 ms of work in flight
      {{1}, 32},         // capped
      {{100, 1100}, 6},  // moving average: 0.8 * 100 + 0.2 * 1100 = 300
      {{-1, 500}, 4},    // a failed task measures nothing
  };
  for (const Case& c : cases) {
    ShapeQueue q("k", ResourceSet(), 0);
    q.AddWorker(Worker("l1"));
    LeasedWorker* w = q.FindWorker("l1");
    for (int64_t exec : c.exec_us) {
      w->in_flight.push_back("t");
      q.TaskReturned(*w, "t", 5, exec);
    }
    EXPECT_EQ(q.MaxInFlight(), c.want) << ::testing::PrintToString(c.exec_us);
    EXPECT_EQ(w->idle_since_us, c.exec_us.empty() ? 0 : 5);
  }
}

TEST(ShapeQueueTest, IdleThenLeastBusyWorkerTakesTheNextTask) {
  ShapeQueue q("k", ResourceSet(), 0);
  q.AddWorker(Worker("busy", {"a"}));
  EXPECT_EQ(q.IdleWorker(), nullptr);
  // Depth 1 until a run time is known: a busy worker takes nothing more.
  EXPECT_EQ(q.LeastBusyWorker(), nullptr);
  q.AddWorker(Worker("idle"));
  EXPECT_EQ(q.IdleWorker()->lease_id, "idle");
  LeasedWorker* busy = q.FindWorker("busy");
  q.TaskReturned(*busy, "a", 1, 100);  // now 20 deep
  busy->in_flight = {"b", "c"};
  q.FindWorker("idle")->in_flight = {"d"};
  EXPECT_EQ(q.LeastBusyWorker()->lease_id, "idle");
}

TEST(ShapeQueueTest,
     ALostWorkersWaitingTasksGoBackInOrderAndItsRunningOneIsNamed) {
  ShapeQueue q("k", ResourceSet(), 0);
  q.Add("queued", false);
  q.AddWorker(Worker("l1", {"run", "p1", "p2"}));
  std::string running;
  std::unique_ptr<LeasedWorker> lost = q.RemoveLost("l1", "", &running);
  ASSERT_NE(lost, nullptr);
  EXPECT_EQ(running, "run");
  EXPECT_THAT(Drain(q), ElementsAre("p1", "p2", "queued"));
  EXPECT_THAT(q.workers(), IsEmpty());
  EXPECT_EQ(q.RemoveLost("l1", "", &running), nullptr);
}

TEST(ShapeQueueTest, APushNeverSentIsNoRunningTaskAndGoesBack) {
  ShapeQueue q("k", ResourceSet(), 0);
  q.AddWorker(Worker("l1", {"unsent", "p1"}));
  std::string running = "stale";
  ASSERT_NE(q.RemoveLost("l1", "unsent", &running), nullptr);
  EXPECT_EQ(running, "");
  EXPECT_THAT(Drain(q), ElementsAre("unsent", "p1"));
}

constexpr int64_t kNoAgeLimit = int64_t{1} << 62;

TEST(ShapeQueueTest, IdleLeasesAreTakenByTheClockAndNeverWhileTasksWait) {
  ShapeQueue q("k", ResourceSet(), 0);
  q.AddWorker(Worker("old", {}, 1000));
  q.AddWorker(Worker("recent", {}, 9000));
  q.AddWorker(Worker("busy", {"t"}, 0));
  q.Add("waiting", false);
  EXPECT_THAT(q.TakeIdle(10000, 5000, kNoAgeLimit), IsEmpty());
  q.TakeNext();
  auto idle = q.TakeIdle(10000, 5000, kNoAgeLimit);
  ASSERT_EQ(idle.size(), 1u);
  EXPECT_EQ(idle[0]->lease_id, "old");
  EXPECT_EQ(q.TakeIdle(10000, 0, kNoAgeLimit).size(), 1u);  // "recent", at once
  EXPECT_EQ(q.workers().size(), 1u);
  EXPECT_EQ(q.TakeAllWorkers().size(), 1u);
  EXPECT_THAT(q.workers(), IsEmpty());
}

TEST(ShapeQueueTest, AnOldLeaseIsTakenOnceIdleHoweverRecentlyUsed) {
  ShapeQueue q("k", ResourceSet(), 0);
  auto old = Worker("old", {}, 9999);
  old->leased_at_us = 1000;
  q.AddWorker(std::move(old));
  auto busy = Worker("old-but-busy", {"t"}, 0);
  busy->leased_at_us = 1000;
  q.AddWorker(std::move(busy));
  auto young = Worker("young", {}, 9999);
  young->leased_at_us = 9000;
  q.AddWorker(std::move(young));
  auto taken = q.TakeIdle(10000, 5000, 2000);
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0]->lease_id, "old");
  EXPECT_EQ(q.workers().size(), 2u);
}

TEST(ShapeQueueTest, LeaseRequestsFollowTheWaitingTasksUpToTen) {
  ShapeQueue q("k", ResourceSet(), 0);
  EXPECT_EQ(q.LeaseRequestsWanted(), 0);
  for (int i = 0; i < 12; ++i) q.Add("t" + std::to_string(i), false);
  EXPECT_EQ(q.LeaseRequestsWanted(), ShapeQueue::kMaxPendingLeaseRequests);
  q.RequestSent(1, "a1");
  q.RequestSent(2, "a2");
  EXPECT_EQ(q.pending_lease_requests(), 2);
  EXPECT_EQ(q.LeaseRequestsWanted(), 8);
  EXPECT_TRUE(q.starving());
  q.RequestAnswered(1);
  q.RequestAnswered(1);  // twice: counted once
  EXPECT_EQ(q.pending_lease_requests(), 1);
  q.AwaitProgram("no program here");
  EXPECT_EQ(q.LeaseRequestsWanted(), 0);
  EXPECT_EQ(q.EndProgramWait(), "no program here");
  EXPECT_FALSE(q.awaiting_program());
}

TEST(ShapeQueueTest, WithdrawnRequestsAreWithdrawnOnceAndNoLongerPending) {
  ShapeQueue q("k", ResourceSet(), 0);
  q.RequestSent(3, "a1");
  q.RequestSent(4, "a2");
  EXPECT_THAT(q.Withdraw(), ElementsAre(Pair(3u, "a1"), Pair(4u, "a2")));
  EXPECT_EQ(q.pending_lease_requests(), 0);
  EXPECT_THAT(q.Withdraw(), IsEmpty());
  // Their answers (CANCELED, or a grant that crossed) change no count.
  q.RequestAnswered(3);
  EXPECT_EQ(q.pending_lease_requests(), 0);
}

TEST(ShapeQueueTest, StartFailuresCountToThreeThenStartOver) {
  ShapeQueue q("k", ResourceSet(), 0);
  EXPECT_FALSE(q.CountStartFailure());
  EXPECT_FALSE(q.CountStartFailure());
  EXPECT_TRUE(q.CountStartFailure());
  EXPECT_FALSE(q.CountStartFailure());
  q.StartSucceeded();
  EXPECT_FALSE(q.CountStartFailure());
  EXPECT_FALSE(q.CountStartFailure());
  EXPECT_TRUE(q.CountStartFailure());
}

}  // namespace
}  // namespace shoal::internal
