#include "head/node_manager.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "head/head_fakes_testing.h"
#include "head/table_storage.h"

namespace shoal {
namespace {

using ::shoal::testing::FakeAgents;
using ::shoal::testing::FakeTimers;
using ::shoal::testing::Resources;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

proto::RegisterNodeRequest Registration(const std::string& id,
                                        bool head = false) {
  proto::RegisterNodeRequest r;
  r.mutable_node()->set_node_id(id);
  r.mutable_node()->set_address(id + ":1");
  r.mutable_node()->set_is_head_node(head);
  *r.mutable_node()->mutable_total() = Resources({{"CPU", 2}});
  return r;
}

class NodeManagerTest : public ::testing::Test {
 protected:
  std::unique_ptr<NodeManager> Make() {
    NodeManagerOptions options;
    options.heartbeat_interval_ms = 123;
    options.health_timeout_ms = 1000;
    options.call_agent = agents_.caller();
    options.run_after = time_.runner();
    options.storage = storage_.get();
    options.on_registered = [this](const proto::NodeInfo& n) {
      registered_.push_back(n.node_id());
    };
    options.on_dead = [this](const proto::NodeInfo& n, const std::string& why) {
      dead_.push_back(n.node_id() + ": " + why);
    };
    options.on_leases = [this](const std::string& agent, const auto& leases) {
      leases_.push_back(agent + " " + std::to_string(leases.size()));
    };
    return std::make_unique<NodeManager>(std::move(options), time_.clock(),
                                         /*view_epoch=*/5);
  }
  proto::NodeInfo Kept(const std::string& id) {
    proto::NodeInfo info;
    std::optional<std::string> bytes = storage_->Get("nodes", id);
    EXPECT_TRUE(bytes.has_value()) << id;
    if (bytes) {
      EXPECT_TRUE(info.ParseFromString(*bytes));
    }
    return info;
  }

  FakeAgents agents_;
  FakeTimers time_;
  std::unique_ptr<TableStorage> storage_ = NewInMemoryTableStorage();
  std::vector<std::string> registered_, dead_, leases_;
};

TEST_F(NodeManagerTest, ARegisteredNodeIsKeptAndToldItsHeartbeatInterval) {
  auto nodes = Make();
  absl::StatusOr<proto::RegisterNodeReply> reply =
      nodes->Register(Registration("n1"));
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->node_id(), "n1");
  EXPECT_EQ(reply->heartbeat_interval_ms(), 123);
  EXPECT_TRUE(Kept("n1").alive());
  EXPECT_THAT(registered_, ElementsAre("n1"));

  proto::RegisterNodeRequest bad = Registration("n2");
  bad.mutable_node()->clear_address();
  EXPECT_EQ(nodes->Register(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(registered_, ElementsAre("n1"));
}

TEST_F(NodeManagerTest, HeartbeatsOfUnknownNodesAskThemToRegister) {
  auto nodes = Make();
  ASSERT_TRUE(nodes->Register(Registration("n1")).ok());
  proto::HeartbeatRequest beat;
  beat.set_node_id("n1");
  *beat.mutable_available() = Resources({{"CPU", 2}});
  beat.add_leases()->set_lease_id("l1");
  proto::HeartbeatReply reply;
  ASSERT_TRUE(reply.ParseFromString(nodes->Heartbeat(beat)));
  EXPECT_FALSE(reply.unknown_node());
  EXPECT_EQ(reply.view_epoch(), 5u);
  ASSERT_EQ(reply.nodes_size(), 1);
  EXPECT_THAT(leases_, ElementsAre("n1:1 1"));

  beat.set_node_id("stranger");
  ASSERT_TRUE(reply.ParseFromString(nodes->Heartbeat(beat)));
  EXPECT_TRUE(reply.unknown_node());
  EXPECT_THAT(leases_, ElementsAre("n1:1 1"));
}

TEST_F(NodeManagerTest, TheHealthCheckDeclaresSilentNodesDead) {
  auto nodes = Make();
  nodes->StartHealthChecks();
  ASSERT_TRUE(nodes->Register(Registration("n1")).ok());
  ASSERT_TRUE(nodes->Register(Registration("n2")).ok());
  proto::HeartbeatRequest beat;
  beat.set_node_id("n2");
  for (int i = 0; i < 4; ++i) {
    time_.Advance(400);
    nodes->Heartbeat(beat);
  }
  EXPECT_THAT(dead_, ElementsAre(HasSubstr("n1: no heartbeat for 1000 ms")));
  EXPECT_FALSE(Kept("n1").alive());
  EXPECT_TRUE(Kept("n2").alive());
  // Found within 5% of the timeout past it.
  time_.Advance(1000 + 50);
  EXPECT_EQ(dead_.size(), 2u);
  EXPECT_FALSE(Kept("n2").alive());
  EXPECT_THAT(Kept("n2").death_reason(), HasSubstr("unreachable"));
}

TEST_F(NodeManagerTest, UnregisteringMarksDeadOnce) {
  auto nodes = Make();
  ASSERT_TRUE(nodes->Register(Registration("n1")).ok());
  nodes->MarkDead("n1", "agent stopped");
  nodes->MarkDead("n1", "agent stopped");
  EXPECT_THAT(dead_, ElementsAre("n1: agent stopped"));
  EXPECT_EQ(Kept("n1").death_reason(), "agent stopped");
}

TEST_F(NodeManagerTest, ARestartedHeadTakesUpTheNodesKept) {
  {
    auto before = Make();
    ASSERT_TRUE(before->Register(Registration("n1")).ok());
    ASSERT_TRUE(before->Register(Registration("n2")).ok());
    before->MarkDead("n2", "gone");
  }
  auto after = Make();
  EXPECT_EQ(after->Restore(), 2u);
  after->StartHealthChecks();
  EXPECT_NE(after->table().FindAlive("n1"), nullptr);
  EXPECT_EQ(after->table().FindAlive("n2"), nullptr);
  EXPECT_THAT(dead_, ElementsAre("n2: gone"));
  // n1's agent never comes back.
  time_.Advance(1100);
  EXPECT_THAT(dead_, ElementsAre("n2: gone", HasSubstr("n1: no heartbeat")));
}

TEST_F(NodeManagerTest, ListsMergeEveryAgentsAnswerAndNameThoseThatFail) {
  auto nodes = Make();
  ASSERT_TRUE(nodes->Register(Registration("n1")).ok());
  ASSERT_TRUE(nodes->Register(Registration("n2")).ok());
  std::optional<absl::StatusOr<proto::ObjectList>> got;
  nodes->ListObjects(proto::ListObjectsRequest(),
                     [&](absl::StatusOr<proto::ObjectList> r) { got = r; });
  std::vector<size_t> asked = agents_.Waiting(proto::LIST_OBJECTS);
  ASSERT_EQ(asked.size(), 2u);
  EXPECT_EQ(agents_.call(asked[0]).timeout_ms, NodeManager::kAgentAskTimeoutMs);
  proto::ObjectList one;
  one.add_objects();
  one.set_total(3);
  agents_.Answer(asked[0], one);
  EXPECT_FALSE(got.has_value());
  agents_.Fail(asked[1], absl::DeadlineExceededError("timed out"));
  ASSERT_TRUE(got.has_value());
  ASSERT_TRUE(got->ok());
  EXPECT_EQ((*got)->objects_size(), 1);
  EXPECT_EQ((*got)->total(), 3);
  EXPECT_THAT((*got)->errors(), ElementsAre("node n2: timed out"));

  proto::ListLogsRequest of_unknown;
  of_unknown.set_node_id("n9");
  std::optional<absl::StatusOr<proto::LogList>> logs;
  nodes->ListLogs(of_unknown,
                  [&](absl::StatusOr<proto::LogList> r) { logs = r; });
  ASSERT_TRUE(logs.has_value());
  EXPECT_EQ(logs->status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(logs->status().message()),
              HasSubstr("shoal list nodes"));
}

TEST_F(NodeManagerTest, ReadLogGoesToTheHeadNodeUnlessANodeIsNamed) {
  auto nodes = Make();
  ASSERT_TRUE(nodes->Register(Registration("worker")).ok());
  ASSERT_TRUE(nodes->Register(Registration("head", /*head=*/true)).ok());
  std::optional<absl::StatusOr<std::string>> got;
  proto::ReadLogRequest r;
  r.set_wait_ms(700);
  nodes->ReadLog(r, [&](absl::StatusOr<std::string> reply) { got = reply; });
  std::vector<size_t> asked = agents_.Waiting(proto::READ_LOG);
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(agents_.call(asked[0]).address, "head:1");
  EXPECT_EQ(agents_.call(asked[0]).timeout_ms,
            NodeManager::kAgentAskTimeoutMs + 700);
  proto::LogChunk chunk;
  chunk.set_data("line");
  agents_.Answer(asked[0], chunk);
  ASSERT_TRUE(got.has_value() && got->ok());
  EXPECT_EQ(**got, chunk.SerializeAsString());

  r.set_node_id("worker");
  nodes->ReadLog(r, [&](absl::StatusOr<std::string> reply) { got = reply; });
  EXPECT_EQ(agents_.call(agents_.Waiting(proto::READ_LOG)[0]).address,
            "worker:1");
  nodes->MarkDead("head", "gone");
  r.clear_node_id();
  got.reset();
  nodes->ReadLog(r, [&](absl::StatusOr<std::string> reply) { got = reply; });
  ASSERT_TRUE(got.has_value());
  EXPECT_THAT(std::string(got->status().message()),
              HasSubstr("the head's node is not alive"));
}

}  // namespace
}  // namespace shoal
