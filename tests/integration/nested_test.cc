// Tasks that wait for the tasks they submit: a worker blocked in Get or Wait
// lends its CPU to the node meanwhile, so recursion finishes on a cluster
// smaller than the recursion (docs/design/actors.md, "Blocked workers").
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "shoal/api.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::testing::ClusterSpec;
using ::shoal::testing::ClusterTest;
using ::shoal::testing::TestCluster;

int64_t Fib(int64_t n) {
  if (n < 2) return n;
  auto a = shoal::Task(Fib).Remote(n - 1);
  auto b = shoal::Task(Fib).Remote(n - 2);
  return shoal::Get(a) + shoal::Get(b);
}

// A tree of `n` tasks (this one included): each splits the rest between two
// children and waits for both with Wait, then Get.
int64_t Tree(int64_t n) {
  if (n <= 1) return 1;
  int64_t left = (n - 1) / 2;
  int64_t right = n - 1 - left;
  std::vector<shoal::ObjectRef<int64_t>> children;
  if (left > 0) children.push_back(shoal::Task(Tree).Remote(left));
  if (right > 0) children.push_back(shoal::Task(Tree).Remote(right));
  shoal::Wait(children, children.size());
  int64_t total = 1;
  for (int64_t c : shoal::Get(children)) total += c;
  return total;
}
SHOAL_REMOTE(Fib, Tree);

class NestedTest : public ClusterTest {
 protected:
  void StartNode(double cpus) {
    ClusterSpec spec;
    spec.nodes = {{"only", cpus, ""}};
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

TEST_F(NestedTest, RecursiveFibFinishesOnOneCpu) {
  StartNode(1);
  EXPECT_EQ(shoal::Get(shoal::Task(Fib).Remote(12), 300000), 144);
}

TEST_F(NestedTest, TreeOfAHundredNestedTasksFinishesOnOneCpu) {
  StartNode(1);
  EXPECT_EQ(shoal::Get(shoal::Task(Tree).Remote(100), 300000), 100);
}

TEST_F(NestedTest, TreeOfAThousandNestedTasksFinishesOnTwoCpus) {
  StartNode(2);
  EXPECT_EQ(shoal::Get(shoal::Task(Tree).Remote(1000), 600000), 1000);
}

}  // namespace
