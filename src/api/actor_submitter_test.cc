// ActorSubmitter against a fake runtime (the delegate) and fake actors: peers
// of an in-memory network (rpc/fake_channel.h) that answer PUSH_TASK as a
// worker would. Everything runs on the test's thread.
#include "api/actor_submitter.h"

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/driver_warnings.h"
#include "api/fake_worker_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/fake_channel.h"
#include "rpc/rpc.h"

namespace shoal::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class FakeRuntime : public ActorSubmitter::Delegate {
 public:
  explicit FakeRuntime(rpc::FakeNetwork* network) : network_(network) {}

  bool BuildCall(const std::string& task_id, const std::string&,
                 proto::TaskSpec* spec) override {
    spec->set_task_id(task_id);
    return true;
  }
  void CallReplied(const std::string& task_id, const std::string&,
                   proto::TaskResult result) override {
    outcomes[task_id] = "ok:" + result.value();
  }
  void CallFailed(const std::string& task_id, ActorSubmitter::Failure failure,
                  const std::string& message) override {
    outcomes[task_id] = absl::StrCat(
        failure == ActorSubmitter::Failure::kInfeasible ? "infeasible:"
                                                        : "died:",
        message);
  }
  // The head: answers from `infos` in order; an empty queue keeps the
  // request (a long poll) until Publish().
  void GetActor(
      const proto::GetActorRequest& request,
      std::function<void(absl::StatusOr<proto::ActorInfo>)> done) override {
    requests.push_back(request);
    if (!infos.empty()) {
      auto next = std::move(infos.front());
      infos.pop_front();
      return done(std::move(next));
    }
    polls.push_back(std::move(done));
  }
  std::unique_ptr<rpc::Channel> ConnectTo(const std::string& address) override {
    return network_->Connect(address);
  }

  // Answers the waiting long polls with `info`.
  void Publish(const proto::ActorInfo& info) {
    auto waiting = std::move(polls);
    polls.clear();
    for (auto& done : waiting) done(info);
  }

  std::map<std::string, std::string> outcomes;
  std::deque<absl::StatusOr<proto::ActorInfo>> infos;
  std::vector<proto::GetActorRequest> requests;
  std::vector<std::function<void(absl::StatusOr<proto::ActorInfo>)>> polls;

 private:
  rpc::FakeNetwork* network_;
};

proto::ActorInfo Info(proto::ActorInfo::State state, const std::string& address,
                      int64_t version, int max_task_retries = 0) {
  proto::ActorInfo info;
  info.mutable_spec()->set_actor_id("a1");
  info.mutable_spec()->set_name("counter");
  info.mutable_spec()->set_class_name("Counter");
  info.mutable_spec()->set_max_task_retries(max_task_retries);
  info.set_state(state);
  info.set_address(address);
  info.set_node_id("node-1");
  info.set_version(version);
  return info;
}

class ActorSubmitterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    runtime_ = std::make_unique<FakeRuntime>(&network_);
    submitter_ = std::make_unique<ActorSubmitter>(&executor_, runtime_.get());
    actor_ = NewWorker();
  }
  void TearDown() override {
    submitter_.reset();
    executor_.RunUntilIdle();
  }

  // Runs `fn`, then what it set going until nothing is left to run.
  void Run(const std::function<void()>& fn) {
    fn();
    executor_.RunUntilIdle();
  }
  // Whether `check` holds once what is under way has run.
  bool Settled(const std::function<bool()>& check) {
    executor_.RunUntilIdle();
    return check();
  }
  std::unique_ptr<FakeWorker> NewWorker() {
    return std::make_unique<FakeWorker>(
        &network_, absl::StrCat("127.0.0.1:", next_port_++));
  }
  void Submit(const std::string& task, bool ready = true) {
    Run([&] {
      submitter_->Add("a1", task);
      if (ready) submitter_->Ready("a1", task);
    });
  }
  std::string Outcome(const std::string& task) {
    std::string out;
    Run([&] {
      auto it = runtime_->outcomes.find(task);
      if (it != runtime_->outcomes.end()) out = it->second;
    });
    return out;
  }

  rpc::ManualExecutor executor_;
  rpc::FakeNetwork network_{&executor_, "caller"};
  int next_port_ = 7000;
  std::unique_ptr<FakeRuntime> runtime_;
  std::unique_ptr<ActorSubmitter> submitter_;
  std::unique_ptr<FakeWorker> actor_;
  std::unique_ptr<FakeWorker> second_;
};

TEST_F(ActorSubmitterTest, CallsLeaveInSubmissionOrderOnceReady) {
  Run([&] {
    runtime_->infos.push_back(
        Info(proto::ActorInfo::ALIVE, actor_->address(), 1));
  });
  Submit("t1", /*ready=*/false);
  Submit("t2");
  Submit("t3");
  // t2 and t3 wait behind t1, whose argument is not resolved yet.
  Run([&] { EXPECT_THAT(actor_->seen, IsEmpty()); });
  Run([&] { submitter_->Ready("a1", "t1"); });
  ASSERT_TRUE(Settled([&] { return runtime_->outcomes.size() == 3; }));
  Run([&] { EXPECT_THAT(actor_->seen, ElementsAre("t1", "t2", "t3")); });
  EXPECT_EQ(Outcome("t2"), "ok:t2");
}

// Ray's excess queueing warning: past 5,000 calls outstanding to one actor,
// then past 10,000, and so on; once each.
TEST_F(ActorSubmitterTest, ThousandsOfCallsQueuedWarnTheDriverAsTheyDouble) {
  TakeWarnings();
  Run([&] {
    for (int i = 0; i <= 10000; ++i) {
      submitter_->Add("a1", absl::StrCat("t", i));
    }
  });
  auto warnings = TakeWarnings();
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_EQ(warnings[0].first, "excess_queueing_warning");
  EXPECT_THAT(warnings[0].second,
              HasSubstr("More than 5000 tasks are pending submission to "
                        "actor a1"));
  EXPECT_THAT(warnings[1].second, HasSubstr("More than 10000 tasks"));
  Run([&] { submitter_->Add("a1", "one-more"); });
  EXPECT_THAT(TakeWarnings(), IsEmpty());
}

TEST_F(ActorSubmitterTest, PendingActorHoldsCallsUntilItIsAlive) {
  Run([&] {
    runtime_->infos.push_back(Info(proto::ActorInfo::PENDING, "", 1));
  });
  Submit("t1");
  ASSERT_TRUE(Settled([&] { return runtime_->polls.size() == 1; }));
  Run([&] {
    // The second question is a long poll past the version it knows.
    EXPECT_EQ(runtime_->requests.back().after_version(), 1);
    EXPECT_GT(runtime_->requests.back().wait_ms(), 0);
    runtime_->Publish(Info(proto::ActorInfo::ALIVE, actor_->address(), 2));
  });
  ASSERT_TRUE(Settled([&] { return !Outcome("t1").empty(); }));
  EXPECT_EQ(Outcome("t1"), "ok:t1");
}

TEST_F(ActorSubmitterTest, UnknownActorFailsEveryCall) {
  Run([&] { runtime_->infos.push_back(absl::NotFoundError("no actor a1")); });
  Submit("t1");
  Submit("t2", /*ready=*/false);
  ASSERT_TRUE(Settled([&] { return runtime_->outcomes.size() == 2; }));
  EXPECT_THAT(Outcome("t1"), HasSubstr("died:no actor a1"));
  // And later calls at once.
  Submit("t3", /*ready=*/false);
  ASSERT_TRUE(Settled([&] { return !Outcome("t3").empty(); }));
  EXPECT_THAT(Outcome("t3"), HasSubstr("died:"));
}

TEST_F(ActorSubmitterTest, InfeasibleActorFailsCallsAsInfeasible) {
  proto::ActorInfo dead = Info(proto::ActorInfo::DEAD, "", 2);
  dead.set_infeasible(true);
  dead.set_death_cause("no node has 1 no_such_thing");
  Run([&] { runtime_->infos.push_back(dead); });
  Submit("t1");
  ASSERT_TRUE(Settled([&] { return !Outcome("t1").empty(); }));
  EXPECT_THAT(Outcome("t1"), HasSubstr("infeasible:actor counter (Counter"));
  EXPECT_THAT(Outcome("t1"), HasSubstr("no node has 1 no_such_thing"));
}

TEST_F(ActorSubmitterTest, RestartResendsCallsWithRetriesAndFailsTheRest) {
  Run([&] {
    runtime_->infos.push_back(Info(proto::ActorInfo::ALIVE, actor_->address(),
                                   1, /*max_task_retries=*/1));
  });
  Submit("hold-1");
  Submit("hold-2");
  ASSERT_TRUE(Settled([&] { return actor_->seen.size() == 2; }));
  // Behind them, waiting on an argument until the process has died (were it
  // ready now, the first process could answer it before the death).
  Submit("t3", /*ready=*/false);
  // The process dies with the calls in flight: the submitter asks the head.
  Run([&] { actor_->Die(); });
  ASSERT_TRUE(Settled([&] { return runtime_->polls.size() == 1; }));
  Run([&] { submitter_->Ready("a1", "t3"); });
  Run([&] {
    second_ = NewWorker();
    proto::ActorInfo restarting = Info(proto::ActorInfo::RESTARTING, "", 2, 1);
    runtime_->Publish(restarting);
  });
  ASSERT_TRUE(Settled([&] { return runtime_->polls.size() == 1; }));
  Run([&] {
    proto::ActorInfo alive =
        Info(proto::ActorInfo::ALIVE, second_->address(), 3, 1);
    alive.set_death_cause("killed by signal 9 (Killed)");
    alive.set_num_restarts(1);
    runtime_->Publish(alive);
  });
  // Sent again, in order, ahead of the call that waited.
  ASSERT_TRUE(Settled([&] { return second_->seen.size() == 3; }));
  Run([&] {
    EXPECT_THAT(second_->seen, ElementsAre("hold-1", "hold-2", "t3"));
  });
  // Their retries are spent: a second death fails them, naming the cause.
  Run([&] { second_->Die(); });
  ASSERT_TRUE(Settled([&] { return runtime_->polls.size() == 1; }));
  Run([&] {
    auto third = NewWorker();
    proto::ActorInfo alive =
        Info(proto::ActorInfo::ALIVE, third->address(), 5, 1);
    alive.set_death_cause("killed by signal 9 (Killed)");
    runtime_->Publish(alive);
    actor_ = std::move(third);
  });
  ASSERT_TRUE(Settled([&] { return runtime_->outcomes.size() == 3; }));
  EXPECT_THAT(Outcome("hold-1"), HasSubstr("killed by signal 9"));
  EXPECT_THAT(Outcome("hold-1"), HasSubstr("SetMaxTaskRetries"));
  EXPECT_EQ(Outcome("t3"), "ok:t3");
}

TEST_F(ActorSubmitterTest, DeathFailsQueuedAndInFlightCalls) {
  Run([&] {
    runtime_->infos.push_back(
        Info(proto::ActorInfo::ALIVE, actor_->address(), 1));
  });
  Submit("hold-1");
  Submit("t2", /*ready=*/false);
  ASSERT_TRUE(Settled([&] { return actor_->seen.size() == 1; }));
  Run([&] { actor_->Die(); });
  ASSERT_TRUE(Settled([&] { return runtime_->polls.size() == 1; }));
  Run([&] {
    proto::ActorInfo dead = Info(proto::ActorInfo::DEAD, "", 2);
    dead.set_death_cause(
        "its process died (killed by signal 9 (Killed)) and its restarts are "
        "used up (max_restarts=0)");
    runtime_->Publish(dead);
  });
  ASSERT_TRUE(Settled([&] { return runtime_->outcomes.size() == 2; }));
  EXPECT_THAT(Outcome("hold-1"), HasSubstr("restarts are used up"));
  EXPECT_THAT(Outcome("t2"), HasSubstr("died:actor counter"));
  Run([&] { EXPECT_EQ(submitter_->Outstanding("a1"), 0u); });
}

// Killed here without a restart: calls in flight, queued and later fail at
// once, though the actor's worker is still there to answer them.
TEST_F(ActorSubmitterTest, AKillFailsCallsWhileTheWorkerStillAnswers) {
  runtime_->infos.push_back(
      Info(proto::ActorInfo::ALIVE, actor_->address(), 1));
  Submit("t1");
  EXPECT_EQ(Outcome("t1"), "ok:t1");
  Submit("hold-2");
  Submit("t3", /*ready=*/false);
  ASSERT_EQ(actor_->held.size(), 1u);
  Run([&] { submitter_->Killed("a1"); });
  EXPECT_THAT(Outcome("hold-2"), HasSubstr("died:actor counter"));
  EXPECT_THAT(Outcome("t3"), HasSubstr("killed by shoal::Kill"));
  Submit("t4");
  EXPECT_THAT(Outcome("t4"), HasSubstr("killed by shoal::Kill"));
  proto::TaskResult late;
  late.set_ok(true);
  late.set_value("late");
  Run([&] { actor_->held[0].Reply(late); });
  EXPECT_THAT(Outcome("hold-2"), HasSubstr("died:"));
  EXPECT_EQ(actor_->seen.size(), 2u);
  // The head's later word (dead) changes nothing.
  Run([&] { runtime_->Publish(Info(proto::ActorInfo::DEAD, "", 2)); });
  EXPECT_THAT(Outcome("t4"), HasSubstr("killed by shoal::Kill"));
  Run([&] { EXPECT_EQ(submitter_->Outstanding("a1"), 0u); });
}

// A kill of an actor this process never called: its first call fails.
TEST_F(ActorSubmitterTest, AKillBeforeAnyCallFailsTheFirst) {
  Run([&] { submitter_->Killed("a1"); });
  Submit("t1");
  EXPECT_THAT(Outcome("t1"), HasSubstr("died:actor a1 is dead: killed"));
  EXPECT_TRUE(runtime_->requests.empty());
}

// The head could not be asked: it is asked again 200 ms later.
TEST_F(ActorSubmitterTest, AHeadThatCannotBeAskedIsAskedAgainShortly) {
  runtime_->infos.push_back(absl::UnavailableError("the head is restarting"));
  runtime_->infos.push_back(
      Info(proto::ActorInfo::ALIVE, actor_->address(), 1));
  Submit("t1");
  EXPECT_EQ(runtime_->requests.size(), 1u);
  executor_.AdvanceMs(199);
  EXPECT_EQ(runtime_->requests.size(), 1u);
  executor_.AdvanceMs(1);
  ASSERT_EQ(runtime_->requests.size(), 2u);
  EXPECT_EQ(Outcome("t1"), "ok:t1");
}

// A call's answer that comes after the submitter shut down reaches nobody.
TEST_F(ActorSubmitterTest, AnAnswerAfterShutdownIsDropped) {
  runtime_->infos.push_back(
      Info(proto::ActorInfo::ALIVE, actor_->address(), 1));
  Submit("hold-1");
  ASSERT_EQ(actor_->held.size(), 1u);
  Run([&] { submitter_->Shutdown(); });
  proto::TaskResult result;
  result.set_ok(true);
  result.set_value("late");
  Run([&] { actor_->held[0].Reply(result); });
  EXPECT_TRUE(runtime_->outcomes.empty());
  EXPECT_EQ(submitter_->Outstanding("a1"), 0u);
}

}  // namespace
}  // namespace shoal::internal
