#include "head/node_table.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "head/head_fakes_testing.h"

namespace shoal {
namespace {

using ::shoal::testing::FakeTimers;
using ::shoal::testing::Resources;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

constexpr uint64_t kEpoch = 77;

proto::NodeInfo Node(const std::string& id, double cpus) {
  proto::NodeInfo n;
  n.set_node_id(id);
  n.set_address(id + ":1");
  *n.mutable_total() = Resources({{"CPU", cpus}});
  return n;
}

proto::HeartbeatRequest Beat(const std::string& id, double free_cpus) {
  proto::HeartbeatRequest r;
  r.set_node_id(id);
  *r.mutable_available() = Resources({{"CPU", free_cpus}});
  return r;
}

// The nodes a view reply brings (FillView's body after the reply's fields).
std::vector<std::string> ViewNodes(NodeTable& table, uint64_t epoch,
                                   int64_t version,
                                   proto::HeartbeatReply* reply) {
  std::string body = table.FillView(epoch, version, reply);
  proto::HeartbeatReply whole;
  EXPECT_TRUE(whole.ParseFromString(reply->SerializeAsString() + body));
  std::vector<std::string> ids;
  for (const auto& n : whole.nodes()) ids.push_back(n.node_id());
  return ids;
}

TEST(NodeTableTest, RegistrationFillsInWhatTheAgentLeftOut) {
  FakeTimers time;
  NodeTable table(time.clock(), kEpoch);
  proto::NodeInfo n = Node("", 4);
  absl::StatusOr<const NodeTable::Entry*> e = table.Register(n);
  ASSERT_TRUE(e.ok()) << e.status();
  const proto::NodeInfo& info = (*e)->info;
  EXPECT_EQ(info.node_id().size(), 12u);
  EXPECT_TRUE(info.alive());
  EXPECT_GT(info.start_time_ms(), 0);
  EXPECT_TRUE(NodeTable::SameAmounts(info.available(), info.total()));

  proto::NodeInfo no_address = Node("x", 1);
  no_address.clear_address();
  EXPECT_EQ(table.Register(no_address).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table.Find("x"), nullptr);
}

TEST(NodeTableTest, ASilentNodeIsFoundAfterTheTimeoutAndDies) {
  FakeTimers time;
  NodeTable table(time.clock(), kEpoch);
  ASSERT_TRUE(table.Register(Node("a", 4)).ok());
  ASSERT_TRUE(table.Register(Node("b", 4)).ok());
  time.Advance(4000);
  EXPECT_TRUE(table.Heartbeat(Beat("a", 2)));
  time.Advance(1001);
  EXPECT_THAT(table.Silent(5000), ElementsAre("b"));
  time.Advance(3999);
  EXPECT_THAT(table.Silent(5000), ElementsAre("b"));
  time.Advance(1);
  EXPECT_THAT(table.Silent(5000), ElementsAre("a", "b"));

  const NodeTable::Entry* dead = table.MarkDead("b", "gone");
  ASSERT_NE(dead, nullptr);
  EXPECT_FALSE(dead->info.alive());
  EXPECT_EQ(dead->info.death_reason(), "gone");
  EXPECT_EQ(dead->info.available().amounts_size(), 0);
  EXPECT_EQ(table.MarkDead("b", "again"), nullptr);
  EXPECT_EQ(table.MarkDead("nobody", "x"), nullptr);
  EXPECT_THAT(table.Silent(5000), ElementsAre("a"));
  EXPECT_EQ(table.FindAlive("b"), nullptr);
  // A dead node's agent must register again.
  EXPECT_FALSE(table.Heartbeat(Beat("b", 4)));
  EXPECT_FALSE(table.Heartbeat(Beat("unknown", 4)));
  ASSERT_TRUE(table.Register(Node("b", 4)).ok());
  EXPECT_NE(table.FindAlive("b"), nullptr);
  EXPECT_THAT(table.Silent(5000), ElementsAre("a"));
}

TEST(NodeTableTest, HeartbeatsKeepResourcesLeasesAndDemands) {
  FakeTimers time;
  NodeTable table(time.clock(), kEpoch);
  ASSERT_TRUE(table.Register(Node("a", 4)).ok());
  ASSERT_TRUE(table.Register(Node("b", 4)).ok());
  for (const char* id : {"a", "b"}) {
    proto::HeartbeatRequest beat = Beat(id, 1);
    proto::ResourceDemand* d = beat.add_demands();
    *d->mutable_shape() = Resources({{"CPU", 2}});
    d->set_count(3);
    beat.add_leases()->set_lease_id(std::string("lease-") + id);
    *beat.mutable_total() = Resources({{"CPU", 8}});
    ASSERT_TRUE(table.Heartbeat(beat));
  }
  time.Advance(250);
  proto::ClusterStatus status;
  table.AddToStatus(&status);
  ASSERT_EQ(status.nodes_size(), 2);
  EXPECT_EQ(status.nodes(0).heartbeat_age_ms(), 250);
  EXPECT_TRUE(
      NodeTable::SameAmounts(status.nodes(0).total(), Resources({{"CPU", 8}})));
  EXPECT_TRUE(NodeTable::SameAmounts(status.nodes(1).available(),
                                     Resources({{"CPU", 1}})));
  EXPECT_EQ(status.leases_size(), 2);
  // One demand of the same shape, summed over the nodes.
  ASSERT_EQ(status.demands_size(), 1);
  EXPECT_EQ(status.demands(0).count(), 6);
}

TEST(NodeTableTest, AgentsGetOnlyWhatChangedSinceTheirVersion) {
  FakeTimers time;
  NodeTable table(time.clock(), kEpoch);
  ASSERT_TRUE(table.Register(Node("a", 4)).ok());
  ASSERT_TRUE(table.Register(Node("b", 4)).ok());
  ASSERT_TRUE(table.Register(Node("c", 4)).ok());

  proto::HeartbeatReply first;
  EXPECT_THAT(ViewNodes(table, 0, 0, &first), ElementsAre("a", "b", "c"));
  EXPECT_TRUE(first.full_view());
  EXPECT_EQ(first.view_epoch(), kEpoch);
  const int64_t version = first.view_version();

  // Nothing changed: nothing to send.
  ASSERT_TRUE(table.Heartbeat(Beat("a", 4)));
  proto::HeartbeatReply same;
  EXPECT_THAT(ViewNodes(table, kEpoch, version, &same), IsEmpty());
  EXPECT_EQ(same.view_version(), version);
  EXPECT_FALSE(same.full_view());

  ASSERT_TRUE(table.Heartbeat(Beat("b", 1)));
  table.MarkDead("c", "gone");
  proto::HeartbeatReply changed;
  EXPECT_THAT(ViewNodes(table, kEpoch, version, &changed),
              ElementsAre("b", "c"));
  EXPECT_FALSE(changed.full_view());
  EXPECT_GT(changed.view_version(), version);

  // Another head's view, or one from the future: all of this one.
  proto::HeartbeatReply other;
  EXPECT_THAT(ViewNodes(table, kEpoch + 1, version, &other),
              UnorderedElementsAre("a", "b", "c"));
  EXPECT_TRUE(other.full_view());
  proto::HeartbeatReply future;
  EXPECT_THAT(ViewNodes(table, kEpoch, version + 100, &future),
              UnorderedElementsAre("a", "b", "c"));
}

TEST(NodeTableTest, PlacementOrderPutsTpuWorkersFirstByTheirId) {
  FakeTimers time;
  NodeTable table(time.clock(), kEpoch);
  proto::NodeInfo w10 = Node("w10", 1);
  (*w10.mutable_labels())["shoal.io/tpu-worker-id"] = "10";
  proto::NodeInfo w2 = Node("w2", 1);
  (*w2.mutable_labels())["shoal.io/tpu-worker-id"] = "2";
  for (const auto& n : {Node("zz", 1), w10, Node("aa", 1), w2}) {
    ASSERT_TRUE(table.Register(n).ok());
  }
  table.MarkDead("aa", "gone");
  std::vector<std::string> order;
  for (const PlacementNode& p : table.PlacementNodes(true)) {
    order.push_back(p.node_id);
  }
  EXPECT_THAT(order, ElementsAre("w2", "w10", "zz"));
}

TEST(NodeTableTest, FindsTheHeadNodeAndAliveAgents) {
  FakeTimers time;
  NodeTable table(time.clock(), kEpoch);
  proto::NodeInfo head = Node("h", 1);
  head.set_is_head_node(true);
  ASSERT_TRUE(table.Register(head).ok());
  ASSERT_TRUE(table.Register(Node("w", 1)).ok());
  EXPECT_EQ(table.HeadNodeId(), "h");
  EXPECT_EQ(table.AliveAgents("").size(), 2u);
  EXPECT_THAT(table.AliveAgents("w"),
              ElementsAre(std::pair<std::string, std::string>("w", "w:1")));
  table.MarkDead("h", "gone");
  EXPECT_EQ(table.HeadNodeId(), "");
  EXPECT_THAT(table.AliveAgents("h"), IsEmpty());
}

TEST(NodeTableTest, ARestoredNodeHasTheTimeoutFromNowToBeHeardFrom) {
  FakeTimers time;
  NodeTable table(time.clock(), kEpoch);
  proto::NodeInfo kept = Node("a", 2);
  kept.set_alive(true);
  time.Advance(60000);
  table.Restore(kept);
  EXPECT_THAT(table.Silent(5000), IsEmpty());
  time.Advance(5001);
  EXPECT_THAT(table.Silent(5000), ElementsAre("a"));
}

}  // namespace
}  // namespace shoal
