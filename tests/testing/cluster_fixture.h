// GoogleTest fixtures over TestCluster, for tests that need a cluster per
// test.
#ifndef SHOAL_TESTS_TESTING_CLUSTER_FIXTURE_H_
#define SHOAL_TESTS_TESTING_CLUSTER_FIXTURE_H_

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "shoal/init.h"
#include "tests/testing/test_cluster.h"

namespace shoal::testing {

// One cluster for a whole test suite (SetUpTestSuite/TearDownTestSuite):
// starts `spec` into *cluster (a fatal failure when it cannot start) ...
inline void StartSuiteCluster(const ClusterSpec& spec,
                              std::unique_ptr<TestCluster>* cluster) {
  auto started = TestCluster::Start(spec);
  ASSERT_TRUE(started.ok()) << started.status();
  *cluster = std::move(*started);
}
// ... and stops it, failing the suite if any of its processes logged a
// sanitizer report.
inline void StopSuiteCluster(std::unique_ptr<TestCluster>* cluster) {
  if (*cluster == nullptr) return;
  (*cluster)->Stop();
  EXPECT_EQ((*cluster)->sanitizer_reports(), "");
  cluster->reset();
}

// Owns cluster_: stops it after the test and fails the test if any of its
// processes logged a sanitizer report.
class ClusterTest : public ::testing::Test {
 protected:
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

// A cluster per test that this process joins as its driver: connected once
// started, and shut down (shoal::Shutdown) before the cluster stops.
class DriverClusterTest : public ClusterTest {
 protected:
  // Starts cluster_ from `spec` and connects this process to it.
  void StartAndConnect(const ClusterSpec& spec) {
    auto cluster = TestCluster::Start(spec);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    cluster_->Connect();
  }
  void TearDown() override {
    shoal::Shutdown();
    ClusterTest::TearDown();
  }
};

// Two CPU hosts ("cpu-0", the head's, and "cpu-1"), 2 CPUs each, on
// loopback.
class TwoCpuHostsTest : public ClusterTest {
 protected:
  void SetUp() override {
    ClusterSpec spec;
    spec.nodes = {{"cpu-0", 2, ""}, {"cpu-1", 2, ""}};
    auto cluster = TestCluster::Start(spec);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
  }
};

// A simulated TPU slice (TestCluster::StartFakeTpuSlice) whose device trees
// live under roots_, a fresh folder removed after the test.
class FakeTpuSliceTest : public ClusterTest {
 protected:
  void StartSlice(const std::string& type, int hosts, double cpus_per_host) {
    StartSlices(type, 0, hosts, cpus_per_host);
  }
  // `slices` > 0: that many slices named "slice-<k>" (FakeTpuSlicesNodes);
  // 0: one slice of FakeTpuSliceNodes ("my-tpu").
  void StartSlices(const std::string& type, int slices, int hosts,
                   double cpus_per_host) {
    char tmpl[] = "/tmp/shoal-tpu-slice-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    roots_ = tmpl;
    auto nodes =
        slices > 0
            ? FakeTpuSlicesNodes(roots_, type, slices, hosts, cpus_per_host)
            : FakeTpuSliceNodes(roots_, type, hosts, cpus_per_host);
    ASSERT_TRUE(nodes.ok()) << nodes.status();
    ClusterSpec spec;
    spec.nodes = *nodes;
    auto cluster = TestCluster::Start(spec);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
  }
  void TearDown() override {
    ClusterTest::TearDown();
    std::error_code ec;
    if (!roots_.empty()) std::filesystem::remove_all(roots_, ec);
  }

  std::string roots_;
};

}  // namespace shoal::testing

#endif  // SHOAL_TESTS_TESTING_CLUSTER_FIXTURE_H_
