#include "head/placement_group_manager.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "head/head_fakes_testing.h"
#include "head/table_storage.h"
#include "scheduling/resource_set.h"

namespace shoal {
namespace {

using ::shoal::testing::FakeAgents;
using ::shoal::testing::FakeTimers;
using ::shoal::testing::Resources;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

class PlacementGroupManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* id : {"n1", "n2", "n3"}) AddNode(id);
    PlacementGroupManagerOptions options;
    options.infeasible_grace_ms = 1000;
    options.retry_ms = 200;
    options.call_agent = agents_.caller();
    options.run_after = time_.runner();
    options.now_us = time_.clock();
    options.node = [this](const std::string& id) -> const proto::NodeInfo* {
      auto it = nodes_.find(id);
      return it == nodes_.end() ? nullptr : &it->second;
    };
    options.placement_nodes = [this](bool use_totals) {
      std::vector<PlacementNode> out;
      for (const auto& [id, n] : nodes_) {
        if (!n.alive()) continue;
        out.push_back({id, ResourceSet::FromProto(use_totals ? n.total()
                                                             : n.available())});
      }
      return out;
    };
    options.storage = storage_.get();
    pgs_ = std::make_unique<PlacementGroupManager>(std::move(options));
  }

  void AddNode(const std::string& id) {
    proto::NodeInfo& n = nodes_[id];
    n.set_node_id(id);
    n.set_address(id + ":1");
    n.set_alive(true);
    *n.mutable_total() = Resources({{"CPU", 2}});
    *n.mutable_available() = n.total();
  }

  std::string Create(int bundles, proto::PlacementStrategy strategy,
                     const std::string& job = "job1", bool detached = false) {
    proto::PlacementGroupSpec spec;
    spec.set_strategy(strategy);
    spec.set_detached(detached);
    for (int i = 0; i < bundles; ++i) {
      *spec.add_bundles() = Resources({{"CPU", 1}});
    }
    absl::StatusOr<proto::PlacementGroupInfo> info = pgs_->Create(spec, job);
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? info->pg_id() : "";
  }

  proto::PlacementGroupInfo Get(const std::string& id) {
    proto::GetPlacementGroupRequest r;
    r.set_pg_id(id);
    absl::StatusOr<proto::PlacementGroupInfo> info = pgs_->Get(r);
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? *info : proto::PlacementGroupInfo();
  }

  // The agents' addresses the waiting calls of `method` went to.
  std::vector<std::string> To(int method) {
    std::vector<std::string> out;
    for (size_t i : agents_.Waiting(method)) {
      out.push_back(agents_.call(i).address);
    }
    return out;
  }

  // Creates a STRICT_SPREAD group of `bundles` and answers every agent.
  std::string CreatePlaced(int bundles) {
    const std::string id = Create(bundles, proto::STRICT_SPREAD);
    agents_.AnswerAll(proto::PREPARE_BUNDLES);
    agents_.AnswerAll(proto::COMMIT_BUNDLES);
    EXPECT_EQ(Get(id).state(), proto::PlacementGroupInfo::CREATED);
    return id;
  }

  FakeAgents agents_;
  FakeTimers time_;
  std::map<std::string, proto::NodeInfo> nodes_;
  std::unique_ptr<TableStorage> storage_ = NewInMemoryTableStorage();
  std::unique_ptr<PlacementGroupManager> pgs_;
};

TEST_F(PlacementGroupManagerTest, BundlesArePreparedEverywhereThenCommitted) {
  const std::string id = Create(2, proto::STRICT_SPREAD);
  std::vector<size_t> prepares = agents_.Waiting(proto::PREPARE_BUNDLES);
  ASSERT_EQ(prepares.size(), 2u);
  proto::BundleReservation asked =
      agents_.RequestOf<proto::BundleReservation>(prepares[0]);
  EXPECT_EQ(asked.pg_id(), id);
  EXPECT_EQ(asked.indices_size(), 1);
  agents_.Answer(prepares[0], proto::Empty());
  // Nothing is committed before every node prepared.
  EXPECT_EQ(agents_.Count(proto::COMMIT_BUNDLES), 0u);
  agents_.Answer(prepares[1], proto::Empty());
  ASSERT_EQ(agents_.Waiting(proto::COMMIT_BUNDLES).size(), 2u);
  EXPECT_EQ(Get(id).state(), proto::PlacementGroupInfo::PENDING);
  agents_.AnswerAll(proto::COMMIT_BUNDLES);
  proto::PlacementGroupInfo info = Get(id);
  EXPECT_EQ(info.state(), proto::PlacementGroupInfo::CREATED);
  EXPECT_EQ(info.bundle_nodes_size(), 2);
}

TEST_F(PlacementGroupManagerTest, ANodeThatRefusesSendsTheGroupBackInLine) {
  const std::string id = Create(2, proto::STRICT_SPREAD);
  std::vector<size_t> prepares = agents_.Waiting(proto::PREPARE_BUNDLES);
  ASSERT_EQ(prepares.size(), 2u);
  const std::string ok_agent = agents_.call(prepares[0]).address;
  agents_.Answer(prepares[0], proto::Empty());
  agents_.Fail(prepares[1], absl::ResourceExhaustedError("taken"));
  // What was prepared is cancelled; nothing is committed.
  EXPECT_THAT(To(proto::CANCEL_BUNDLES), ElementsAre(ok_agent));
  EXPECT_EQ(agents_.Count(proto::COMMIT_BUNDLES), 0u);
  EXPECT_EQ(Get(id).state(), proto::PlacementGroupInfo::PENDING);
  // It goes back in line, and, the only group, is tried again at once.
  EXPECT_EQ(agents_.Waiting(proto::PREPARE_BUNDLES).size(), 2u);
  EXPECT_EQ(agents_.Count(proto::PREPARE_BUNDLES), 4u);
  agents_.AnswerAll(proto::PREPARE_BUNDLES);
  agents_.AnswerAll(proto::COMMIT_BUNDLES);
  EXPECT_EQ(Get(id).state(), proto::PlacementGroupInfo::CREATED);
}

TEST_F(PlacementGroupManagerTest, OneGroupIsPlacedAtATime) {
  const std::string first = Create(1, proto::PACK);
  const std::string second = Create(1, proto::PACK);
  EXPECT_EQ(agents_.Waiting(proto::PREPARE_BUNDLES).size(), 1u);
  agents_.AnswerAll(proto::PREPARE_BUNDLES);
  agents_.AnswerAll(proto::COMMIT_BUNDLES);
  EXPECT_EQ(Get(first).state(), proto::PlacementGroupInfo::CREATED);
  // The second's turn came when the first was done.
  EXPECT_EQ(agents_.Waiting(proto::PREPARE_BUNDLES).size(), 1u);
  agents_.AnswerAll(proto::PREPARE_BUNDLES);
  agents_.AnswerAll(proto::COMMIT_BUNDLES);
  EXPECT_EQ(Get(second).state(), proto::PlacementGroupInfo::CREATED);
}

TEST_F(PlacementGroupManagerTest, AGroupThatNeverFitsFailsAfterTheGrace) {
  const std::string id = Create(4, proto::STRICT_SPREAD);  // 3 nodes
  EXPECT_EQ(agents_.Count(proto::PREPARE_BUNDLES), 0u);
  time_.Advance(900);
  EXPECT_EQ(Get(id).state(), proto::PlacementGroupInfo::PENDING);
  time_.Advance(400);
  EXPECT_EQ(Get(id).state(), proto::PlacementGroupInfo::FAILED);
  EXPECT_THAT(Get(id).error(), HasSubstr("add nodes"));
}

TEST_F(PlacementGroupManagerTest, ADeadNodesBundlesArePlacedOnAnother) {
  const std::string id = CreatePlaced(2);
  proto::PlacementGroupInfo info = Get(id);
  const std::string lost = info.bundle_nodes(1);
  nodes_[lost].set_alive(false);
  pgs_->NodeDied(nodes_[lost], "host down");
  EXPECT_EQ(Get(id).state(), proto::PlacementGroupInfo::PENDING);
  EXPECT_THAT(Get(id).error(), HasSubstr("being placed again"));
  time_.Advance(200);
  std::vector<size_t> prepares = agents_.Waiting(proto::PREPARE_BUNDLES);
  ASSERT_EQ(prepares.size(), 1u);
  const std::string to = agents_.call(prepares[0]).address;
  EXPECT_NE(to, lost + ":1");
  EXPECT_NE(to, info.bundle_nodes(0) + ":1");
  EXPECT_THAT(
      agents_.RequestOf<proto::BundleReservation>(prepares[0]).indices(),
      ElementsAre(1));
  agents_.AnswerAll(proto::PREPARE_BUNDLES);
  agents_.AnswerAll(proto::COMMIT_BUNDLES);
  info = Get(id);
  EXPECT_EQ(info.state(), proto::PlacementGroupInfo::CREATED);
  EXPECT_EQ(info.bundle_nodes(1) + ":1", to);
}

TEST_F(PlacementGroupManagerTest, ANodeThatDiesWhilePreparingIsNotUsed) {
  const std::string id = Create(1, proto::PACK);
  std::vector<size_t> prepares = agents_.Waiting(proto::PREPARE_BUNDLES);
  ASSERT_EQ(prepares.size(), 1u);
  const std::string node = agents_.call(prepares[0]).address.substr(0, 2);
  nodes_[node].set_alive(false);
  agents_.Answer(prepares[0], proto::Empty());
  // Its commit fails at once; the group is placed again on another node.
  EXPECT_EQ(agents_.Count(proto::COMMIT_BUNDLES), 0u);
  EXPECT_EQ(Get(id).state(), proto::PlacementGroupInfo::PENDING);
  prepares = agents_.Waiting(proto::PREPARE_BUNDLES);
  ASSERT_EQ(prepares.size(), 1u);
  EXPECT_NE(agents_.call(prepares[0]).address, node + ":1");
  agents_.AnswerAll(proto::PREPARE_BUNDLES);
  agents_.AnswerAll(proto::COMMIT_BUNDLES);
  EXPECT_EQ(Get(id).state(), proto::PlacementGroupInfo::CREATED);
}

TEST_F(PlacementGroupManagerTest, AJobsGroupsEndWithItUnlessDetached) {
  const std::string mine = CreatePlaced(2);
  const std::string kept = Create(1, proto::PACK, "job1", /*detached=*/true);
  agents_.AnswerAll(proto::PREPARE_BUNDLES);
  agents_.AnswerAll(proto::COMMIT_BUNDLES);
  pgs_->JobEnded("job1");
  EXPECT_EQ(Get(mine).state(), proto::PlacementGroupInfo::REMOVED);
  EXPECT_EQ(Get(kept).state(), proto::PlacementGroupInfo::CREATED);
  EXPECT_EQ(agents_.Waiting(proto::CANCEL_BUNDLES).size(), 2u);
}

TEST_F(PlacementGroupManagerTest, RemovedWhilePreparingIsCancelledEverywhere) {
  const std::string id = Create(2, proto::STRICT_SPREAD);
  proto::GetPlacementGroupRequest r;
  r.set_pg_id(id);
  pgs_->Remove(r);
  agents_.AnswerAll(proto::PREPARE_BUNDLES);
  EXPECT_EQ(agents_.Waiting(proto::CANCEL_BUNDLES).size(), 2u);
  EXPECT_EQ(agents_.Count(proto::COMMIT_BUNDLES), 0u);
  EXPECT_EQ(Get(id).state(), proto::PlacementGroupInfo::REMOVED);
  // Removing what is not there is no error.
  r.set_pg_id("nope");
  pgs_->Remove(r);
  EXPECT_EQ(pgs_->Get(r).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(PlacementGroupManagerTest, ANodeBackWithStaleBundlesReleasesThem) {
  proto::NodeInfo back = nodes_["n1"];
  (*back.mutable_total()->mutable_amounts())["CPU_group_0_c0ffee000000"] = 1000;
  pgs_->NodeRegistered(back);
  std::vector<size_t> cancels = agents_.Waiting(proto::CANCEL_BUNDLES);
  ASSERT_EQ(cancels.size(), 1u);
  EXPECT_EQ(agents_.RequestOf<proto::BundleReservation>(cancels[0]).pg_id(),
            "c0ffee000000");
  EXPECT_EQ(agents_.call(cancels[0]).address, "n1:1");
}

TEST_F(PlacementGroupManagerTest, ARestartedHeadPlacesPendingGroupsAgain) {
  const std::string created = CreatePlaced(1);
  const std::string pending = Create(1, proto::PACK);
  pgs_.reset();
  PlacementGroupManagerOptions options;
  options.call_agent = agents_.caller();
  options.run_after = time_.runner();
  options.now_us = time_.clock();
  options.node = [this](const std::string& id) { return &nodes_[id]; };
  options.placement_nodes = [this](bool) {
    return std::vector<PlacementNode>{
        {"n3", ResourceSet::FromProto(nodes_["n3"].total())}};
  };
  options.storage = storage_.get();
  const size_t before = agents_.Count(proto::PREPARE_BUNDLES);
  pgs_ = std::make_unique<PlacementGroupManager>(std::move(options));
  EXPECT_EQ(pgs_->Restore(), 2u);
  EXPECT_EQ(agents_.Count(proto::PREPARE_BUNDLES), before + 1);
  EXPECT_EQ(Get(created).state(), proto::PlacementGroupInfo::CREATED);
  EXPECT_EQ(Get(pending).state(), proto::PlacementGroupInfo::PENDING);
}

}  // namespace
}  // namespace shoal
