// `shoal dev sim-nodes` against a real head: simulated nodes register and
// heartbeat, run a driver's no-op tasks, hold a placement group, host a
// simulated TPU slice with a real host's resources and labels, and die as
// nodes do when their process is killed.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shoal/api.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::PlacementStrategy;
using ::shoal::testing::ClusterSpec;
using ::shoal::testing::ClusterTest;
using ::shoal::testing::FinishCli;
using ::shoal::testing::RunCli;
using ::shoal::testing::StartCli;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using json = nlohmann::json;

void Noop() {}
SHOAL_REMOTE(Noop);

class SimNodesTest : public ClusterTest {
 protected:
  void SetUp() override {
    ClusterSpec spec;
    spec.nodes = {{"head", 1, ""}};
    // Hundreds of nodes on one loop, slower still under a sanitizer: a
    // late heartbeat must not make a node dead.
    spec.health_timeout_ms = 10000;
    auto cluster = shoal::testing::TestCluster::Start(spec);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
  }
  void TearDown() override {
    StopSim(SIGKILL);
    shoal::Shutdown();
    ClusterTest::TearDown();
  }

  void StartSim(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"dev",       "sim-nodes",
                                     "--address", cluster_->address(),
                                     "--token",   cluster_->token()};
    argv.insert(argv.end(), args.begin(), args.end());
    sim_pid_ = StartCli(argv, &sim_fd_);
    ASSERT_GT(sim_pid_, 0);
  }
  // Sends `sig` to the simulator and returns its exit code (-1: none runs).
  int StopSim(int sig) {
    if (sim_pid_ <= 0) return -1;
    kill(sim_pid_, sig);
    int code = FinishCli(sim_pid_, sim_fd_, &sim_output_);
    sim_pid_ = -1;
    return code;
  }

  json Status() {
    std::string out;
    int code = RunCli({"status", "--address", cluster_->address(), "--token",
                       cluster_->token(), "--format", "json"},
                      &out);
    if (code != 0) return json::object();
    json parsed = json::parse(out, nullptr, /*allow_exceptions=*/false);
    return parsed.is_discarded() ? json::object() : parsed;
  }
  // The nodes whose id starts with `prefix`, from `shoal status`.
  std::vector<json> Nodes(const std::string& prefix, bool alive) {
    std::vector<json> out;
    for (const auto& n : Status().value("nodes", json::array())) {
      if (n.value("node_id", "").rfind(prefix, 0) != 0) continue;
      if ((n.value("state", "") == "ALIVE") == alive) out.push_back(n);
    }
    return out;
  }
  // Polls until `count` nodes of `prefix` are alive (or dead), up to
  // `timeout_ms`; the last count seen.
  size_t WaitForNodes(const std::string& prefix, size_t count, bool alive,
                      int timeout_ms) {
    auto deadline = std::chrono::steady_clock::now() +
                    std::chrono::milliseconds(timeout_ms);
    size_t seen = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      seen = Nodes(prefix, alive).size();
      if (seen >= count) return seen;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return seen;
  }

  pid_t sim_pid_ = -1;
  int sim_fd_ = -1;
  std::string sim_output_;
};

TEST_F(SimNodesTest, TwoHundredNodesRunTasksHoldAGroupAndDieWhenKilled) {
  StartSim(
      {"--count", "200", "--num-cpus", "2", "--resources", R"({"sim": 1})"});
  ASSERT_EQ(WaitForNodes("sim-", 200, /*alive=*/true, 60000), 200u);
  json status = Status();
  size_t alive = 0;
  for (const auto& n : status["nodes"]) alive += n["state"] == "ALIVE";
  EXPECT_GE(alive, 201u);  // and the head's own node

  // Only simulated nodes have "sim": the head node's agent spills every
  // task back to them, and their fake workers answer.
  cluster_->Connect();
  std::vector<shoal::ObjectRef<void>> refs;
  for (int i = 0; i < 400; ++i) {
    refs.push_back(shoal::Task(Noop).SetResources({{"sim", 1}}).Remote());
  }
  for (const auto& ref : refs) shoal::Get(ref, 60000);

  // A task asks for a CPU besides "sim" (the default), so each bundle
  // holds both.
  std::vector<std::map<std::string, double>> bundles(100,
                                                     {{"CPU", 1}, {"sim", 1}});
  auto pg = shoal::CreatePlacementGroup(
      {"spread-100", bundles, PlacementStrategy::kStrictSpread});
  ASSERT_TRUE(pg.Wait(60000));
  std::vector<std::string> placed = pg.BundleNodes();
  ASSERT_EQ(placed.size(), 100u);
  EXPECT_EQ(std::set<std::string>(placed.begin(), placed.end()).size(), 100u);
  for (const auto& node : placed) EXPECT_THAT(node, StartsWith("sim-"));
  // A task of the group runs in its bundle, on a simulated node.
  shoal::Get(shoal::Task(Noop)
                 .SetResources({{"sim", 1}})
                 .SetPlacementGroup(pg, 7)
                 .Remote(),
             60000);
  shoal::RemovePlacementGroup(pg);

  // Killed at once: no node unregisters, and the head finds them silent.
  EXPECT_NE(StopSim(SIGKILL), 0);
  ASSERT_EQ(WaitForNodes("sim-", 200, /*alive=*/false, 10000 + 10000), 200u);
  EXPECT_THAT(Nodes("sim-", false)[0].value("death_reason", ""),
              HasSubstr("heartbeat"));
  EXPECT_THAT(sim_output_, HasSubstr("200 simulated nodes registered"));
}

TEST_F(SimNodesTest, AV5p2048SliceRegistersAsRealHostsAndIsReservedWhole) {
  StartSim({"--count", "256", "--num-cpus", "1", "--tpu-type", "v5p-2048",
            "--node-id-prefix", "tpu"});
  ASSERT_EQ(WaitForNodes("tpu-", 256, /*alive=*/true, 60000), 256u);
  std::vector<json> hosts = Nodes("tpu-", true);
  std::set<std::string> worker_ids;
  int heads = 0;
  for (const auto& n : hosts) {
    const json& labels = n["labels"];
    EXPECT_EQ(labels.value("shoal.io/tpu-pod-type", ""), "v5p-2048");
    EXPECT_EQ(labels.value("shoal.io/tpu-slice-name", ""), "tpu-v5p-2048-0");
    EXPECT_EQ(labels.value("shoal.io/tpu-num-workers", ""), "256");
    EXPECT_EQ(labels.value("shoal.io/accelerator-type", ""), "TPU-V5P");
    worker_ids.insert(labels.value("shoal.io/tpu-worker-id", ""));
    EXPECT_EQ(n["total"].value("TPU", 0.0), 4.0);
    EXPECT_EQ(n["total"].value("tpu-v5p-2048-0", 0.0), 1.0);
    heads += n["total"].value("TPU-v5p-2048-head", 0.0) == 1.0;
  }
  EXPECT_EQ(worker_ids.size(), 256u);
  EXPECT_EQ(heads, 1);

  // The whole slice as one gang: every host's four chips.
  cluster_->Connect();
  std::vector<std::map<std::string, double>> bundles(
      256, {{"TPU", 4}, {"tpu-v5p-2048-0", 1}});
  auto pg = shoal::CreatePlacementGroup(
      {"slice", bundles, PlacementStrategy::kStrictSpread});
  ASSERT_TRUE(pg.Wait(60000));
  EXPECT_EQ(pg.BundleNodes().size(), 256u);
  shoal::RemovePlacementGroup(pg);

  // Stopped: it exits cleanly, each node unregistering as an agent does.
  EXPECT_EQ(StopSim(SIGTERM), 0);
  // Each unregistered (the simulator waits for the head's answers), none
  // left to the health timeout.
  ASSERT_EQ(WaitForNodes("tpu-", 256, /*alive=*/false, 10000 + 10000), 256u);
  for (const auto& n : Nodes("tpu-", false)) {
    EXPECT_THAT(n.value("death_reason", ""), HasSubstr("simulator"));
  }
  EXPECT_THAT(sim_output_, HasSubstr("256 simulated nodes registered"));
}

}  // namespace
