#include "agent/bundle_reservations.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace shoal::agent {
namespace {

ResourceSet R(const std::map<std::string, double>& amounts) {
  return *ResourceSet::FromDoubles(amounts);
}

class BundleReservationsTest : public ::testing::Test {
 protected:
  const ResourceSet node_total_ = R({{"CPU", 8}, {"TPU", 4}});
  NodeResources node_{node_total_, node_total_};
  BundleReservations bundles_{"n1", &node_};
};

TEST_F(BundleReservationsTest, PrepareHoldsCommitAddsBundleResources) {
  ASSERT_TRUE(bundles_
                  .Prepare("pg", {{0, R({{"CPU", 1}, {"TPU", 4}})},
                                  {1, R({{"CPU", 2}})}})
                  .ok());
  EXPECT_TRUE(bundles_.IsPrepared("pg"));
  EXPECT_EQ(node_.available, R({{"CPU", 5}}));
  EXPECT_EQ(node_.total, node_total_);

  ASSERT_TRUE(bundles_.Commit("pg").ok());
  EXPECT_FALSE(bundles_.IsPrepared("pg"));
  EXPECT_TRUE(bundles_.IsCommitted("pg"));
  ResourceSet added = R({{"CPU_group_0_pg", 1},
                         {"TPU_group_0_pg", 4},
                         {"CPU_group_1_pg", 2},
                         {"CPU_group_pg", 3},
                         {"TPU_group_pg", 4}});
  ResourceSet total = node_total_;
  total.Add(added);
  ResourceSet available = R({{"CPU", 5}});
  available.Add(added);
  EXPECT_EQ(node_.total, total);
  EXPECT_EQ(node_.available, available);

  bundles_.Cancel("pg");
  EXPECT_FALSE(bundles_.IsCommitted("pg"));
  EXPECT_EQ(node_.total, node_total_);
  EXPECT_EQ(node_.available, node_total_);
}

TEST_F(BundleReservationsTest, RetriesChangeNothing) {
  ASSERT_TRUE(bundles_.Prepare("pg", {{0, R({{"CPU", 2}})}}).ok());
  ASSERT_TRUE(bundles_.Prepare("pg", {{0, R({{"CPU", 2}})}}).ok());
  EXPECT_EQ(node_.available, R({{"CPU", 6}, {"TPU", 4}}));
  ASSERT_TRUE(bundles_.Commit("pg").ok());
  ResourceSet after_commit = node_.available;
  ASSERT_TRUE(bundles_.Commit("pg").ok());
  ASSERT_TRUE(bundles_.Prepare("pg", {{0, R({{"CPU", 2}})}}).ok());
  EXPECT_EQ(node_.available, after_commit);
  bundles_.Cancel("pg");
  bundles_.Cancel("pg");
  EXPECT_EQ(node_.available, node_total_);
}

TEST_F(BundleReservationsTest, PrepareFailsWhenNotFreeAndTakesNothing) {
  absl::Status st = bundles_.Prepare(
      "pg", {{0, R({{"CPU", 4}})}, {1, R({{"CPU", 4}, {"TPU", 8}})}});
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(st.message(), "node n1 no longer has"))
      << st.message();
  EXPECT_FALSE(bundles_.IsPrepared("pg"));
  EXPECT_EQ(node_.available, node_total_);
}

TEST_F(BundleReservationsTest, PrepareRefusesCpuTheNodeOwes) {
  // Over-committed: a blocked worker took back CPU granted to another lease.
  node_.available.Set("CPU", -kResourceUnit);
  EXPECT_FALSE(bundles_.Prepare("pg", {{0, R({{"CPU", 1}})}}).ok());
  EXPECT_TRUE(bundles_.Prepare("pg", {{0, R({{"TPU", 1}})}}).ok());
}

TEST_F(BundleReservationsTest, CommitWithoutPrepareIsNotFound) {
  absl::Status st = bundles_.Commit("pg");
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(st.message(), "the head will place it again"))
      << st.message();
}

TEST_F(BundleReservationsTest, CancelOfPreparedGivesBackTheHold) {
  ASSERT_TRUE(bundles_.Prepare("pg", {{0, R({{"TPU", 4}})}}).ok());
  bundles_.Cancel("pg");
  EXPECT_FALSE(bundles_.IsPrepared("pg"));
  EXPECT_EQ(node_.available, node_total_);
  EXPECT_EQ(bundles_.Commit("pg").code(), absl::StatusCode::kNotFound);
}

TEST_F(BundleReservationsTest, CancelWhileALeaseHoldsABundle) {
  ASSERT_TRUE(bundles_.Prepare("pg", {{0, R({{"CPU", 2}})}}).ok());
  ASSERT_TRUE(bundles_.Commit("pg").ok());
  // A lease in the bundle holds its CPU.
  ResourceSet lease = R({{"CPU_group_0_pg", 2}});
  node_.available.Subtract(lease);
  bundles_.Cancel("pg");
  // Until the lease ends the group's resources are owed, so that nothing
  // is granted with them.
  EXPECT_TRUE(node_.OverCommitted());
  node_.available.Add(lease);  // the agent ends the lease
  EXPECT_EQ(node_.available, node_total_);
  EXPECT_EQ(node_.total, node_total_);
}

}  // namespace
}  // namespace shoal::agent
