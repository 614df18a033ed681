// Tasks that wait for the tasks they submit: a worker blocked in Get or Wait
// lends its CPU to the node meanwhile, so recursion finishes on a cluster
// smaller than the recursion (docs/design/actors.md, "Blocked workers").
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "shoal/api.h"
#include "tests/testing/agent_info.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::testing::ClusterSpec;
using ::shoal::testing::DriverClusterTest;

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
// A chain of `n` tasks, each waiting for the next: n - 1 workers wait at
// once, one level of nesting each.
int64_t Chain(int64_t n) {
  if (n <= 1) return 1;
  return 1 + shoal::Get(shoal::Task(Chain).Remote(n - 1));
}
SHOAL_REMOTE(Fib, Tree, Chain);

class NestedTest : public DriverClusterTest {
 protected:
  void StartNode(double cpus) {
    ClusterSpec spec;
    spec.nodes = {{"only", cpus, ""}};
    StartAndConnect(spec);
  }
  // How many worker processes the node has started and kept (idle ones
  // stay for the idle timeout, longer than these tests).
  int64_t Workers() {
    std::vector<shoal::NodeInfo> nodes = shoal::Nodes();
    if (nodes.size() != 1) return -1;
    auto info =
        shoal::testing::FetchAgentInfo(nodes[0].address, cluster_->token());
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? info->num_workers() : -1;
  }
};

TEST_F(NestedTest, RecursiveFibFinishesOnOneCpu) {
  StartNode(1);
  EXPECT_EQ(shoal::Get(shoal::Task(Fib).Remote(12), 300000), 144);
  // The bound (docs/design/actors.md): CPUs x levels of nesting, 1 x 12.
  int64_t workers = Workers();
  EXPECT_GE(workers, 1);
  EXPECT_LE(workers, 12);
}

TEST_F(NestedTest, TreeOfAHundredNestedTasksFinishesOnOneCpu) {
  StartNode(1);
  EXPECT_EQ(shoal::Get(shoal::Task(Tree).Remote(100), 300000), 100);
}

// Every level waits at once: each blocked worker's CPU passes to the next
// level, however deep the chain.
TEST_F(NestedTest, ChainFortyDeepFinishesOnOneCpu) {
  StartNode(1);
  EXPECT_EQ(shoal::Get(shoal::Task(Chain).Remote(40), 300000), 40);
}

TEST_F(NestedTest, TreeOfAThousandNestedTasksFinishesOnTwoCpus) {
  StartNode(2);
  EXPECT_EQ(shoal::Get(shoal::Task(Tree).Remote(1000), 600000), 1000);
  // 1000, 500, 250, ... 3, 1: ten levels, so at most 2 x 10 workers.
  int64_t workers = Workers();
  EXPECT_GE(workers, 1);
  EXPECT_LE(workers, 20);
}

}  // namespace
