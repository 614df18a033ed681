// ActorWaiters: each long poll is answered once, by a change or by its
// wait running out on the loop's clock.
#include "head/actor_waiters.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/fake_channel.h"
#include "shoal/shoal.pb.h"

namespace shoal {
namespace {

using ::testing::ElementsAre;

constexpr int kPoll = 16;

// A poller: a channel whose calls a peer hands to ActorWaiters.
class ActorWaitersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    network_.Listen("head:1")->Register(
        kPoll, [this](std::string_view payload, rpc::Responder r) {
          std::string request(payload);
          waiters_.Wait(request.substr(0, request.find('/')),
                        std::stoll(request.substr(request.find('/') + 1)),
                        std::move(r));
        });
    channel_ = network_.Connect("head:1");
  }
  // Polls `actor` for `wait_ms`; the answer lands in `answers` by `name`.
  void Poll(const std::string& name, const std::string& actor,
            int64_t wait_ms) {
    channel_->Call(
        kPoll, actor + "/" + std::to_string(wait_ms),
        [this, name](absl::StatusOr<std::string> reply) {
          answers_.push_back(name + "=" + (reply.ok() ? *reply : "error"));
        });
    executor_.RunUntilIdle();
  }

  rpc::ManualExecutor executor_;
  rpc::FakeNetwork network_{&executor_};
  ActorWaiters waiters_{&executor_,
                        [](const std::string& actor, rpc::Responder r) {
                          r.ReplyRaw("expired:" + actor);
                        }};
  std::unique_ptr<rpc::Channel> channel_;
  std::vector<std::string> answers_;
};

TEST_F(ActorWaitersTest, AChangeAnswersEveryWaiterOfTheActorOnce) {
  Poll("p1", "a1", 20000);
  Poll("p2", "a1", 20000);
  Poll("p3", "a2", 20000);
  EXPECT_EQ(waiters_.waiting("a1"), 2u);
  waiters_.Wake("a1", [](rpc::Responder r) { r.ReplyRaw("changed"); });
  executor_.RunUntilIdle();
  EXPECT_THAT(answers_, ElementsAre("p1=changed", "p2=changed"));
  EXPECT_EQ(waiters_.waiting("a1"), 0u);
  EXPECT_EQ(waiters_.waiting("a2"), 1u);
  // Their timers went with them.
  executor_.AdvanceMs(20000);
  EXPECT_THAT(answers_,
              ElementsAre("p1=changed", "p2=changed", "p3=expired:a2"));
}

TEST_F(ActorWaitersTest, AWaitThatRunsOutIsAnsweredThen) {
  Poll("short", "a1", 300);
  Poll("long", "a1", 5000);
  executor_.AdvanceMs(299);
  EXPECT_TRUE(answers_.empty());
  executor_.AdvanceMs(1);
  EXPECT_THAT(answers_, ElementsAre("short=expired:a1"));
  EXPECT_EQ(waiters_.waiting("a1"), 1u);
  waiters_.Wake("nobody", [](rpc::Responder r) { r.ReplyRaw("x"); });
  executor_.RunUntilIdle();
  EXPECT_EQ(answers_.size(), 1u);
}

TEST(ActorWaitersLifetimeTest, TimersOfWaitersLeftAreCanceled) {
  rpc::ManualExecutor executor;
  {
    ActorWaiters waiters(&executor, [](const std::string&, rpc::Responder) {
      ADD_FAILURE() << "a waiter expired after its waiters were destroyed";
    });
    waiters.Wait("a1", 100, rpc::Responder());
    EXPECT_EQ(executor.pending_timers(), 1u);
  }
  EXPECT_EQ(executor.pending_timers(), 0u);
  executor.AdvanceMs(100);
}

}  // namespace
}  // namespace shoal
