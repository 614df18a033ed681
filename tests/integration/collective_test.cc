// Collective groups against a real cluster: ranks started by `shoal launch
// --per-device` meet through the head's key-value store (ClusterStore) and
// all-reduce; a rank that dies mid-run is named by the others.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::testing::ClusterSpec;
using ::shoal::testing::RunCli;
using ::shoal::testing::TestCluster;
using ::testing::HasSubstr;

class CollectiveClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ClusterSpec spec;
    spec.nodes = {{"cpu-0", 2, ""}, {"cpu-1", 2, ""}};
    auto cluster = TestCluster::Start(spec);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
  }
  void TearDown() override {
    if (cluster_) cluster_->Stop();
  }

  // 4 ranks: 2 nodes x 2 processes.
  int Launch(const std::string& mode, std::string* out) {
    return RunCli({"launch", "--address", cluster_->address(), "--token",
                   cluster_->token(), "--per-device", "--nodes", "2",
                   "--nproc-per-node", "2", "--", COLLECTIVE_HELPER, mode},
                  out);
  }

  std::unique_ptr<TestCluster> cluster_;
};

TEST_F(CollectiveClusterTest, LaunchedRanksMeetThroughTheHeadAndAllReduce) {
  std::string out;
  ASSERT_EQ(Launch("allreduce", &out), 0) << out;
  for (int rank = 0; rank < 4; ++rank) {
    // Both nodes run on this machine: one host, shared memory.
    EXPECT_THAT(out, HasSubstr("rank " + std::to_string(rank) +
                               " of 4 backend shared-memory all-reduce ok"))
        << out;
  }
}

TEST_F(CollectiveClusterTest, ARankThatDiesIsNamedByTheOthers) {
  std::string out;
  EXPECT_NE(Launch("die", &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("rank 3 leaving")) << out;
  EXPECT_THAT(out, HasSubstr("all-reduce of group 'it' failed: rank 3 (pid "))
      << out;
  EXPECT_THAT(out, HasSubstr("died")) << out;
}

}  // namespace
