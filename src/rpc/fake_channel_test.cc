// The in-memory RPC fakes behave as the tests that use them rely on: replies
// come on a later turn, held replies wait, lost connections and deadlines
// fail calls as the TCP channel does.
#include "rpc/fake_channel.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shoal/shoal.pb.h"

namespace shoal::rpc {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kEcho = 7;
constexpr int kHold = 8;

class FakeChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    peer_ = network_.Listen("peer:1");
    peer_->Register(kEcho, [](std::string_view payload, Responder r) {
      r.ReplyRaw(std::string(payload));
    });
    peer_->Register(
        kHold, [this](std::string_view, Responder r) { held_.push_back(r); });
    channel_ = network_.Connect("peer:1");
  }

  // Calls `method` and records its outcome in `out` once it comes.
  void Call(Channel* channel, int method, std::string payload,
            std::optional<absl::StatusOr<std::string>>* out,
            int64_t timeout_ms = 0) {
    channel->Call(
        method, std::move(payload),
        [out](absl::StatusOr<std::string> reply) { *out = std::move(reply); },
        timeout_ms);
  }

  ManualExecutor executor_;
  FakeNetwork network_{&executor_, "tester"};
  FakePeer* peer_ = nullptr;
  std::vector<Responder> held_;
  std::unique_ptr<Channel> channel_;
};

TEST_F(FakeChannelTest, ReplyComesOnALaterTurnNeverInsideTheCall) {
  std::optional<absl::StatusOr<std::string>> reply;
  Call(channel_.get(), kEcho, "hello", &reply);
  EXPECT_FALSE(reply.has_value());
  EXPECT_EQ(channel_->pending_calls(), 1u);
  executor_.RunUntilIdle();
  ASSERT_TRUE(reply.has_value());
  ASSERT_TRUE(reply->ok()) << reply->status();
  EXPECT_EQ(**reply, "hello");
  EXPECT_EQ(channel_->pending_calls(), 0u);
  EXPECT_TRUE(channel_->connected());
  EXPECT_EQ(peer_->requests(kEcho), 1);
}

TEST_F(FakeChannelTest, AHeldReplyWaitsUntilTheTestReleasesIt) {
  std::optional<absl::StatusOr<std::string>> reply;
  Call(channel_.get(), kHold, "x", &reply);
  executor_.RunUntilIdle();
  ASSERT_EQ(held_.size(), 1u);
  EXPECT_FALSE(reply.has_value());
  EXPECT_TRUE(held_[0].connected());
  EXPECT_EQ(held_[0].peer(), "tester");
  proto::Empty empty;
  held_[0].Reply(empty);
  executor_.RunUntilIdle();
  ASSERT_TRUE(reply.has_value());
  EXPECT_TRUE(reply->ok());
}

TEST_F(FakeChannelTest, ErrorsArriveWithTheirCode) {
  peer_->Register(9, [](std::string_view, Responder r) {
    r.Error(absl::NotFoundError("no such thing"));
  });
  std::optional<absl::StatusOr<std::string>> reply, unknown;
  Call(channel_.get(), 9, "", &reply);
  Call(channel_.get(), 99, "", &unknown);
  executor_.RunUntilIdle();
  EXPECT_EQ(reply->status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(reply->status().message(), "no such thing");
  EXPECT_EQ(unknown->status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(unknown->status().message(), HasSubstr("method 99"));
}

TEST_F(FakeChannelTest, NobodyListeningIsRefusedAndNeverSent) {
  std::unique_ptr<Channel> nowhere = network_.Connect("nobody:1");
  bool told = false;
  nowhere->OnDisconnect([&](const absl::Status&) { told = true; });
  std::optional<absl::StatusOr<std::string>> reply;
  Call(nowhere.get(), kEcho, "x", &reply);
  executor_.RunUntilIdle();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(NeverSent(reply->status()));
  EXPECT_THAT(reply->status().message(), HasSubstr("nobody:1"));
  EXPECT_FALSE(told);  // it never connected
}

TEST_F(FakeChannelTest, APeerThatDiesMidCallFailsItAndRefusesTheNext) {
  bool told = false;
  channel_->OnDisconnect([&](const absl::Status& why) {
    told = true;
    EXPECT_EQ(why.code(), absl::StatusCode::kUnavailable);
  });
  std::optional<absl::StatusOr<std::string>> reply;
  Call(channel_.get(), kHold, "x", &reply);
  executor_.RunUntilIdle();
  ASSERT_EQ(held_.size(), 1u);
  network_.Kill("peer:1");
  EXPECT_FALSE(held_[0].connected());
  executor_.RunUntilIdle();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(NeverSent(reply->status()));  // it had reached the peer
  EXPECT_THAT(reply->status().message(), HasSubstr("closed by the peer"));
  EXPECT_TRUE(told);
  // Its reply, if it comes anyway, goes nowhere.
  held_[0].ReplyRaw("late");
  executor_.RunUntilIdle();
  std::optional<absl::StatusOr<std::string>> next;
  Call(channel_.get(), kEcho, "y", &next);
  executor_.RunUntilIdle();
  EXPECT_TRUE(NeverSent(next->status()));
}

TEST_F(FakeChannelTest, ABrokenConnectionIsMadeAgainByTheNextCall) {
  std::optional<absl::StatusOr<std::string>> first;
  Call(channel_.get(), kHold, "x", &first);
  executor_.RunUntilIdle();
  network_.Break("peer:1");
  executor_.RunUntilIdle();
  EXPECT_EQ(first->status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(peer_->connections(), 0u);
  std::optional<absl::StatusOr<std::string>> second;
  Call(channel_.get(), kEcho, "again", &second);
  executor_.RunUntilIdle();
  ASSERT_TRUE(second->ok()) << second->status();
  EXPECT_EQ(**second, "again");
  EXPECT_EQ(peer_->connections(), 1u);
}

TEST_F(FakeChannelTest, DeadlinesFailWithTheRealChannelsWords) {
  std::optional<absl::StatusOr<std::string>> reply;
  Call(channel_.get(), kHold, "x", &reply, /*timeout_ms=*/1000);
  executor_.AdvanceMs(999);
  EXPECT_FALSE(reply.has_value());
  executor_.AdvanceMs(1);
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(reply->status().message(), "no reply from peer:1 within 1000 ms");
  // The reply that comes after the deadline is dropped.
  held_[0].ReplyRaw("late");
  executor_.RunUntilIdle();
  EXPECT_EQ(reply->status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(FakeChannelTest, ADestroyedChannelNeverCallsBack) {
  bool called = false;
  channel_->Call(kEcho, "x",
                 [&](absl::StatusOr<std::string>) { called = true; });
  channel_.reset();
  executor_.RunUntilIdle();
  EXPECT_FALSE(called);
}

TEST_F(FakeChannelTest, CloseFailsTheCallsInFlight) {
  std::optional<absl::StatusOr<std::string>> reply;
  Call(channel_.get(), kHold, "x", &reply);
  executor_.RunUntilIdle();
  channel_->Close();
  // At once, as the TCP channel does.
  ASSERT_TRUE(reply.has_value());
  EXPECT_FALSE(channel_->connected());
  EXPECT_EQ(reply->status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(held_[0].connected());
}

TEST(ManualExecutorTest, TimersRunInDeadlineOrderAsTheClockMoves) {
  ManualExecutor executor;
  std::vector<std::string> ran;
  int64_t start = executor.NowUs();
  executor.RunAfter(30, [&] { ran.push_back("30"); });
  uint64_t canceled = executor.RunAfter(20, [&] { ran.push_back("20"); });
  executor.RunAfter(10, [&] {
    ran.push_back("10");
    executor.Post([&] { ran.push_back("posted by 10"); });
  });
  executor.CancelTimer(canceled);
  executor.AdvanceMs(15);
  EXPECT_THAT(ran, ElementsAre("10", "posted by 10"));
  EXPECT_EQ(executor.NowUs(), start + 15000);
  executor.AdvanceMs(15);
  EXPECT_THAT(ran, ElementsAre("10", "posted by 10", "30"));
  EXPECT_EQ(executor.pending_timers(), 0u);
}

}  // namespace
}  // namespace shoal::rpc
