#include "api/task_events.h"

#include "gtest/gtest.h"

namespace shoal::internal {
namespace {

TaskEntry Task(const std::string& id) {
  TaskEntry t;
  t.id = id;
  t.function = "f";
  return t;
}

TEST(TaskEventBufferTest, FoldsATasksChangesIntoOneRecordPerBatch) {
  TaskEventBuffer buffer("job1", true);
  TaskEntry t = Task("t1");
  buffer.Record(
      t, {.state = proto::TaskEvent::PENDING_NODE_ASSIGNMENT, .time_ms = 1});
  buffer.Record(t, {.state = proto::TaskEvent::SUBMITTED_TO_WORKER,
                    .time_ms = 2,
                    .node_id = "n1",
                    .worker_id = "w1"});
  buffer.Record(t, {.state = proto::TaskEvent::RUNNING, .time_ms = 3});
  buffer.Record(t, {.state = proto::TaskEvent::FINISHED, .time_ms = 4});
  auto batch = buffer.Take();
  ASSERT_NE(batch, nullptr);
  EXPECT_EQ(batch->job_id(), "job1");
  ASSERT_EQ(batch->events_size(), 1);
  const proto::TaskEvent& e = batch->events(0);
  EXPECT_EQ(e.task_id(), "t1");
  EXPECT_EQ(e.name(), "f");
  EXPECT_EQ(e.state(), proto::TaskEvent::FINISHED);
  EXPECT_EQ(e.node_id(), "n1");
  EXPECT_EQ(e.worker_id(), "w1");
  ASSERT_EQ(e.state_times_ms_size(), kNumTaskStates);
  for (int s = proto::TaskEvent::PENDING_NODE_ASSIGNMENT;
       s <= proto::TaskEvent::FINISHED; ++s) {
    EXPECT_EQ(e.state_times_ms(s), s - 1);
  }
  EXPECT_EQ(buffer.Take(), nullptr);  // nothing new

  // The next batch has a record of its own for the same task.
  buffer.Record(t, {.state = proto::TaskEvent::FAILED, .error = "boom"});
  batch = buffer.Take();
  ASSERT_NE(batch, nullptr);
  ASSERT_EQ(batch->events_size(), 1);
  EXPECT_EQ(batch->events(0).state(), proto::TaskEvent::FAILED);
  EXPECT_EQ(batch->events(0).error(), "boom");
  EXPECT_NE(batch->events(0).state_times_ms(proto::TaskEvent::FAILED), 0);
}

TEST(TaskEventBufferTest, ARetryStartsItsAttemptOver) {
  TaskEventBuffer buffer("job1", true);
  TaskEntry t = Task("t1");
  buffer.Record(t,
                {.state = proto::TaskEvent::SUBMITTED_TO_WORKER, .time_ms = 2});
  t.attempt = 1;
  buffer.Record(
      t, {.state = proto::TaskEvent::PENDING_NODE_ASSIGNMENT, .time_ms = 5});
  auto batch = buffer.Take();
  ASSERT_EQ(batch->events_size(), 1);
  EXPECT_EQ(batch->events(0).attempt(), 1);
  EXPECT_EQ(batch->events(0).state(),
            proto::TaskEvent::PENDING_NODE_ASSIGNMENT);
  EXPECT_EQ(
      batch->events(0).state_times_ms(proto::TaskEvent::SUBMITTED_TO_WORKER),
      0);
}

TEST(TaskEventBufferTest, DropsPastItsBoundAndSaysHowMany) {
  TaskEventBuffer buffer("job1", true, /*max_tasks=*/2);
  TaskEntry a = Task("a"), b = Task("b"), c = Task("c");
  for (TaskEntry* t : {&a, &b, &c}) {
    buffer.Record(*t, {.state = proto::TaskEvent::PENDING_NODE_ASSIGNMENT});
  }
  // A task already in the batch still updates.
  buffer.Record(a, {.state = proto::TaskEvent::FINISHED});
  auto batch = buffer.Take();
  ASSERT_EQ(batch->events_size(), 2);
  EXPECT_EQ(batch->dropped(), 1);
  EXPECT_EQ(batch->events(0).state(), proto::TaskEvent::FINISHED);
}

TEST(TaskEventBufferTest, OffRecordsNothing) {
  TaskEventBuffer buffer("job1", false);
  TaskEntry t = Task("t1");
  buffer.Record(t, {.state = proto::TaskEvent::FINISHED});
  EXPECT_EQ(buffer.Take(), nullptr);
}

}  // namespace
}  // namespace shoal::internal
