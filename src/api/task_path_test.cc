// The loop's side of the runtime wired together, against a head that the
// test plays (no sockets): actor calls reach the head and fail as it says,
// task events go to it, and shutdown finishes and hands over what is left.
#include "api/task_path.h"

#include <memory>
#include <string>
#include <vector>

#include "api/loop_testing.h"
#include "api/owned_objects.h"
#include "api/submit_window.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/event_loop.h"

namespace shoal::internal {
namespace {

using ::testing::HasSubstr;

// Answers on the loop's next turn, as a real head's replies arrive.
class FakeHead : public TaskPath::Head {
 public:
  explicit FakeHead(rpc::EventLoop* loop) : loop_(loop) {}

  void ClusterStatus(
      std::function<void(absl::StatusOr<proto::ClusterStatus>)> done) override {
    loop_->Post([done] { done(proto::ClusterStatus()); });
  }
  void GetActor(
      const proto::GetActorRequest& request,
      std::function<void(absl::StatusOr<proto::ActorInfo>)> done) override {
    asked_for.push_back(request.actor_id());
    loop_->Post([done] { done(absl::NotFoundError("no such actor")); });
  }
  void ReportTaskEvents(
      std::string batch,
      std::function<void(TaskEventReporter::Delivery, absl::Status)> done)
      override {
    batches.push_back(std::move(batch));
    loop_->Post([done] {
      done(TaskEventReporter::Delivery::kTaken, absl::OkStatus());
    });
  }

  std::vector<std::string> asked_for;
  std::vector<std::string> batches;

 private:
  rpc::EventLoop* const loop_;
};

class TaskPathTest : public LoopTest {
 protected:
  TaskPathTest()
      : objects_([](const std::string&, bool, std::set<std::string>, bool) {}),
        window_(100) {}

  void SetUp() override {
    StartLoop("task-path-test");
    head_ = std::make_unique<FakeHead>(loop_.get());
    TaskPath::Options options;
    options.token = "token";
    options.peer_name = "driver j";
    options.owner = "driver of job j";
    options.events_job_id = "j";
    options.task_events_interval_ms = 1000;
    options.submit.job_id = "j";
    Run([&] {
      path_ = std::make_unique<TaskPath>(loop_.get(), head_.get(), &objects_,
                                         &window_, options);
      EXPECT_EQ(path_->Start(proto::ClusterStatus()), "");
    });
  }

  void TearDown() override {
    Run([&] {
      TaskLifecycle::Taken taken = path_->Stop();
      path_.reset();
    });
    loop_->Stop();
  }

  std::shared_ptr<RefHandle> SubmitCall(const std::string& id,
                                        const std::string& actor) {
    auto task = std::make_unique<TaskEntry>();
    task->id = id;
    task->function = "Add";
    task->actor_id = actor;
    task->retries_left = 0;
    objects_.AddPending(id);
    auto handle = objects_.NewHandle(id);
    TaskEntry* raw = task.release();
    Run([&] { path_->Submit(std::unique_ptr<TaskEntry>(raw)); });
    return handle;
  }

  OwnedObjects objects_;
  SubmitWindow window_;
  std::unique_ptr<FakeHead> head_;
  std::unique_ptr<TaskPath> path_;
};

TEST_F(TaskPathTest, ACallToAnActorTheHeadDoesNotKnowFails) {
  auto call = SubmitCall("c1", "actor-9");
  auto value = objects_.WaitReady("c1", 10000, nullptr);
  ASSERT_FALSE(value.ok());
  EXPECT_EQ(KindOf(value.status()), ErrorKind::kActorDied);
  EXPECT_THAT(value.status().message(), HasSubstr("no actor actor-9 exists"));
  std::vector<std::string> asked;
  Run([&] { asked = head_->asked_for; });
  EXPECT_EQ(asked, std::vector<std::string>{"actor-9"});
}

TEST_F(TaskPathTest, FinishSendsTheLastTaskEventsAndWaitsForTheHead) {
  auto call = SubmitCall("c2", "actor-8");
  ASSERT_FALSE(objects_.WaitReady("c2", 10000, nullptr).ok());
  rpc::RunOnLoopAndWait<void>(loop_.get(), [&](std::function<void()> done) {
    path_->Finish({}, std::move(done));
  });
  std::vector<std::string> batches;
  Run([&] { batches = head_->batches; });
  ASSERT_EQ(batches.size(), 1u);
  proto::TaskEventBatch batch;
  ASSERT_TRUE(batch.ParseFromString(batches[0]));
  ASSERT_GE(batch.events_size(), 1);
  EXPECT_EQ(batch.events(0).task_id(), "c2");
  EXPECT_EQ(batch.events(0).state(), proto::TaskEvent::FAILED);
}

TEST_F(TaskPathTest, StopHandsOverTheTasksStillQueued) {
  // A task waiting on an object that is never made stays queued.
  objects_.AddPending("never");
  auto never = objects_.NewHandle("never");
  auto task = std::make_unique<TaskEntry>();
  task->id = "t1";
  task->function = "f";
  TaskArg arg;
  arg.ref = never;
  task->args.args.push_back(arg);
  objects_.AddPending("t1");
  auto handle = objects_.NewHandle("t1");
  TaskEntry* raw = task.release();
  Run([&] { path_->Submit(std::unique_ptr<TaskEntry>(raw)); });
  TaskLifecycle::Taken taken;
  Run([&] { taken = path_->Stop(); });
  EXPECT_EQ(taken.tasks.size(), 1u);
  EXPECT_EQ(taken.tasks.count("t1"), 1u);
}

}  // namespace
}  // namespace shoal::internal
