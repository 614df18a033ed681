#include "api/task_event_buffer.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace shoal::internal {
namespace {

// What the buffer sends, parsed back; null when it sends nothing.
std::unique_ptr<proto::TaskEventBatch> Take(TaskEventBuffer& buffer) {
  std::string bytes = buffer.Take();
  if (bytes.empty()) return nullptr;
  auto batch = std::make_unique<proto::TaskEventBatch>();
  EXPECT_TRUE(batch->ParseFromString(bytes));
  return batch;
}

TaskEntry Task(const std::string& id) {
  TaskEntry t;
  t.id = id;
  t.function = "f";
  return t;
}

TEST(TaskEventBufferTest, FoldsATasksChangesIntoOneRecord) {
  TaskEventBuffer buffer("job1", true);
  TaskEntry t = Task("t1");
  buffer.Record(
      t, {.state = proto::TaskEvent::PENDING_NODE_ASSIGNMENT, .time_ms = 1});
  buffer.Record(t, {.state = proto::TaskEvent::SUBMITTED_TO_WORKER,
                    .time_ms = 2,
                    .node_id = "n1",
                    .worker_id = "w1"});
  buffer.Record(t, {.state = proto::TaskEvent::RUNNING, .time_ms = 3});
  auto batch = Take(buffer);
  ASSERT_NE(batch, nullptr);
  EXPECT_EQ(batch->job_id(), "job1");
  ASSERT_EQ(batch->events_size(), 1);
  const proto::TaskEvent& e = batch->events(0);
  EXPECT_EQ(e.task_id(), "t1");
  EXPECT_EQ(e.name(), "f");
  EXPECT_EQ(e.state(), proto::TaskEvent::RUNNING);
  EXPECT_EQ(e.node_id(), "n1");
  EXPECT_EQ(e.worker_id(), "w1");
  ASSERT_EQ(e.state_times_ms_size(), kNumTaskStates);
  for (int s = proto::TaskEvent::PENDING_NODE_ASSIGNMENT;
       s <= proto::TaskEvent::RUNNING; ++s) {
    EXPECT_EQ(e.state_times_ms(s), s - 1);
  }
  EXPECT_EQ(Take(buffer), nullptr);  // nothing new

  // A later batch sends the whole record again, with what changed.
  buffer.Record(t, {.state = proto::TaskEvent::FAILED, .error = "boom"});
  // An ended task stays ended.
  buffer.Record(t, {.state = proto::TaskEvent::FINISHED});
  batch = Take(buffer);
  ASSERT_NE(batch, nullptr);
  ASSERT_EQ(batch->events_size(), 1);
  EXPECT_EQ(batch->events(0).state(), proto::TaskEvent::FAILED);
  EXPECT_EQ(batch->events(0).error(), "boom");
  EXPECT_EQ(batch->events(0).state_times_ms(proto::TaskEvent::RUNNING), 3);
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
  auto batch = Take(buffer);
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
  auto batch = Take(buffer);
  ASSERT_EQ(batch->events_size(), 2);
  EXPECT_EQ(batch->dropped(), 1);
  EXPECT_EQ(batch->events(0).state(), proto::TaskEvent::FINISHED);
}

TEST(TaskEventBufferTest, WhatItSendsParsesAsTheBatchItStandsFor) {
  TaskEventBuffer buffer("job7", true);
  TaskEntry call = Task("c1");
  call.actor_id = "actor-1";
  call.attempt = 2;
  buffer.Record(call, {.state = proto::TaskEvent::FAILED,
                       .time_ms = 1700000000123,
                       .error = "died",
                       .error_type = "ACTOR_DIED"});
  auto batch = Take(buffer);
  ASSERT_NE(batch, nullptr);
  EXPECT_EQ(batch->job_id(), "job7");
  EXPECT_EQ(batch->dropped(), 0);
  const proto::TaskEvent& e = batch->events(0);
  EXPECT_EQ(e.actor_id(), "actor-1");
  EXPECT_EQ(e.attempt(), 2);
  EXPECT_EQ(e.error_type(), "ACTOR_DIED");
  EXPECT_EQ(e.state_times_ms(proto::TaskEvent::FAILED), 1700000000123);
  EXPECT_EQ(e.state_times_ms(proto::TaskEvent::RUNNING), 0);
}

TEST(TaskEventBufferTest, AnEndedTasksRecordOutlivesItsEntry) {
  TaskEventBuffer buffer("job1", true);
  {
    auto t = std::make_unique<TaskEntry>(Task("gone"));
    buffer.Record(*t, {.state = proto::TaskEvent::FINISHED, .time_ms = 9});
    buffer.Ended(*t);
  }
  TaskEntry live = Task("live");
  buffer.Record(live, {.state = proto::TaskEvent::RUNNING, .time_ms = 3});
  int n = 0;
  std::string bytes = buffer.Take(&n);
  EXPECT_EQ(n, 2);
  proto::TaskEventBatch batch;
  ASSERT_TRUE(batch.ParseFromString(bytes));
  ASSERT_EQ(batch.events_size(), 2);
  EXPECT_EQ(batch.events(0).task_id(), "gone");
  EXPECT_EQ(batch.events(1).task_id(), "live");
  // Cleared, a listed entry is forgotten.
  buffer.Record(live, {.state = proto::TaskEvent::FINISHED});
  buffer.Clear();
  EXPECT_EQ(buffer.Take(), "");
}

TEST(TaskEventBufferTest, WhatItDropsItCountsByHowTheTaskEnded) {
  TaskEventBuffer buffer("job1", true, /*max_tasks=*/1);
  TaskEntry a = Task("a"), b = Task("b"), c = Task("c"), d = Task("d");
  for (TaskEntry* t : {&a, &b, &c}) {
    buffer.Record(*t, {.state = proto::TaskEvent::FINISHED});
    buffer.Ended(*t);
  }
  buffer.Record(d, {.state = proto::TaskEvent::FAILED});
  buffer.Ended(d);
  auto batch = Take(buffer);
  ASSERT_EQ(batch->events_size(), 1);
  EXPECT_EQ(batch->dropped(), 3);
  EXPECT_EQ(batch->dropped_finished(), 2);
  EXPECT_EQ(batch->dropped_failed(), 1);
}

TEST(TaskEventBufferTest, OffRecordsNothing) {
  TaskEventBuffer buffer("job1", false);
  TaskEntry t = Task("t1");
  buffer.Record(t, {.state = proto::TaskEvent::FINISHED});
  EXPECT_EQ(Take(buffer), nullptr);
}

}  // namespace
}  // namespace shoal::internal
