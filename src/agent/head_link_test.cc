#include "agent/head_link.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "agent/agent_testing.h"
#include "gtest/gtest.h"

namespace shoal::agent {
namespace {

// A head in memory: every call waits in its list until the test answers it.
class FakeHead : public HeadCalls {
 public:
  template <typename Request, typename Reply>
  struct Call {
    Request request;
    Done<Reply> done;
    int64_t timeout_ms = 0;
  };

  void RegisterNode(const proto::RegisterNodeRequest& request,
                    Done<proto::RegisterNodeReply> done,
                    int64_t timeout_ms) override {
    registers.push_back({request, std::move(done), timeout_ms});
  }
  void Heartbeat(const proto::HeartbeatRequest& request,
                 Done<proto::HeartbeatReply> done,
                 int64_t timeout_ms) override {
    beats.push_back({request, std::move(done), timeout_ms});
  }
  void UnregisterNode(const proto::UnregisterNodeRequest& request,
                      Done<proto::Empty> done, int64_t timeout_ms) override {
    unregisters.push_back({request, std::move(done), timeout_ms});
  }
  void JobEvent(const proto::JobEvent& event,
                Done<proto::Empty> done) override {
    jobs.push_back({event, std::move(done), 0});
  }
  void GetBlobChunk(const proto::GetBlobChunkRequest& request,
                    Done<proto::BlobChunk> done, int64_t timeout_ms) override {
    chunks.push_back({request, std::move(done), timeout_ms});
  }
  void GetPlacementGroup(const proto::GetPlacementGroupRequest& request,
                         Done<proto::PlacementGroupInfo> done,
                         int64_t timeout_ms) override {
    groups.push_back({request, std::move(done), timeout_ms});
  }
  // As rpc::HeadClient does: the calls in flight fail now.
  void Close() override {
    ++closed;
    auto beats_left = std::move(beats);
    for (auto& c : beats_left) c.done(absl::UnavailableError("closed"));
  }

  std::vector<Call<proto::RegisterNodeRequest, proto::RegisterNodeReply>>
      registers;
  std::vector<Call<proto::HeartbeatRequest, proto::HeartbeatReply>> beats;
  std::vector<Call<proto::UnregisterNodeRequest, proto::Empty>> unregisters;
  std::vector<Call<proto::JobEvent, proto::Empty>> jobs;
  std::vector<Call<proto::GetBlobChunkRequest, proto::BlobChunk>> chunks;
  std::vector<Call<proto::GetPlacementGroupRequest, proto::PlacementGroupInfo>>
      groups;
  int closed = 0;
};

// Answers the oldest call of `calls` with `reply`.
template <typename Calls, typename Reply>
void Answer(Calls& calls, Reply reply) {
  ASSERT_FALSE(calls.empty());
  auto call = std::move(calls.front());
  calls.erase(calls.begin());
  call.done(std::move(reply));
}

class HeadLinkTest : public ::testing::Test {
 protected:
  HeadLinkTest() {
    auto head = std::make_unique<FakeHead>();
    head_ = head.get();
    HeadLinkOptions o;
    o.head_address = "10.0.0.1:6379";
    o.node_id = "n1";
    o.session_dir = ::testing::TempDir();
    o.head_timeout_ms = 10000;
    o.self_info = [] {
      proto::NodeInfo info;
      info.set_node_id("n1");
      info.set_address("10.0.0.2:7000");
      return info;
    };
    o.fill_heartbeat = [](proto::HeartbeatRequest* req) {
      req->add_demands()->set_count(3);
    };
    o.view_changed = [this] { ++views_; };
    o.lost = [this](const absl::Status& why) { lost_.push_back(why); };
    link_ = std::make_unique<HeadLink>(&clock_, std::move(head), std::move(o));
  }

  // Registers the node, the head giving a heartbeat interval of 1 s.
  void Registered() {
    absl::Status got = absl::UnknownError("unanswered");
    link_->Register([&](absl::Status st) { got = st; });
    ASSERT_EQ(head_->registers.size(), 1u);
    EXPECT_EQ(head_->registers[0].request.node().address(), "10.0.0.2:7000");
    proto::RegisterNodeReply reply;
    reply.set_heartbeat_interval_ms(1000);
    Answer(head_->registers, reply);
    EXPECT_TRUE(got.ok()) << got;
  }

  proto::HeartbeatReply View(int64_t version) {
    proto::HeartbeatReply reply;
    reply.set_view_epoch(7);
    reply.set_view_version(version);
    reply.set_full_view(true);
    reply.add_nodes()->set_node_id("n2");
    return reply;
  }

  FakeClock clock_;
  FakeHead* head_ = nullptr;
  std::unique_ptr<HeadLink> link_;
  int views_ = 0;
  std::vector<absl::Status> lost_;
};

TEST_F(HeadLinkTest, BeatsAtTheHeadsIntervalWithTheNodesBooks) {
  Registered();
  link_->StartBeating();
  clock_.Advance(1100);  // the interval, jittered by a tenth at most
  ASSERT_EQ(head_->beats.size(), 1u);
  const proto::HeartbeatRequest& beat = head_->beats[0].request;
  EXPECT_EQ(beat.node_id(), "n1");
  ASSERT_EQ(beat.demands_size(), 1);
  EXPECT_EQ(beat.demands(0).count(), 3);
  EXPECT_EQ(beat.view_version(), 0);  // holds no view yet
  Answer(head_->beats, View(5));
  EXPECT_EQ(views_, 1);
  EXPECT_EQ(link_->view()->nodes().size(), 1u);
  // The next beat says which view the node holds.
  clock_.Advance(1100);
  ASSERT_EQ(head_->beats.size(), 1u);
  EXPECT_EQ(head_->beats[0].request.view_version(), 5);
}

TEST_F(HeadLinkTest, ReportsSoonAfterAChangeOnceForMany) {
  Registered();
  link_->ReportSoon();
  link_->ReportSoon();
  clock_.Advance(19);
  EXPECT_TRUE(head_->beats.empty());
  clock_.Advance(1);
  EXPECT_EQ(head_->beats.size(), 1u);
  // Not periodic: answering it schedules no beat.
  Answer(head_->beats, View(1));
  clock_.Advance(5000);
  EXPECT_TRUE(head_->beats.empty());
}

TEST_F(HeadLinkTest, RegistersAgainWhenTheHeadForgotTheNode) {
  Registered();
  link_->StartBeating();
  clock_.Advance(1100);
  proto::HeartbeatReply unknown;
  unknown.set_unknown_node(true);
  Answer(head_->beats, unknown);
  ASSERT_EQ(head_->registers.size(), 1u);
  EXPECT_EQ(views_, 0);
}

TEST_F(HeadLinkTest, ANodeWhoseHeadStaysAwayStops) {
  Registered();
  link_->StartBeating();
  for (int i = 0; i < 9; ++i) {
    clock_.Advance(1000);
    while (!head_->beats.empty()) {
      Answer(head_->beats, absl::StatusOr<proto::HeartbeatReply>(
                               absl::UnavailableError("connection refused")));
    }
  }
  EXPECT_TRUE(lost_.empty());
  clock_.Advance(1500);
  ASSERT_EQ(lost_.size(), 1u);
  EXPECT_EQ(lost_[0].code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(lost_[0].message(), "connection refused"))
      << lost_[0];
  EXPECT_TRUE(absl::StrContains(lost_[0].message(),
                                "shoal start --address=10.0.0.1:6379"))
      << lost_[0];
  // A lost head is not told the node leaves.
  bool left = false;
  link_->Leave([&] { left = true; });
  EXPECT_TRUE(left);
  EXPECT_TRUE(head_->unregisters.empty());
}

TEST_F(HeadLinkTest, AnsweredBeatsKeepTheNode) {
  Registered();
  link_->StartBeating();
  for (int i = 0; i < 30; ++i) {
    clock_.Advance(1000);
    while (!head_->beats.empty()) Answer(head_->beats, View(i + 1));
  }
  EXPECT_TRUE(lost_.empty());
}

TEST_F(HeadLinkTest, JobReportsArriveInOrderThroughARestart) {
  proto::JobEvent a, b;
  a.set_submission_id("job-a");
  b.set_submission_id("job-b");
  link_->ReportJob(a);
  link_->ReportJob(b);
  ASSERT_EQ(head_->jobs.size(), 1u);  // one at a time
  Answer(head_->jobs, absl::StatusOr<proto::Empty>(
                          absl::UnavailableError("head restarting")));
  EXPECT_TRUE(head_->jobs.empty());
  clock_.Advance(500);
  ASSERT_EQ(head_->jobs.size(), 1u);
  EXPECT_EQ(head_->jobs[0].request.submission_id(), "job-a");
  Answer(head_->jobs, proto::Empty());
  ASSERT_EQ(head_->jobs.size(), 1u);
  EXPECT_EQ(head_->jobs[0].request.submission_id(), "job-b");
}

TEST_F(HeadLinkTest, LeavingUnregistersAndNoBeatFollows) {
  Registered();
  link_->StartBeating();
  bool left = false;
  link_->Leave([&] { left = true; });
  ASSERT_EQ(head_->unregisters.size(), 1u);
  EXPECT_EQ(head_->unregisters[0].request.node_id(), "n1");
  EXPECT_FALSE(left);
  Answer(head_->unregisters, proto::Empty());
  EXPECT_TRUE(left);
  clock_.Advance(5000);
  EXPECT_TRUE(head_->beats.empty());
}

TEST_F(HeadLinkTest, ANodeThatNeverJoinedLeavesWithoutAWord) {
  bool left = false;
  link_->Leave([&] { left = true; });
  EXPECT_TRUE(left);
  EXPECT_TRUE(head_->unregisters.empty());
}

TEST_F(HeadLinkTest, FetchesProgramChunksUntilClosed) {
  std::vector<absl::StatusOr<BinaryChunk>> got;
  auto done = [&](absl::StatusOr<BinaryChunk> c) { got.push_back(c); };
  link_->FetchBlobChunk("abc", 4, 8, done);
  ASSERT_EQ(head_->chunks.size(), 1u);
  EXPECT_EQ(head_->chunks[0].request.hash(), "abc");
  EXPECT_EQ(head_->chunks[0].request.offset(), 4);
  EXPECT_EQ(head_->chunks[0].request.max_bytes(), 8);
  proto::BlobChunk chunk;
  chunk.set_data("12345678");
  chunk.set_last(true);
  Answer(head_->chunks, chunk);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].ok());
  EXPECT_EQ(got[0]->data, "12345678");
  EXPECT_TRUE(got[0]->last);

  link_->Close();
  head_ = nullptr;  // closed with the link's client
  EXPECT_FALSE(link_->can_ask());
  link_->FetchBlobChunk("abc", 0, 8, done);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].status().code(), absl::StatusCode::kCancelled);
}

TEST_F(HeadLinkTest, CallsFailedByClosingAreNotActedOn) {
  Registered();
  link_->ReportSoon();
  clock_.Advance(20);
  ASSERT_EQ(head_->beats.size(), 1u);
  link_->Close();  // fails the beat in flight
  head_ = nullptr;
  // The failed beat warned nobody and stopped nothing.
  EXPECT_TRUE(lost_.empty());
  EXPECT_EQ(views_, 0);
  link_->ReportSoon();
  clock_.Advance(100);
  EXPECT_EQ(clock_.pending(), 0u);
}

}  // namespace
}  // namespace shoal::agent
