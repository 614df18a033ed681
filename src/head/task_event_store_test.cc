#include "head/task_event_store.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal {
namespace {

using ::testing::HasSubstr;

proto::TaskEvent Event(const std::string& id, TaskState state,
                       int64_t time_ms = 1, int attempt = 0,
                       const std::string& name = "f") {
  proto::TaskEvent e;
  e.set_task_id(id);
  e.set_name(name);
  e.set_attempt(attempt);
  e.set_state(state);
  e.mutable_state_times_ms()->Resize(kNumTaskStates, 0);
  e.set_state_times_ms(state, time_ms);
  return e;
}

proto::TaskEventBatch Batch(const std::string& job,
                            std::initializer_list<proto::TaskEvent> events) {
  proto::TaskEventBatch batch;
  batch.set_job_id(job);
  for (const auto& e : events) *batch.add_events() = e;
  return batch;
}

proto::TaskList List(const TaskEventStore& store,
                     std::initializer_list<std::string> filters = {},
                     int limit = 0) {
  proto::ListTasksRequest r;
  for (const auto& f : filters) r.add_filters(f);
  r.set_limit(limit);
  auto list = store.List(r);
  EXPECT_TRUE(list.ok()) << list.status();
  return list.ok() ? *list : proto::TaskList();
}

int64_t Count(const proto::TaskList& list, const std::string& state) {
  auto it = list.state_counts().find(state);
  return it == list.state_counts().end() ? -1 : it->second;
}

// A driver that ends takes its unfinished tasks with it: they end FAILED
// (WORKER_DIED, with the reason), ended ones stay as they were, other jobs
// are untouched, the counts move, and later reports cannot revive them.
TEST(TaskEventStoreTest, TasksOfAnEndedJobThatHadNotEndedFail) {
  TaskEventStore store;
  store.Add(Batch("job1",
                  {Event("pending", proto::TaskEvent::PENDING_NODE_ASSIGNMENT),
                   Event("pushed", proto::TaskEvent::SUBMITTED_TO_WORKER),
                   Event("running", proto::TaskEvent::RUNNING),
                   Event("done", proto::TaskEvent::FINISHED)}));
  store.Add(Batch("job2", {Event("other", proto::TaskEvent::RUNNING)}));
  store.EndJob("job1", "the job's driver ended", 500);

  proto::TaskList list = List(store, {"job_id=job1"});
  ASSERT_EQ(list.tasks_size(), 4);
  for (const proto::TaskEvent& t : list.tasks()) {
    if (t.task_id() == "done") {
      EXPECT_EQ(t.state(), proto::TaskEvent::FINISHED);
      continue;
    }
    EXPECT_EQ(t.state(), proto::TaskEvent::FAILED) << t.task_id();
    EXPECT_EQ(t.error_type(), "WORKER_DIED");
    EXPECT_EQ(t.error(), "the job's driver ended");
    EXPECT_EQ(t.state_times_ms(proto::TaskEvent::FAILED), 500);
  }
  EXPECT_EQ(Count(list, "FAILED"), 3);
  EXPECT_EQ(Count(list, "RUNNING"), 1);  // job2's
  EXPECT_EQ(Count(list, "PENDING_NODE_ASSIGNMENT"), 0);
  EXPECT_EQ(Count(list, "SUBMITTED_TO_WORKER"), 0);
  EXPECT_EQ(List(store, {"job_id=job2"}).tasks(0).state(),
            proto::TaskEvent::RUNNING);

  // A worker's report that comes after, and a task first heard of after.
  store.Add(Batch("job1", {Event("running", proto::TaskEvent::RUNNING, 600),
                           Event("late", proto::TaskEvent::RUNNING, 600)}));
  list = List(store, {"job_id=job1", "state=RUNNING"});
  EXPECT_EQ(list.tasks_size(), 0);
  EXPECT_EQ(Count(list, "FAILED"), 4);
  EXPECT_EQ(Count(list, "RUNNING"), 1);
  // Ending it again changes nothing.
  store.EndJob("job1", "again", 700);
  EXPECT_EQ(List(store, {"task_id=late"}).tasks(0).error(),
            "the job's driver ended");
}

TEST(TaskEventStoreTest, ReportsOfOneTaskFoldIntoOneRecordThatMovesForward) {
  TaskEventStore store;
  store.Add(
      Batch("job1", {Event("t1", proto::TaskEvent::SUBMITTED_TO_WORKER, 10)}));
  // The worker's RUNNING arrives after the owner's FINISHED: it does not
  // move the task back, but its time is kept.
  store.Add(Batch("job1", {Event("t1", proto::TaskEvent::FINISHED, 30)}));
  proto::TaskEvent running = Event("t1", proto::TaskEvent::RUNNING, 20);
  running.set_node_id("n1");
  running.set_worker_id("w1");
  store.Add(Batch("job1", {running}));

  proto::TaskList list = List(store);
  ASSERT_EQ(list.tasks_size(), 1);
  const proto::TaskEvent& t = list.tasks(0);
  EXPECT_EQ(t.state(), proto::TaskEvent::FINISHED);
  EXPECT_EQ(t.job_id(), "job1");
  EXPECT_EQ(t.node_id(), "n1");
  EXPECT_EQ(t.worker_id(), "w1");
  EXPECT_EQ(t.state_times_ms(proto::TaskEvent::SUBMITTED_TO_WORKER), 10);
  EXPECT_EQ(t.state_times_ms(proto::TaskEvent::RUNNING), 20);
  EXPECT_EQ(t.state_times_ms(proto::TaskEvent::FINISHED), 30);
  EXPECT_EQ(Count(list, "FINISHED"), 1);
  EXPECT_EQ(Count(list, "RUNNING"), 0);
  EXPECT_EQ(Count(list, "SUBMITTED_TO_WORKER"), 0);
}

TEST(TaskEventStoreTest,
     ARetryReplacesTheEarlierAttemptAndStaleReportsAreIgnored) {
  TaskEventStore store;
  proto::TaskEvent failed = Event("t1", proto::TaskEvent::RUNNING, 10, 0);
  store.Add(Batch("job1", {failed}));
  store.Add(Batch("job1",
                  {Event("t1", proto::TaskEvent::SUBMITTED_TO_WORKER, 20, 1)}));
  store.Add(Batch("job1", {Event("t1", proto::TaskEvent::FINISHED, 5, 0)}));
  proto::TaskList list = List(store);
  ASSERT_EQ(list.tasks_size(), 1);
  EXPECT_EQ(list.tasks(0).attempt(), 1);
  EXPECT_EQ(list.tasks(0).state(), proto::TaskEvent::SUBMITTED_TO_WORKER);
  EXPECT_EQ(list.tasks(0).state_times_ms(proto::TaskEvent::RUNNING), 0);
  EXPECT_EQ(Count(list, "RUNNING"), 0);
  EXPECT_EQ(Count(list, "SUBMITTED_TO_WORKER"), 1);
}

TEST(TaskEventStoreTest, KeepsTheLastNPerJobAndCountsWhatItDrops) {
  TaskEventStore store(/*max_per_job=*/3);
  // t0 still runs; t1..t4 finish. The running one is kept over older
  // finished ones.
  store.Add(Batch("job1", {Event("t0", proto::TaskEvent::RUNNING)}));
  for (int i = 1; i <= 4; ++i) {
    store.Add(Batch(
        "job1", {Event("t" + std::to_string(i), proto::TaskEvent::FINISHED)}));
  }
  store.Add(Batch("job2", {Event("u1", proto::TaskEvent::FAILED)}));
  proto::TaskList list = List(store, {"job_id=job1"});
  EXPECT_EQ(list.total(), 3);
  EXPECT_EQ(list.dropped(), 2);
  std::vector<std::string> ids;
  for (const auto& t : list.tasks()) ids.push_back(t.task_id());
  EXPECT_THAT(ids, ::testing::ElementsAre("t4", "t3", "t0"));
  // Every task that ended is counted, dropped records too.
  EXPECT_EQ(Count(list, "FINISHED"), 4);
  EXPECT_EQ(Count(list, "FAILED"), 1);
  EXPECT_EQ(Count(list, "RUNNING"), 1);
  EXPECT_EQ(store.size(), 4u);
}

TEST(TaskEventStoreTest, ABatchLargerThanAJobKeepsIsCountedWhole) {
  TaskEventStore store(/*max_per_job=*/2);
  proto::TaskEventBatch batch = Batch("job1", {});
  for (int i = 0; i < 5; ++i) {
    *batch.add_events() =
        Event("t" + std::to_string(i), proto::TaskEvent::FINISHED);
  }
  store.Add(batch);
  proto::TaskList list = List(store);
  ASSERT_EQ(list.tasks_size(), 2);
  EXPECT_EQ(list.tasks(0).task_id(), "t4");
  EXPECT_EQ(list.tasks(1).task_id(), "t3");
  EXPECT_EQ(list.dropped(), 3);
  EXPECT_EQ(Count(list, "FINISHED"), 5);
}

TEST(TaskEventStoreTest, OverTheTotalTheOldestJobsGoFirst) {
  TaskEventStore store(/*max_per_job=*/3, /*max_total=*/4);
  store.Add(Batch("old", {Event("a1", proto::TaskEvent::FINISHED),
                          Event("a2", proto::TaskEvent::FINISHED)}));
  store.Add(Batch("new", {Event("b1", proto::TaskEvent::FINISHED),
                          Event("b2", proto::TaskEvent::FINISHED),
                          Event("b3", proto::TaskEvent::FINISHED)}));
  EXPECT_EQ(store.size(), 4u);
  EXPECT_EQ(List(store, {"job_id=old"}).total(), 1);
  EXPECT_EQ(List(store, {"job_id=new"}).total(), 3);
  store.Add(Batch("newer", {Event("c1", proto::TaskEvent::RUNNING)}));
  EXPECT_EQ(store.size(), 4u);
  EXPECT_EQ(List(store, {"job_id=old"}).total(), 0);
  EXPECT_EQ(Count(List(store), "FINISHED"), 5);
}

TEST(TaskEventStoreTest, FiltersLimitsAndSummarises) {
  TaskEventStore store;
  proto::TaskEvent call = Event("a1", proto::TaskEvent::FINISHED, 1, 0, "inc");
  call.set_actor_id("actor1");
  store.Add(Batch("job1", {Event("t1", proto::TaskEvent::FINISHED),
                           Event("t2", proto::TaskEvent::FAILED),
                           Event("t3", proto::TaskEvent::FINISHED), call}));
  EXPECT_EQ(List(store, {"state=FINISHED"}).total(), 3);
  EXPECT_EQ(List(store, {"state=FINISHED", "type=NORMAL_TASK"}).total(), 2);
  proto::TaskList limited = List(store, {}, 2);
  EXPECT_EQ(limited.total(), 4);
  EXPECT_EQ(limited.tasks_size(), 2);

  proto::ListTasksRequest bad;
  bad.add_filters("colour=red");
  auto refused = store.List(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("state"));
  bad.set_filters(0, "state");
  EXPECT_FALSE(store.List(bad).ok());

  proto::ListTasksRequest summary;
  summary.set_summary(true);
  auto s = store.List(summary);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->summary_size(), 2);
  EXPECT_EQ(s->summary(0).name(), "f");
  EXPECT_EQ(s->summary(0).type(), "NORMAL_TASK");
  EXPECT_EQ(s->summary(0).state_counts().at("FINISHED"), 2);
  EXPECT_EQ(s->summary(0).state_counts().at("FAILED"), 1);
  EXPECT_EQ(s->summary(1).name(), "inc");
  EXPECT_EQ(s->summary(1).type(), "ACTOR_TASK");
}

TEST(TaskEventStoreTest, CountsWhatReportersDropped) {
  TaskEventStore store;
  proto::TaskEventBatch batch = Batch("job1", {});
  batch.set_dropped(7);
  batch.set_dropped_finished(4);
  batch.set_dropped_failed(2);
  store.Add(batch);
  proto::ListTasksRequest r;
  r.set_counts_only(true);
  auto list = store.List(r);
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->reporter_dropped(), 7);
  EXPECT_EQ(list->tasks_size(), 0);
  // The ended ones among them still count.
  EXPECT_EQ(Count(*list, "FINISHED"), 4);
  EXPECT_EQ(Count(*list, "FAILED"), 2);
}

}  // namespace
}  // namespace shoal
