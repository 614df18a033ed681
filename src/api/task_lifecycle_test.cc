// What becomes of submitted tasks: queued once their arguments are ready,
// specs written, results recorded, retried or failed, dependents woken;
// against the real object table, with the submitters replaced by hooks.
#include "api/task_lifecycle.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "api/owned_objects.h"
#include "api/submit_window.h"
#include "common/cancel_token.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class TaskLifecycleTest : public ::testing::Test {
 protected:
  TaskLifecycleTest()
      : objects_([](const std::string&, bool, std::set<std::string>, bool) {}),
        window_(100),
        lifecycle_(&objects_, &window_, 1024, Hooks()) {
    lifecycle_.SetOwner("driver of job j");
  }

  TaskLifecycle::Hooks Hooks() {
    return {
        .enqueue =
            [this](TaskEntry& t, bool front) {
              queued_.push_back(t.id + (front ? "!" : ""));
            },
        .actor_ready =
            [this](const std::string& actor, const std::string& id) {
              ready_.push_back(actor + "/" + id);
            },
        .actor_drop =
            [this](const std::string& actor, const std::string& id) {
              dropped_.push_back(actor + "/" + id);
            },
        .post =
            [this](std::function<void()> fn) {
              posted_.push_back(std::move(fn));
            },
        .transfer_address_of =
            [](const std::string& node) { return node + ":7001"; },
        .cancel_sent =
            [this](const TaskEntry& t, bool force, bool recursive) {
              asked_to_stop_.push_back(t.id + (force ? " force" : "") +
                                       (recursive ? " recursive" : ""));
              return !worker_lost_;
            },
    };
  }

  // Submits task `id` (its result pending, a place in the window taken),
  // with `args`; returns the handle that keeps its result referenced.
  std::shared_ptr<RefHandle> Submit(const std::string& id,
                                    std::vector<TaskArg> args = {},
                                    int retries = 0,
                                    const std::string& actor = "",
                                    const std::string& parent = "") {
    EXPECT_TRUE(window_.Acquire(false).ok());
    auto task = std::make_unique<TaskEntry>();
    task->id = id;
    task->function = "fn_" + id;
    task->args.args = std::move(args);
    task->retries_left = retries;
    task->actor_id = actor;
    task->parent_id = parent;
    task->in_window = true;
    objects_.AddPending(id);
    auto handle = objects_.NewHandle(id);
    lifecycle_.Submit(std::move(task));
    return handle;
  }

  static proto::TaskResult Value(const std::string& bytes) {
    proto::TaskResult result;
    result.set_ok(true);
    result.set_value(bytes);
    return result;
  }

  OwnedObjects::State StateOf(const std::string& id,
                              absl::Status* error = nullptr) {
    OwnedObjects::Ready ready;
    absl::Status ignored;
    return objects_.Peek(id, &ready, error != nullptr ? error : &ignored);
  }

  OwnedObjects objects_;
  SubmitWindow window_;
  TaskLifecycle lifecycle_;
  std::vector<std::string> queued_, ready_, dropped_, asked_to_stop_;
  std::vector<std::function<void()>> posted_;
  bool worker_lost_ = false;  // cancel_sent finds no worker holding the task
};

TEST_F(TaskLifecycleTest, ATaskWithValuesIsQueuedAndItsResultRecorded) {
  TaskArg arg;
  arg.value = ObjectValue::Owned("\x01");
  auto handle = Submit("t1", {arg});
  EXPECT_THAT(queued_, ElementsAre("t1"));
  EXPECT_EQ(window_.in_flight(), 1);

  proto::TaskSpec spec;
  ASSERT_TRUE(lifecycle_.FillSpec("t1", "n1", "w1", &spec));
  EXPECT_EQ(spec.task_id(), "t1");
  EXPECT_EQ(spec.function_name(), "fn_t1");
  EXPECT_THAT(spec.args(), ElementsAre("\x01"));
  EXPECT_EQ(spec.owner(), "driver of job j");
  EXPECT_EQ(spec.inline_threshold(), 1024u);

  lifecycle_.TaskReplied("t1", "n1", Value("result"));
  EXPECT_EQ(StateOf("t1"), OwnedObjects::State::kReady);
  EXPECT_EQ(window_.in_flight(), 0);
  EXPECT_EQ(lifecycle_.size(), 0u);
  EXPECT_FALSE(lifecycle_.FillSpec("t1", "n1", "w1", &spec));
}

TEST_F(TaskLifecycleTest, ADependentWaitsForItsArgumentThenRuns) {
  auto a = Submit("a");
  TaskArg ref;
  ref.ref = a;
  auto b = Submit("b", {ref});
  EXPECT_THAT(queued_, ElementsAre("a"));
  lifecycle_.TaskReplied("a", "n1", Value("va"));
  EXPECT_THAT(queued_, ElementsAre("a", "b"));
  proto::TaskSpec spec;
  ASSERT_TRUE(lifecycle_.FillSpec("b", "n1", "w", &spec));
  EXPECT_THAT(spec.args(), ElementsAre("va"));
}

TEST_F(TaskLifecycleTest, ADependentOfAFailedTaskFailsToo) {
  auto a = Submit("a");
  TaskArg ref;
  ref.ref = a;
  auto b = Submit("b", {ref});
  lifecycle_.Fail("a", absl::InternalError("boom"));
  absl::Status error;
  EXPECT_EQ(StateOf("b", &error), OwnedObjects::State::kFailed);
  EXPECT_THAT(error.message(), HasSubstr("boom"));
  EXPECT_EQ(window_.in_flight(), 0);
}

// ---- cancel ----

TEST_F(TaskLifecycleTest, ACancelBeforeTheTaskReachesAWorkerFailsItAtOnce) {
  auto a = Submit("a");  // queued for a worker
  TaskArg ref;
  ref.ref = a;
  auto b = Submit("b", {ref});  // waits for a
  auto c = Submit("c", {ref});
  EXPECT_EQ(lifecycle_.Cancel("b", false, false),
            TaskLifecycle::Cancelled::kNow);
  absl::Status error;
  EXPECT_EQ(StateOf("b", &error), OwnedObjects::State::kFailed);
  EXPECT_EQ(KindOf(error), ErrorKind::kCancelled);
  EXPECT_THAT(error.message(), HasSubstr("task fn_b (b) failed: it was "
                                         "cancelled before it ran"));
  // The queued one: its spec is never written, and its dependent fails
  // with its error.
  EXPECT_EQ(lifecycle_.Cancel("a", true, false),
            TaskLifecycle::Cancelled::kNow);
  proto::TaskSpec spec;
  EXPECT_FALSE(lifecycle_.FillSpec("a", "n1", "w", &spec));
  EXPECT_EQ(StateOf("c", &error), OwnedObjects::State::kFailed);
  EXPECT_EQ(KindOf(error), ErrorKind::kCancelled);
  EXPECT_THAT(asked_to_stop_, IsEmpty());
  EXPECT_EQ(window_.in_flight(), 0);
  // Once ended, a cancel changes nothing; an id of nothing here is an error.
  EXPECT_EQ(lifecycle_.Cancel("a", false, false),
            TaskLifecycle::Cancelled::kNotPending);
  absl::StatusOr<bool> again = lifecycle_.CancelTask("a", false, false);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(*again);
  EXPECT_EQ(lifecycle_.CancelTask("nothing", false, false).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(TaskLifecycleTest, ARunningTaskIsAskedToStopAndFailsWhenItDoes) {
  auto t = Submit("t", {}, /*retries=*/3);
  proto::TaskSpec spec;
  ASSERT_TRUE(lifecycle_.FillSpec("t", "n1", "w", &spec));
  EXPECT_EQ(lifecycle_.Cancel("t", false, false),
            TaskLifecycle::Cancelled::kAsked);
  EXPECT_EQ(lifecycle_.Cancel("t", false, false),
            TaskLifecycle::Cancelled::kAsked);
  EXPECT_THAT(asked_to_stop_, ElementsAre("t"));  // once
  EXPECT_EQ(StateOf("t"), OwnedObjects::State::kPending);
  // The task raised as it was interrupted (KeyboardInterrupt).
  proto::TaskResult result;
  result.set_ok(false);
  result.set_error("KeyboardInterrupt");
  result.set_error_type("shoal::TaskCancelled");
  lifecycle_.TaskReplied("t", "n1", result);
  absl::Status error;
  EXPECT_EQ(StateOf("t", &error), OwnedObjects::State::kFailed);
  EXPECT_EQ(KindOf(error), ErrorKind::kCancelled);
  EXPECT_THAT(error.message(), HasSubstr("cancelled while it ran"));
}

TEST_F(TaskLifecycleTest, AForcedCancelIsNotRetriedWhenItsWorkerDies) {
  auto t = Submit("t", {}, /*retries=*/3);
  proto::TaskSpec spec;
  ASSERT_TRUE(lifecycle_.FillSpec("t", "n1", "w", &spec));
  EXPECT_EQ(lifecycle_.Cancel("t", true, false),
            TaskLifecycle::Cancelled::kAsked);
  EXPECT_THAT(asked_to_stop_, ElementsAre("t force"));
  lifecycle_.WorkerDied("t", "killed by signal 9");
  EXPECT_THAT(queued_, ElementsAre("t"));  // not queued again
  absl::Status error;
  EXPECT_EQ(StateOf("t", &error), OwnedObjects::State::kFailed);
  EXPECT_EQ(KindOf(error), ErrorKind::kCancelled);
  EXPECT_THAT(error.message(), HasSubstr("its worker was ended"));
}

TEST_F(TaskLifecycleTest, ATaskBackInItsQueueAfterItsWorkerWasLostFailsAtOnce) {
  auto t = Submit("t", {}, /*retries=*/3);
  proto::TaskSpec spec;
  ASSERT_TRUE(lifecycle_.FillSpec("t", "n1", "w", &spec));
  worker_lost_ = true;  // w was lost; t waits in its queue for another
  EXPECT_EQ(lifecycle_.Cancel("t", true, true), TaskLifecycle::Cancelled::kNow);
  absl::Status error;
  EXPECT_EQ(StateOf("t", &error), OwnedObjects::State::kFailed);
  EXPECT_EQ(KindOf(error), ErrorKind::kCancelled);
  EXPECT_FALSE(lifecycle_.FillSpec("t", "n1", "w2", &spec));  // skipped
}

TEST_F(TaskLifecycleTest, ARecursiveCancelAsksTheWorkerToCancelChildrenToo) {
  auto t = Submit("t");
  proto::TaskSpec spec;
  ASSERT_TRUE(lifecycle_.FillSpec("t", "n1", "w", &spec));
  EXPECT_EQ(lifecycle_.Cancel("t", false, true),
            TaskLifecycle::Cancelled::kAsked);
  EXPECT_THAT(asked_to_stop_, ElementsAre("t recursive"));
}

TEST_F(TaskLifecycleTest, CancelChildrenCancelsWhatTheTaskSubmittedHere) {
  // Task p, running in this process, submitted a (now on a worker) and b
  // (still queued); task q submitted o.
  auto a = Submit("a", {}, 0, "", "p");
  auto b = Submit("b", {}, 0, "", "p");
  auto o = Submit("o", {}, 0, "", "q");
  proto::TaskSpec spec;
  ASSERT_TRUE(lifecycle_.FillSpec("a", "n1", "w1", &spec));
  ASSERT_TRUE(lifecycle_.FillSpec("o", "n1", "w2", &spec));

  EXPECT_EQ(lifecycle_.CancelChildren(CancelToken("p"), /*force=*/true), 2);
  // a's worker cancels a, and a's own children in turn.
  EXPECT_THAT(asked_to_stop_, ElementsAre("a force recursive"));
  absl::Status error;
  EXPECT_EQ(StateOf("b", &error), OwnedObjects::State::kFailed);
  EXPECT_EQ(KindOf(error), ErrorKind::kCancelled);
  EXPECT_EQ(StateOf("o"), OwnedObjects::State::kPending);
  // A driver's tasks (no parent) are no task's children.
  EXPECT_EQ(lifecycle_.CancelChildren(0, false), 0);
  // Again: a is still pending, and its worker is not asked twice.
  EXPECT_EQ(lifecycle_.CancelChildren(CancelToken("p"), false), 1);
  EXPECT_EQ(asked_to_stop_.size(), 1u);
}

TEST_F(TaskLifecycleTest, ATaskThatFinishesBeforeItsCancelKeepsItsResult) {
  auto t = Submit("t");
  proto::TaskSpec spec;
  ASSERT_TRUE(lifecycle_.FillSpec("t", "n1", "w", &spec));
  lifecycle_.Cancel("t", false, false);
  lifecycle_.TaskReplied("t", "n1", Value("done"));
  EXPECT_EQ(StateOf("t"), OwnedObjects::State::kReady);
}

TEST_F(TaskLifecycleTest, AnActorCallIsCancelledOnlyWhileItWaitsForArguments) {
  auto a = Submit("a");
  TaskArg ref;
  ref.ref = a;
  auto waiting = Submit("w", {ref}, 0, "actor1");
  auto given = Submit("g", {}, 0, "actor1");
  EXPECT_EQ(lifecycle_.Cancel("w", false, false),
            TaskLifecycle::Cancelled::kNow);
  EXPECT_THAT(dropped_, ElementsAre("actor1/w"));
  EXPECT_EQ(lifecycle_.CancelTask("g", false, false).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(StateOf("g"), OwnedObjects::State::kPending);
}

TEST_F(TaskLifecycleTest, AWorkerThatDiedIsRetriedFirstThenTheTaskFails) {
  auto t = Submit("t", {}, /*retries=*/1);
  lifecycle_.WorkerDied("t", "killed by signal 9");
  EXPECT_THAT(queued_, ElementsAre("t", "t!"));
  proto::TaskSpec spec;
  ASSERT_TRUE(lifecycle_.FillSpec("t", "n1", "w", &spec));
  EXPECT_EQ(spec.attempt(), 1);
  lifecycle_.WorkerDied("t", "killed by signal 9");
  absl::Status error;
  EXPECT_EQ(StateOf("t", &error), OwnedObjects::State::kFailed);
  EXPECT_EQ(KindOf(error), ErrorKind::kWorkerDied);
  EXPECT_THAT(error.message(), HasSubstr("It ran 2 time(s)"));
  EXPECT_THAT(error.message(), HasSubstr("raise SetMaxRetries()"));
}

TEST_F(TaskLifecycleTest, AnErrorFromTheFunctionFailsTheTask) {
  auto t = Submit("t");
  proto::TaskResult result;
  result.set_ok(false);
  result.set_error("bad input");
  result.set_error_type("std::runtime_error");
  lifecycle_.TaskReplied("t", "n7", result);
  absl::Status error;
  EXPECT_EQ(StateOf("t", &error), OwnedObjects::State::kFailed);
  EXPECT_THAT(error.message(), HasSubstr("bad input"));
}

TEST_F(TaskLifecycleTest, ActorCallsGoToTheirActorAndAreDroppedOnFailure) {
  auto c = Submit("c1", {}, 0, "actor-1");
  EXPECT_THAT(ready_, ElementsAre("actor-1/c1"));
  EXPECT_TRUE(queued_.empty());
  lifecycle_.CallFailed("c1", ErrorKind::kActorDied, "the actor died");
  EXPECT_THAT(dropped_, ElementsAre("actor-1/c1"));
  absl::Status error;
  EXPECT_EQ(StateOf("c1", &error), OwnedObjects::State::kFailed);
  EXPECT_EQ(KindOf(error), ErrorKind::kActorDied);
  EXPECT_THAT(error.message(), HasSubstr("call fn_c1 (c1) failed"));
}

TEST_F(TaskLifecycleTest, AnUnresolvableArgumentFailsOnTheNextTurn) {
  auto released = objects_.NewHandle("gone");  // no such object
  TaskArg ref;
  ref.ref = released;
  auto t = Submit("t", {ref});
  EXPECT_EQ(StateOf("t"), OwnedObjects::State::kPending);
  ASSERT_EQ(posted_.size(), 1u);
  posted_[0]();
  EXPECT_EQ(StateOf("t"), OwnedObjects::State::kFailed);
}

TEST_F(TaskLifecycleTest, StoredArgumentsMakeTheWorkersNodeASource) {
  auto a = Submit("a");
  proto::TaskResult stored;
  stored.set_ok(true);
  proto::StoredObject* so = stored.mutable_stored();
  so->set_object_id("a");
  so->set_data_size(4096);
  so->add_sources()->set_node_id("n1");
  lifecycle_.TaskReplied("a", "n1", stored);
  TaskArg ref;
  ref.ref = a;
  auto b = Submit("b", {ref});
  proto::TaskSpec spec;
  ASSERT_TRUE(lifecycle_.FillSpec("b", "n2", "w", &spec));
  ASSERT_EQ(spec.stored_args().count(0), 1u);
  EXPECT_EQ(objects_.StoredObjectOf("a").sources_size(), 2);
}

TEST_F(TaskLifecycleTest, TakeAllHandsOverWhatIsLeft) {
  auto a = Submit("a");
  auto b = Submit("b");
  TaskLifecycle::Taken taken = lifecycle_.TakeAll();
  EXPECT_EQ(taken.tasks.size(), 2u);
  EXPECT_EQ(lifecycle_.size(), 0u);
}

}  // namespace
}  // namespace shoal::internal
