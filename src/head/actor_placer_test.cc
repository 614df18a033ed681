// ActorPlacer's choices: which node to ask, which nodes are candidates.
#include "head/actor_placer.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "head/actor_attempts.h"
#include "rpc/fake_channel.h"
#include "scheduling/resource_set.h"

namespace shoal {
namespace {

using ::testing::ElementsAre;

ResourceSet Resources(const std::map<std::string, double>& amounts) {
  absl::StatusOr<ResourceSet> set = ResourceSet::FromDoubles(amounts);
  EXPECT_TRUE(set.ok()) << set.status();
  return set.ok() ? *set : ResourceSet();
}

// ---- ChooseActorNode ----

TEST(ChooseActorNodeTest, PicksAsTheDesignSays) {
  struct Case {
    std::string what;
    std::map<std::string, double> shape;
    std::vector<ActorNode> nodes;
    std::optional<size_t> want;
  };
  auto node = [](const std::string& id, std::map<std::string, double> total,
                 std::map<std::string, double> available, int64_t actors) {
    return ActorNode{id, id + ":1", Resources(total), Resources(available),
                     actors};
  };
  std::vector<Case> cases = {
      {"no nodes", {}, {}, std::nullopt},
      {"most free CPU",
       {{"CPU", 1}},
       {node("a", {{"CPU", 8}}, {{"CPU", 2}}, 0),
        node("b", {{"CPU", 8}}, {{"CPU", 6}}, 3)},
       1},
      {"then fewest actors",
       {},
       {node("a", {{"CPU", 4}}, {{"CPU", 4}}, 2),
        node("b", {{"CPU", 4}}, {{"CPU", 4}}, 1),
        node("c", {{"CPU", 4}}, {{"CPU", 4}}, 1)},
       1},
      {"only nodes where it fits now",
       {{"GPU", 1}},
       {node("a", {{"CPU", 16}}, {{"CPU", 16}}, 0),
        node("b", {{"CPU", 2}, {"GPU", 1}}, {{"CPU", 1}, {"GPU", 1}}, 5)},
       1},
      {"else where it fits when idle",
       {{"GPU", 1}},
       {node("a", {{"CPU", 16}}, {{"CPU", 16}}, 0),
        node("b", {{"CPU", 2}, {"GPU", 1}}, {{"CPU", 2}}, 0)},
       1},
      {"else the node with the fewest actors",
       {{"GPU", 8}},
       {node("a", {{"CPU", 16}}, {{"CPU", 16}}, 4),
        node("b", {{"CPU", 2}, {"GPU", 1}}, {{"CPU", 2}}, 1)},
       1},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ChooseActorNode(Resources(c.shape), c.nodes), c.want) << c.what;
  }
}

// ---- Candidate nodes ----

class NoDelegate : public ActorPlacer::Delegate {
 public:
  const proto::ActorSpec* SpecOf(const std::string&) override {
    return nullptr;
  }
  void Granted(const std::string&, uint64_t, const std::string&,
               const std::string&, const proto::RequestLeaseReply&) override {}
  void CannotPlace(const std::string&, bool, const std::string&) override {}
  void ReturnLease(const std::string&, const std::string&) override {}
};

std::vector<std::string> Ids(const std::vector<ActorNode>& nodes) {
  std::vector<std::string> ids;
  for (const ActorNode& n : nodes) ids.push_back(n.node_id);
  return ids;
}

TEST(ActorPlacerTest, AnAgentThatDidNotAnswerIsLeftOutForAWhile) {
  rpc::ManualExecutor executor;
  ActorAttempts attempts;
  NoDelegate delegate;
  ActorPlacerOptions options;
  options.avoid_unreachable_ms = 3000;
  options.alive_nodes = [] {
    return std::vector<ActorNode>{
        {"a", "a:1", ResourceSet(), ResourceSet(), 0, {}},
        {"b", "b:1", ResourceSet(), ResourceSet(), 0, {}}};
  };
  ActorPlacer placer(&executor, options, &attempts, &delegate);
  EXPECT_THAT(Ids(placer.CandidateNodes()), ElementsAre("a", "b"));
  placer.NoteUnreachable("a:1");
  EXPECT_THAT(Ids(placer.CandidateNodes()), ElementsAre("b"));
  executor.AdvanceMs(3000);
  EXPECT_THAT(Ids(placer.CandidateNodes()), ElementsAre("b"));
  executor.AdvanceMs(1);
  EXPECT_THAT(Ids(placer.CandidateNodes()), ElementsAre("a", "b"));
  // With every agent unanswering, all stay candidates.
  placer.NoteUnreachable("a:1");
  placer.NoteUnreachable("b:1");
  EXPECT_THAT(Ids(placer.CandidateNodes()), ElementsAre("a", "b"));
}

TEST(ActorPlacerTest, CandidatesCountTheActorsOnEachNode) {
  rpc::ManualExecutor executor;
  ActorAttempts attempts;
  attempts.Get("x").node_id = "b";
  attempts.Get("y").node_id = "b";
  attempts.Get("z").node_id = "";  // not placed yet
  NoDelegate delegate;
  ActorPlacerOptions options;
  options.alive_nodes = [] {
    return std::vector<ActorNode>{
        {"a", "a:1", ResourceSet(), ResourceSet(), 7, {}},
        {"b", "b:1", ResourceSet(), ResourceSet(), 0, {}}};
  };
  ActorPlacer placer(&executor, options, &attempts, &delegate);
  std::vector<ActorNode> nodes = placer.CandidateNodes();
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].num_actors, 0);
  EXPECT_EQ(nodes[1].num_actors, 2);
}

}  // namespace
}  // namespace shoal
