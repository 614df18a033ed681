// HeadClient alone, against a head played by a peer in memory
// (rpc/fake_channel.h) on a real loop: each typed call names its method and
// carries its request, replies and errors come back typed, and a lost or
// closed connection fails calls as callers expect. The head's own answers
// are checked end to end in tests/integration/head_client_integration_test.
#include "head_client/head_client.h"

#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/event_loop.h"
#include "rpc/fake_channel.h"
#include "rpc/rpc.h"
#include "shoal/shoal.pb.h"

namespace shoal::rpc {
namespace {

using ::testing::HasSubstr;

constexpr char kHead[] = "head.example:6379";

class HeadClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto loop = EventLoop::Create("head-client");
    ASSERT_TRUE(loop.ok()) << loop.status();
    loop_ = std::move(*loop);
    // The fakes live on the loop: set up before it has work, then used there
    // only.
    network_ = std::make_unique<FakeNetwork>(loop_.get(), "head client test");
    head_ = network_->Listen(kHead);
    RegisterProto<proto::KvPutRequest>(
        head_, proto::KV_PUT,
        [this](const proto::KvPutRequest& r, Responder resp) {
          puts_.push_back(r);
          proto::KvPutReply reply;
          reply.set_added(r.key() != "taken");
          resp.Reply(reply);
        });
    RegisterProto<proto::GetActorRequest>(
        head_, proto::GET_ACTOR,
        [](const proto::GetActorRequest& r, Responder resp) {
          if (r.actor_id() != "a1") {
            return resp.Error(absl::NotFoundError("no actor " + r.actor_id()));
          }
          proto::ActorInfo info;
          info.mutable_spec()->set_actor_id("a1");
          info.set_state(proto::ActorInfo::ALIVE);
          resp.Reply(info);
        });
    head_->Register(proto::KV_GET, [](std::string_view, Responder resp) {
      resp.ReplyRaw("\xff\xff\xff not a message");
    });
    head_->Register(proto::GET_CLUSTER_STATUS,
                    [this](std::string_view, Responder resp) {
                      held_.push_back(resp);
                      if (held_.size() == 1) first_held_.set_value();
                    });
    client_ =
        std::make_unique<HeadClient>(loop_.get(), network_->Connect(kHead));
  }

  void TearDown() override {
    client_.reset();
    loop_->RunSync([&] {
      held_.clear();
      network_.reset();
    });
    loop_->Stop();
  }

  template <typename Reply>
  absl::StatusOr<Reply> OnLoop(
      std::function<void(HeadClient::Callback<Reply>)> call) {
    return RunOnLoopAndWait<absl::StatusOr<Reply>>(
        loop_.get(),
        [&](HeadClient::Callback<Reply> done) { call(std::move(done)); });
  }
  // Blocks until the head holds its first call of GET_CLUSTER_STATUS.
  void WaitForAHeldCall() { first_held_.get_future().wait(); }

  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<FakeNetwork> network_;  // loop thread
  FakePeer* head_ = nullptr;
  std::vector<proto::KvPutRequest> puts_;  // loop thread
  std::vector<Responder> held_;            // loop thread
  std::promise<void> first_held_;
  std::unique_ptr<HeadClient> client_;
};

TEST_F(HeadClientTest, ACallCarriesItsRequestAndBringsItsReplyTyped) {
  proto::KvPutRequest put;
  put.set_key("launch/7/port");
  put.set_value("29500");
  absl::StatusOr<proto::KvPutReply> added = client_->KvPut(put);
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_TRUE(added->added());
  put.set_key("taken");
  absl::StatusOr<proto::KvPutReply> kept = client_->KvPut(put);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_FALSE(kept->added());
  loop_->RunSync([&] {
    ASSERT_EQ(puts_.size(), 2u);
    EXPECT_EQ(puts_[0].key(), "launch/7/port");
    EXPECT_EQ(puts_[0].value(), "29500");
    EXPECT_EQ(head_->requests(proto::KV_PUT), 2);
  });
  EXPECT_EQ(client_->address(), kHead);
}

TEST_F(HeadClientTest, TheHeadsErrorsArriveWithTheirCodesInBothForms) {
  proto::GetActorRequest req;
  req.set_actor_id("a1");
  absl::StatusOr<proto::ActorInfo> found = client_->GetActor(req);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->state(), proto::ActorInfo::ALIVE);

  req.set_actor_id("nobody");
  absl::StatusOr<proto::ActorInfo> blocking = client_->GetActor(req);
  EXPECT_EQ(blocking.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(blocking.status().message(), "no actor nobody");
  absl::StatusOr<proto::ActorInfo> async = OnLoop<proto::ActorInfo>(
      [&](auto done) { client_->GetActor(req, std::move(done)); });
  EXPECT_EQ(async.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(HeadClientTest, AReplyThatDoesNotParseIsDataLoss) {
  proto::KvGetRequest get;
  get.set_key("k");
  absl::StatusOr<proto::KvGetReply> reply = client_->KvGet(get);
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(reply.status().message(), HasSubstr("malformed reply"));
}

TEST_F(HeadClientTest, AMethodTheHeadDoesNotServeIsUnimplemented) {
  absl::StatusOr<proto::GangList> gangs = client_->ListGangs();
  EXPECT_EQ(gangs.status().code(), absl::StatusCode::kUnimplemented);
}

TEST_F(HeadClientTest, NoReplyInTimeIsDeadlineExceeded) {
  absl::StatusOr<proto::ClusterStatus> status = client_->ClusterStatus(1);
  EXPECT_EQ(status.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.status().message(), HasSubstr(kHead));
}

// The head dies while a call waits for it: the call fails Unavailable, the
// client hears of the lost connection, and later calls fail at once.
TEST_F(HeadClientTest, AHeadThatDiesMidCallFailsItAndTheCallsAfter) {
  absl::Status lost;
  loop_->RunSync(
      [&] { client_->OnDisconnect([&](const absl::Status& s) { lost = s; }); });
  absl::StatusOr<proto::ClusterStatus> in_flight;
  std::thread caller([&] { in_flight = client_->ClusterStatus(60000); });
  WaitForAHeldCall();
  loop_->RunSync([&] { network_->Kill(kHead); });
  caller.join();
  EXPECT_EQ(in_flight.status().code(), absl::StatusCode::kUnavailable)
      << in_flight.status();
  EXPECT_FALSE(NeverSent(in_flight.status()));
  loop_->RunSync(
      [&] { EXPECT_EQ(lost.code(), absl::StatusCode::kUnavailable); });
  proto::KvGetRequest get;
  absl::StatusOr<proto::KvGetReply> later = client_->KvGet(get);
  EXPECT_EQ(later.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(NeverSent(later.status()));
}

TEST_F(HeadClientTest, AClosedClientFailsItsCallsInFlightAndCancelsLaterOnes) {
  absl::StatusOr<proto::ClusterStatus> in_flight;
  std::thread caller([&] { in_flight = client_->ClusterStatus(60000); });
  WaitForAHeldCall();
  loop_->RunSync([&] { client_->Close(); });
  caller.join();
  EXPECT_EQ(in_flight.status().code(), absl::StatusCode::kUnavailable)
      << in_flight.status();
  absl::StatusOr<proto::ClusterStatus> later = client_->ClusterStatus();
  EXPECT_EQ(later.status().code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(later.status().message(), HasSubstr("closed"));
}

TEST_F(HeadClientTest, BlockingCallsFromManyUserThreads) {
  constexpr int kThreads = 4;
  std::vector<absl::Status> results(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      proto::KvPutRequest put;
      put.set_key(absl::StrCat("thread/", i));
      absl::StatusOr<proto::KvPutReply> added = client_->KvPut(put);
      results[i] = added.ok() && added->added()
                       ? absl::OkStatus()
                       : absl::InternalError(added.status().ToString());
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& st : results) EXPECT_TRUE(st.ok()) << st;
  loop_->RunSync([&] { EXPECT_EQ(puts_.size(), 4u); });
}

}  // namespace
}  // namespace shoal::rpc
