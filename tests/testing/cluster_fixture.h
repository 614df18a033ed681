// GoogleTest fixtures over TestCluster, for tests that need a cluster per
// test.
#ifndef SHOAL_TESTS_TESTING_CLUSTER_FIXTURE_H_
#define SHOAL_TESTS_TESTING_CLUSTER_FIXTURE_H_

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/test_cluster.h"

namespace shoal::testing {

// Two CPU hosts ("cpu-0", the head's, and "cpu-1"), 2 CPUs each, on
// loopback. Fails the test if any of their processes logged a sanitizer
// report.
class TwoCpuHostsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ClusterSpec spec;
    spec.nodes = {{"cpu-0", 2, ""}, {"cpu-1", 2, ""}};
    auto cluster = TestCluster::Start(spec);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
  }
  void TearDown() override {
    if (cluster_) {
      cluster_->Stop();
      EXPECT_EQ(cluster_->sanitizer_reports(), "");
    }
  }

  // `shoal launch ARGS` against the cluster.
  int Launch(const std::vector<std::string>& args, std::string* out) const {
    std::vector<std::string> argv = {"launch", "--address", cluster_->address(),
                                     "--token", cluster_->token()};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCli(argv, out);
  }

  std::unique_ptr<TestCluster> cluster_;
};

}  // namespace shoal::testing

#endif  // SHOAL_TESTS_TESTING_CLUSTER_FIXTURE_H_
