// ActorAttempts: which attempt is current, and what the head knows of the
// actors' leases and nodes.
#include "head/actor_attempts.h"

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/channel.h"

namespace shoal {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

TEST(ActorAttemptsTest, OnlyTheCurrentAttemptIsFound) {
  ActorAttempts attempts;
  EXPECT_EQ(attempts.Find("a1"), nullptr);
  ActorAttempt& a = attempts.Get("a1");
  a.number = 3;
  EXPECT_EQ(attempts.Find("a1", 3), &a);
  EXPECT_EQ(attempts.Find("a1", 2), nullptr);
  EXPECT_EQ(attempts.Find("a2", 3), nullptr);
  attempts.Erase("a1");
  EXPECT_FALSE(attempts.Has("a1"));
}

TEST(ActorAttemptsTest, ForgettingAWorkerMovesTheAttemptOnAndNamesItsLease) {
  ActorAttempt a;
  a.number = 1;
  a.agent = "agent:1";
  a.node_id = "n1";
  a.lease_id = "lease-1";
  a.worker_id = "w1";
  a.worker_address = "w:1";
  a.worker_pid = 42;
  std::pair<std::string, std::string> lease;
  EXPECT_EQ(ActorAttempts::ForgetWorker(a, &lease), nullptr);
  EXPECT_EQ(a.number, 2u);
  EXPECT_THAT(lease, Pair("agent:1", "lease-1"));
  EXPECT_TRUE(a.lease_id.empty());
  EXPECT_TRUE(a.worker_id.empty());
  EXPECT_TRUE(a.worker_address.empty());
  EXPECT_EQ(a.worker_pid, 0);
  EXPECT_EQ(a.node_id, "n1");  // where it was placed stays known
  // Nothing held: no lease to return.
  ActorAttempts::ForgetWorker(a, &lease);
  EXPECT_THAT(lease, Pair("", ""));
  EXPECT_EQ(a.number, 3u);
}

TEST(ActorAttemptsTest, NodesKnowTheirActorsLeasedAndPlacing) {
  ActorAttempts attempts;
  ActorAttempt& leased = attempts.Get("leased");
  leased.node_id = "n1";
  leased.lease_id = "l1";
  leased.number = 5;
  ActorAttempt& placing = attempts.Get("placing");
  placing.node_id = "n1";
  placing.placing = true;
  attempts.Get("idle").node_id = "n1";  // neither
  attempts.Get("elsewhere").node_id = "n2";
  std::vector<std::pair<std::string, uint64_t>> lost;
  std::vector<std::string> moved;
  attempts.OnNode("n1", &lost, &moved);
  EXPECT_THAT(lost, ElementsAre(Pair("leased", 5u)));
  EXPECT_THAT(moved, ElementsAre("placing"));
  EXPECT_THAT(attempts.ActorsPerNode(),
              ElementsAre(Pair("n1", 3), Pair("n2", 1)));
}

TEST(ActorAttemptsTest, AnotherLeaseOfAnActorInALeaseIsStale) {
  ActorAttempts attempts;
  ActorAttempt& a = attempts.Get("a1");
  a.lease_id = "l2";
  EXPECT_TRUE(attempts.HoldsAnotherLease("a1", "l1"));
  EXPECT_FALSE(attempts.HoldsAnotherLease("a1", "l2"));
  EXPECT_FALSE(attempts.HoldsAnotherLease("unknown", "l1"));
  EXPECT_EQ(attempts.LeaseOf("a1"), "l2");
  // While placing, a lease being granted is not known yet: not stale.
  a.placing = true;
  EXPECT_FALSE(attempts.HoldsAnotherLease("a1", "l1"));
}

}  // namespace
}  // namespace shoal
