// Collective groups against a real cluster: ranks started by `shoal launch
// --per-device` meet through the head's key-value store (ClusterStore) and
// all-reduce; a rank that dies mid-run is named by the others.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster_fixture.h"

namespace {

using ::shoal::testing::TwoCpuHostsTest;
using ::testing::HasSubstr;

class CollectiveClusterTest : public TwoCpuHostsTest {
 protected:
  // 4 ranks: 2 nodes x 2 processes.
  int Launch(const std::string& mode, std::string* out) {
    return TwoCpuHostsTest::Launch(
        {"--per-device", "--nodes", "2", "--nproc-per-node", "2", "--",
         COLLECTIVE_HELPER, mode},
        out);
  }
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
