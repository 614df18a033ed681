// Task events go to the head one batch at a time; a batch the head was away
// for goes again ahead of the next.
#include "api/task_event_reporter.h"

#include <functional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::internal {
namespace {

using Delivery = TaskEventReporter::Delivery;

struct FakeHead {
  std::vector<std::string> batches;
  std::vector<std::function<void(Delivery, absl::Status)>> answers;
  TaskEventReporter::SendFn Send() {
    return [this](std::string batch, auto done) {
      batches.push_back(std::move(batch));
      answers.push_back(std::move(done));
    };
  }
};

TaskEntry Task(const std::string& id) {
  TaskEntry task;
  task.id = id;
  task.function = "f";
  return task;
}

TEST(TaskEventReporterTest, SendsWhatHappenedAndCallsDoneOnTheAnswer) {
  FakeHead head;
  TaskEventReporter reporter("job", 1000, head.Send());
  TaskEntry a = Task("a");
  reporter.buffer().Record(a, {.state = proto::TaskEvent::FINISHED});
  reporter.buffer().Ended(a);
  bool done = false;
  reporter.Flush([&] { done = true; });
  ASSERT_EQ(head.batches.size(), 1u);
  proto::TaskEventBatch batch;
  ASSERT_TRUE(batch.ParseFromString(head.batches[0]));
  ASSERT_EQ(batch.events_size(), 1);
  EXPECT_EQ(batch.events(0).task_id(), "a");
  EXPECT_FALSE(done);
  head.answers[0](Delivery::kTaken, absl::OkStatus());
  EXPECT_TRUE(done);
}

TEST(TaskEventReporterTest, NothingToSendIsDoneAtOnce) {
  FakeHead head;
  TaskEventReporter reporter("job", 1000, head.Send());
  bool done = false;
  reporter.Flush([&] { done = true; });
  EXPECT_TRUE(done);
  EXPECT_TRUE(head.batches.empty());
}

TEST(TaskEventReporterTest, OneBatchAtATime) {
  FakeHead head;
  TaskEventReporter reporter("job", 1000, head.Send());
  TaskEntry a = Task("a"), b = Task("b");
  reporter.buffer().Record(a, {.state = proto::TaskEvent::FINISHED});
  reporter.buffer().Ended(a);
  reporter.Flush(nullptr);
  reporter.buffer().Record(b, {.state = proto::TaskEvent::FINISHED});
  reporter.buffer().Ended(b);
  reporter.Flush(nullptr);  // the first is still out
  EXPECT_EQ(head.batches.size(), 1u);
  head.answers[0](Delivery::kTaken, absl::OkStatus());
  reporter.Flush(nullptr);
  ASSERT_EQ(head.batches.size(), 2u);
  proto::TaskEventBatch batch;
  ASSERT_TRUE(batch.ParseFromString(head.batches[1]));
  ASSERT_EQ(batch.events_size(), 1);
  EXPECT_EQ(batch.events(0).task_id(), "b");
}

TEST(TaskEventReporterTest, ABatchNeverSentGoesAgainAheadOfTheNext) {
  FakeHead head;
  TaskEventReporter reporter("job", 1000, head.Send());
  TaskEntry a = Task("a"), b = Task("b");
  reporter.buffer().Record(a, {.state = proto::TaskEvent::FINISHED});
  reporter.buffer().Ended(a);
  reporter.Flush(nullptr);
  head.answers[0](Delivery::kNotSent, absl::UnavailableError("away"));
  reporter.buffer().Record(b, {.state = proto::TaskEvent::FINISHED});
  reporter.buffer().Ended(b);
  reporter.Flush(nullptr);
  ASSERT_EQ(head.batches.size(), 2u);
  proto::TaskEventBatch batch;
  ASSERT_TRUE(batch.ParseFromString(head.batches[1]));
  ASSERT_EQ(batch.events_size(), 2);
  EXPECT_EQ(batch.events(0).task_id(), "a");
  EXPECT_EQ(batch.events(1).task_id(), "b");
}

TEST(TaskEventReporterTest, ABatchTheHeadRefusedIsNotSentAgain) {
  FakeHead head;
  TaskEventReporter reporter("job", 1000, head.Send());
  TaskEntry a = Task("a");
  reporter.buffer().Record(a, {.state = proto::TaskEvent::FINISHED});
  reporter.buffer().Ended(a);
  reporter.Flush(nullptr);
  head.answers[0](Delivery::kRefused, absl::InternalError("full"));
  reporter.Flush(nullptr);
  EXPECT_EQ(head.batches.size(), 1u);
}

TEST(TaskEventReporterTest, TicksSendOnceTheIntervalHasPassed) {
  FakeHead head;
  TaskEventReporter reporter("job", 300, head.Send());
  TaskEntry a = Task("a");
  reporter.buffer().Record(a, {.state = proto::TaskEvent::FINISHED});
  reporter.buffer().Ended(a);
  reporter.Tick(100);
  reporter.Tick(100);
  EXPECT_TRUE(head.batches.empty());
  reporter.Tick(100);
  EXPECT_EQ(head.batches.size(), 1u);
}

TEST(TaskEventReporterTest, OffRecordsAndSendsNothing) {
  FakeHead head;
  TaskEventReporter reporter("job", 0, head.Send());
  TaskEntry a = Task("a");
  reporter.buffer().Record(a, {.state = proto::TaskEvent::FINISHED});
  reporter.buffer().Ended(a);
  for (int i = 0; i < 100; ++i) reporter.Tick(100);
  reporter.Flush(nullptr);
  EXPECT_TRUE(head.batches.empty());
}

}  // namespace
}  // namespace shoal::internal
