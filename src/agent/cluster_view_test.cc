#include "agent/cluster_view.h"

#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shoal::agent {
namespace {

proto::NodeInfo Node(const std::string& id, double cpus, bool alive = true) {
  proto::NodeInfo n;
  n.set_node_id(id);
  n.set_alive(alive);
  ResourceSet available = *ResourceSet::FromDoubles({{"CPU", cpus}});
  available.ToProto(n.mutable_available());
  return n;
}

proto::HeartbeatReply Reply(uint64_t epoch, int64_t version, bool full,
                            const std::vector<proto::NodeInfo>& nodes) {
  proto::HeartbeatReply r;
  r.set_view_epoch(epoch);
  r.set_view_version(version);
  r.set_full_view(full);
  for (const auto& n : nodes) *r.add_nodes() = n;
  return r;
}

// node id -> (alive, available CPU)
using SeenNodes = std::map<std::string, std::pair<bool, double>>;

SeenNodes Seen(const ClusterView& v) {
  SeenNodes out;
  for (const auto& n : v.nodes()) {
    out[n.node_id()] = {n.alive(),
                        ResourceSet::FromProto(n.available()).GetDouble("CPU")};
  }
  return out;
}

TEST(ClusterViewTest, AsksForWhatChangedSinceTheVersionItHolds) {
  ClusterView view;
  proto::HeartbeatRequest req;
  view.FillRequest(&req);
  EXPECT_EQ(req.view_epoch(), 0u);
  EXPECT_EQ(req.view_version(), 0);
  view.Apply(Reply(7, 3, true, {Node("a", 4), Node("b", 4), Node("c", 4)}));
  view.FillRequest(&req);
  EXPECT_EQ(req.view_epoch(), 7u);
  EXPECT_EQ(req.view_version(), 3);
  // A change of b and a new node d: merged by id, the others kept.
  view.Apply(Reply(7, 5, false, {Node("b", 1), Node("d", 8)}));
  EXPECT_EQ(Seen(view), (SeenNodes{{"a", {true, 4}},
                                   {"b", {true, 1}},
                                   {"c", {true, 4}},
                                   {"d", {true, 8}}}));
  // Nothing changed: nothing sent, nothing lost.
  view.Apply(Reply(7, 5, false, {}));
  EXPECT_EQ(view.nodes().size(), 4u);
  // A node that died comes as not alive.
  view.Apply(Reply(7, 6, false, {Node("c", 0, /*alive=*/false)}));
  EXPECT_FALSE(Seen(view)["c"].first);
  view.FillRequest(&req);
  EXPECT_EQ(req.view_version(), 6);
}

TEST(ClusterViewTest, AFullViewReplacesEverything) {
  ClusterView view;
  view.Apply(Reply(7, 3, true, {Node("a", 4), Node("b", 4)}));
  // Another head (a restart): its whole view, nothing of the old one.
  view.Apply(Reply(9, 1, true, {Node("b", 2)}));
  EXPECT_EQ(Seen(view), (SeenNodes{{"b", {true, 2}}}));
  // Registering again forgets the version held.
  view.Reset();
  proto::HeartbeatRequest req;
  view.FillRequest(&req);
  EXPECT_EQ(req.view_epoch(), 0u);
  EXPECT_EQ(req.view_version(), 0);
  // A head that keeps no versions sends every node each time.
  view.Apply(Reply(0, 0, false, {Node("x", 1)}));
  EXPECT_EQ(Seen(view), (SeenNodes{{"x", {true, 1}}}));
}

TEST(ClusterViewTest, SpillbacksCountUntilTheNextReply) {
  ClusterView view;
  view.Apply(Reply(7, 3, true, {Node("a", 4), Node("b", 4)}));
  view.CountSpillback("b", *ResourceSet::FromDoubles({{"CPU", 3}}));
  EXPECT_EQ(Seen(view)["b"].second, 1);
  // More than it has left: not counted.
  view.CountSpillback("b", *ResourceSet::FromDoubles({{"CPU", 2}}));
  EXPECT_EQ(Seen(view)["b"].second, 1);
  // The next reply, even one with no change, is what the head saw since.
  view.Apply(Reply(7, 3, false, {}));
  EXPECT_EQ(Seen(view)["b"].second, 4);
}

TEST(ClusterViewTest, AnEntryWithoutAvailableIsAnIdleNode) {
  // The head leaves an idle node's available out: all of its total.
  proto::NodeInfo idle;
  idle.set_node_id("idle");
  idle.set_alive(true);
  ResourceSet::FromDoubles({{"CPU", 8}})->ToProto(idle.mutable_total());
  proto::NodeInfo busy = Node("busy", 0);
  ResourceSet::FromDoubles({{"CPU", 8}})->ToProto(busy.mutable_total());
  ClusterView view;
  view.Apply(Reply(7, 2, true, {idle, busy}));
  EXPECT_EQ(Seen(view), (SeenNodes{{"idle", {true, 8}}, {"busy", {true, 0}}}));
}

}  // namespace
}  // namespace shoal::agent
