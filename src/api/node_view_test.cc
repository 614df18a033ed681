// NodeView's choices, with its seams controlling time and which IPs are this
// host's.
#include "api/node_view.h"

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/event_loop.h"
#include "rpc/rpc.h"

namespace shoal::internal {
namespace {

using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

constexpr int64_t kRetryUs = 2000000;
constexpr char kLocalIp[] = "10.0.0.1";

proto::NodeInfo Node(const std::string& id, const std::string& ip,
                     bool alive = true) {
  proto::NodeInfo node;
  node.set_node_id(id);
  node.set_address(ip + ":7000");
  node.set_node_ip(ip);
  node.set_alive(alive);
  node.set_object_transfer_address(ip + ":7001");
  return node;
}

proto::ClusterStatus Status(const std::vector<proto::NodeInfo>& nodes) {
  proto::ClusterStatus status;
  for (const auto& node : nodes) *status.add_nodes() = node;
  return status;
}

class NodeViewTest : public ::testing::Test {
 protected:
  NodeViewTest()
      : view_(/*loop=*/nullptr, NodeView::Options{
                                    .token = "test-token",
                                    .peer_name = "node_view_test",
                                    .bad_agent_retry_us = kRetryUs,
                                    .now_us = [this] { return now_us_; },
                                    .is_local =
                                        [this](const std::string& ip) {
                                          ++is_local_calls_;
                                          return ip == kLocalIp;
                                        },
                                }) {}

  int64_t now_us_ = 5000000000;
  int is_local_calls_ = 0;
  NodeView view_;
};

TEST_F(NodeViewTest, NoNodesNoLeaseAgent) {
  EXPECT_EQ(view_.lease_agent(), "");
  view_.Update(Status({}));
  EXPECT_EQ(view_.lease_agent(), "");
  EXPECT_EQ(view_.LocalAgent(), "");
  EXPECT_THAT(view_.DeadAgents(), IsEmpty());
}

TEST_F(NodeViewTest, PrefersAnAliveAgentOnThisHost) {
  view_.Update(Status({Node("remote-1", "10.0.0.2"), Node("local", kLocalIp),
                       Node("remote-2", "10.0.0.3")}));
  EXPECT_EQ(view_.lease_agent(), "10.0.0.1:7000");
  EXPECT_GT(is_local_calls_, 0);
}

TEST_F(NodeViewTest, FallsBackToAnyAliveAgent) {
  view_.Update(
      Status({Node("dead-remote", "10.0.0.4", /*alive=*/false),
              Node("local", kLocalIp, /*alive=*/false),
              Node("remote-1", "10.0.0.2"), Node("remote-2", "10.0.0.3")}));
  EXPECT_EQ(view_.lease_agent(), "10.0.0.2:7000");
}

TEST_F(NodeViewTest, NoAliveNodeNoLeaseAgent) {
  view_.Update(Status({Node("local", kLocalIp, /*alive=*/false),
                       Node("remote", "10.0.0.2", /*alive=*/false)}));
  EXPECT_EQ(view_.lease_agent(), "");
}

TEST_F(NodeViewTest, KeepsTheCurrentAgentWhileItIsUsable) {
  view_.Update(Status({Node("remote-1", "10.0.0.2")}));
  EXPECT_EQ(view_.lease_agent(), "10.0.0.2:7000");
  // A local agent joins (listed first): the one in use stays.
  view_.Update(Status({Node("local", kLocalIp), Node("remote-0", "10.0.0.9"),
                       Node("remote-1", "10.0.0.2")}));
  EXPECT_EQ(view_.lease_agent(), "10.0.0.2:7000");
  // Once it is declared dead, the local one takes over.
  view_.Update(Status({Node("local", kLocalIp), Node("remote-0", "10.0.0.9"),
                       Node("remote-1", "10.0.0.2", /*alive=*/false)}));
  EXPECT_EQ(view_.lease_agent(), "10.0.0.1:7000");
  // And once it leaves the head's list altogether, too.
  view_.Update(Status({Node("remote-0", "10.0.0.9")}));
  EXPECT_EQ(view_.lease_agent(), "10.0.0.9:7000");
}

TEST_F(NodeViewTest, MarkBadMovesAwayFromTheLeaseAgent) {
  view_.Update(Status({Node("remote", "10.0.0.2"), Node("local", kLocalIp)}));
  ASSERT_EQ(view_.lease_agent(), "10.0.0.1:7000");
  view_.MarkBad("10.0.0.1:7000");
  EXPECT_EQ(view_.lease_agent(), "10.0.0.2:7000");
  view_.MarkBad("10.0.0.2:7000");
  EXPECT_EQ(view_.lease_agent(), "");
}

TEST_F(NodeViewTest, MarkBadOfAnotherAgentKeepsTheLeaseAgent) {
  view_.Update(Status({Node("remote", "10.0.0.2"), Node("local", kLocalIp)}));
  view_.MarkBad("10.0.0.2:7000");
  EXPECT_EQ(view_.lease_agent(), "10.0.0.1:7000");
  // Agents the view never heard of too.
  view_.MarkBad("10.9.9.9:1");
  EXPECT_EQ(view_.lease_agent(), "10.0.0.1:7000");
  // The bad one is skipped when the lease agent must move.
  view_.MarkBad("10.0.0.1:7000");
  EXPECT_EQ(view_.lease_agent(), "");
}

TEST_F(NodeViewTest, BadAgentAliveToTheHeadReturnsOnlyAfterTheRetryTime) {
  view_.Update(Status({Node("local", kLocalIp)}));
  view_.MarkBad("10.0.0.1:7000");
  ASSERT_EQ(view_.lease_agent(), "");
  // The head still says it is alive, but too soon.
  now_us_ += kRetryUs / 2;
  view_.Update(Status({Node("local", kLocalIp)}));
  EXPECT_EQ(view_.lease_agent(), "");
  now_us_ += kRetryUs / 2;  // exactly the retry time: not past it yet
  view_.Update(Status({Node("local", kLocalIp)}));
  EXPECT_EQ(view_.lease_agent(), "");
  now_us_ += 1;
  view_.Update(Status({Node("local", kLocalIp)}));
  EXPECT_EQ(view_.lease_agent(), "10.0.0.1:7000");
}

TEST_F(NodeViewTest, BadAgentNeedsTheHeadToReportItAlive) {
  view_.Update(Status({Node("local", kLocalIp), Node("remote", "10.0.0.2")}));
  view_.MarkBad("10.0.0.1:7000");
  ASSERT_EQ(view_.lease_agent(), "10.0.0.2:7000");
  // Time passing alone changes nothing.
  now_us_ += 10 * kRetryUs;
  view_.MarkBad("10.0.0.2:7000");
  EXPECT_EQ(view_.lease_agent(), "");
  // Dead to the head: stays out even past the retry time.
  view_.Update(Status({Node("local", kLocalIp, /*alive=*/false),
                       Node("remote", "10.0.0.2", /*alive=*/false)}));
  EXPECT_EQ(view_.lease_agent(), "");
  now_us_ += 10 * kRetryUs;
  // Alive again: the local one, failed long ago, is back; the remote one
  // (failed long ago too) as well, but the local one is preferred.
  view_.Update(Status({Node("local", kLocalIp), Node("remote", "10.0.0.2")}));
  EXPECT_EQ(view_.lease_agent(), "10.0.0.1:7000");
}

TEST_F(NodeViewTest, MarkingBadAgainRestartsTheRetryTime) {
  view_.Update(Status({Node("local", kLocalIp)}));
  view_.MarkBad("10.0.0.1:7000");
  now_us_ += kRetryUs - 10;
  view_.MarkBad("10.0.0.1:7000");
  now_us_ += 20;  // past the first failure's retry time, not the second's
  view_.Update(Status({Node("local", kLocalIp)}));
  EXPECT_EQ(view_.lease_agent(), "");
  now_us_ += kRetryUs;
  view_.Update(Status({Node("local", kLocalIp)}));
  EXPECT_EQ(view_.lease_agent(), "10.0.0.1:7000");
}

TEST_F(NodeViewTest, DeadAgentsListsTheAgentsOfDeadNodes) {
  view_.Update(Status({Node("a", "10.0.0.2"), Node("b", "10.0.0.3", false),
                       Node("c", kLocalIp, false)}));
  EXPECT_THAT(view_.DeadAgents(),
              UnorderedElementsAre("10.0.0.3:7000", "10.0.0.1:7000"));
  // Marked bad is not dead.
  view_.MarkBad("10.0.0.2:7000");
  EXPECT_EQ(view_.DeadAgents().count("10.0.0.2:7000"), 0u);
  // Back alive: no longer listed.
  view_.Update(Status(
      {Node("a", "10.0.0.2"), Node("b", "10.0.0.3"), Node("c", kLocalIp)}));
  EXPECT_THAT(view_.DeadAgents(), IsEmpty());
}

TEST_F(NodeViewTest, AddressesByNodeId) {
  view_.Update(Status({Node("a", "10.0.0.2"), Node("b", "10.0.0.3", false)}));
  EXPECT_EQ(view_.AgentOf("a"), "10.0.0.2:7000");
  EXPECT_EQ(view_.AgentOf("b"), "10.0.0.3:7000");
  EXPECT_EQ(view_.TransferAddressOf("a"), "10.0.0.2:7001");
  EXPECT_EQ(view_.TransferAddressOf("b"), "10.0.0.3:7001");
  EXPECT_EQ(view_.AgentOf("unknown"), "");
  EXPECT_EQ(view_.TransferAddressOf("unknown"), "");
}

TEST_F(NodeViewTest, NoteAgentNamesANodeTheHeadHasNotListed) {
  view_.Update(Status({Node("a", "10.0.0.2")}));
  view_.NoteAgent("spilled", "10.0.0.7:7000");
  EXPECT_EQ(view_.AgentOf("spilled"), "10.0.0.7:7000");
  EXPECT_EQ(view_.TransferAddressOf("spilled"), "");
  // A noted agent is not a lease agent candidate.
  view_.MarkBad("10.0.0.2:7000");
  EXPECT_EQ(view_.lease_agent(), "");
  // The head's list, once it names the node, wins.
  view_.Update(Status({Node("a", "10.0.0.2"), Node("spilled", "10.0.0.8")}));
  EXPECT_EQ(view_.AgentOf("spilled"), "10.0.0.8:7000");
  EXPECT_EQ(view_.TransferAddressOf("spilled"), "10.0.0.8:7001");
}

TEST_F(NodeViewTest, LocalAgentIsTheAliveAgentOnThisHost) {
  view_.Update(Status({Node("remote", "10.0.0.2"), Node("local", kLocalIp)}));
  EXPECT_EQ(view_.LocalAgent(), "10.0.0.1:7000");
  view_.Update(Status(
      {Node("remote", "10.0.0.2"), Node("local", kLocalIp, /*alive=*/false)}));
  EXPECT_EQ(view_.LocalAgent(), "");
  view_.Update(Status({Node("remote", "10.0.0.2")}));
  EXPECT_EQ(view_.LocalAgent(), "");
}

TEST(NodeViewDefaultsTest, LoopbackIsLocalByDefault) {
  NodeView view(nullptr, NodeView::Options{.token = "t", .peer_name = "p"});
  // 192.0.2.0/24 is TEST-NET-1: never assigned to a real host.
  proto::ClusterStatus status =
      Status({Node("far", "192.0.2.1"), Node("here", "127.0.0.1")});
  view.Update(status);
  EXPECT_EQ(view.lease_agent(), "127.0.0.1:7000");
  EXPECT_EQ(view.LocalAgent(), "127.0.0.1:7000");
  // The default clock: a bad agent stays out right after it failed.
  view.MarkBad("127.0.0.1:7000");
  EXPECT_EQ(view.lease_agent(), "192.0.2.1:7000");
  view.Update(status);
  EXPECT_EQ(view.lease_agent(), "192.0.2.1:7000");
}

class NodeViewChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto loop = rpc::EventLoop::Create("node_view_test");
    ASSERT_TRUE(loop.ok()) << loop.status();
    loop_ = std::move(*loop);
    loop_->RunSync([&] {
      view_ = std::make_unique<NodeView>(
          loop_.get(),
          NodeView::Options{.token = "test-token", .peer_name = "test"});
    });
  }
  void TearDown() override {
    loop_->RunSync([&] { view_.reset(); });
    loop_->Stop();
  }

  std::unique_ptr<rpc::EventLoop> loop_;
  std::unique_ptr<NodeView> view_;
};

TEST_F(NodeViewChannelTest, OneChannelPerAddress) {
  loop_->RunSync([&] {
    rpc::Channel* a = view_->Channel("127.0.0.1:1");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->address(), "127.0.0.1:1");
    EXPECT_EQ(view_->Channel("127.0.0.1:1"), a);
    rpc::Channel* b = view_->Channel("127.0.0.1:2");
    ASSERT_NE(b, nullptr);
    EXPECT_NE(b, a);
    EXPECT_EQ(b->address(), "127.0.0.1:2");
    EXPECT_EQ(view_->Channel("127.0.0.1:1"), a);
    view_->CloseChannels();
    rpc::Channel* again = view_->Channel("127.0.0.1:1");
    ASSERT_NE(again, nullptr);
    EXPECT_EQ(again->address(), "127.0.0.1:1");
    EXPECT_EQ(view_->Channel("127.0.0.1:1"), again);
  });
}

}  // namespace
}  // namespace shoal::internal
