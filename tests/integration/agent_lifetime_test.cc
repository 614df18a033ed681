// Nothing of a node outlives its cluster: a node agent whose head is gone
// for --head-timeout-s (killed and not started again, or another cluster
// answering on its address) stops by itself, with its workers and what
// they started, frees its object-store segment, takes its pid file out of
// the session folder and says why in its log; a head started again within
// the window keeps the node.
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/files.h"
#include "common/process.h"
#include "common/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shoal/api.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::testing::ClusterSpec;
using ::shoal::testing::NodeSpec;
using ::shoal::testing::RunCli;
using ::testing::HasSubstr;
using ::testing::Not;

// An actor on the joined node whose worker starts a process of its own.
class Resident {
 public:
  int64_t Pid() const { return getpid(); }
  // A child that would sleep for ~17 minutes: it carries the worker's
  // SHOAL_WORKER_ID, as a task's subprocess does.
  int64_t StartChild() {
    pid_t child = fork();
    if (child == 0) {
      execl("/bin/sleep", "sleep", "1000", static_cast<char*>(nullptr));
      _exit(127);
    }
    return child;
  }
};
Resident* CreateResident() { return new Resident(); }
SHOAL_REMOTE(CreateResident, &Resident::Pid, &Resident::StartChild);

constexpr int64_t kResultTimeoutMs = 60000;
// How long a test waits for what should happen within a few seconds,
// before it fails (rather than waiting for ctest's timeout).
constexpr int kPatienceS = 60;

// Waits up to kPatienceS for `done`; whether it came.
bool Eventually(const std::function<bool()>& done) {
  auto until =
      std::chrono::steady_clock::now() + std::chrono::seconds(kPatienceS);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return true;
}

// /dev/shm entries of node `node_id`'s object store.
std::vector<std::string> Segments(const std::string& node_id) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    std::string name = e.path().filename().string();
    if (absl::StartsWith(name, absl::StrCat("shoal-node-", node_id, "-"))) {
      found.push_back(name);
    }
  }
  return found;
}

class AgentLifetimeTest : public shoal::testing::ClusterTest {
 protected:
  // A head node and a joined node ("life-node", the only one with the
  // resource of that name), both with --head-timeout-s `timeout_s`.
  void StartCluster(int timeout_s) {
    std::vector<std::string> flag = {"--head-timeout-s",
                                     std::to_string(timeout_s)};
    NodeSpec head{"life-head", 1, ""};
    head.object_store_memory = 32 << 20;
    head.extra_args = flag;
    NodeSpec node{"life-node", 2, R"({"life-node": 1})"};
    node.object_store_memory = 32 << 20;
    node.extra_args = flag;
    ClusterSpec spec;
    spec.nodes = {head, node};
    auto cluster = shoal::testing::TestCluster::Start(spec);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
  }

  // A detached actor on life-node, and a process its worker started: their
  // pids. The driver (this process) leaves again, so that only the node's
  // own processes are left.
  void StartResident(pid_t* worker, pid_t* child) {
    cluster_->Connect();
    auto resident = shoal::Actor(CreateResident)
                        .SetName("resident")
                        .SetLifetime(shoal::Lifetime::kDetached)
                        .SetResource("life-node", 1)
                        .Remote();
    *worker = static_cast<pid_t>(
        shoal::Get(resident.Task(&Resident::Pid).Remote(), kResultTimeoutMs));
    *child = static_cast<pid_t>(shoal::Get(
        resident.Task(&Resident::StartChild).Remote(), kResultTimeoutMs));
    children_.push_back(*child);
    shoal::Shutdown();
  }

  void TearDown() override {
    ClusterTest::TearDown();
    // Pass or fail, nothing the test made outlives it.
    for (pid_t child : children_) {
      if (shoal::ProcessAlive(child)) kill(child, SIGKILL);
    }
  }

  std::vector<pid_t> children_;

  std::string AgentLog(size_t node) const {
    auto log = shoal::ReadFile(cluster_->session_dir(node) + "/logs/agent.log");
    return log.ok() ? *log : "";
  }

  nlohmann::json Status() {
    std::string out;
    if (RunCli({"status", "--address", cluster_->address(), "--token",
                cluster_->token(), "--format", "json"},
               &out) != 0) {
      return nlohmann::json();
    }
    return nlohmann::json::parse(out, nullptr, false);
  }

  int AliveNodes() {
    nlohmann::json s = Status();
    if (!s.is_object()) return -1;
    int alive = 0;
    for (const auto& n : s["nodes"]) alive += n["state"] == "ALIVE";
    return alive;
  }
};

TEST_F(AgentLifetimeTest, ANodeWhoseHeadIsGoneStopsWithItsWorkers) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(3));
  pid_t worker = 0, child = 0;
  ASSERT_NO_FATAL_FAILURE(StartResident(&worker, &child));
  const pid_t agent = cluster_->agent_pid(1);
  const pid_t head_node_agent = cluster_->agent_pid(0);
  ASSERT_GT(agent, 0);
  ASSERT_TRUE(shoal::ProcessAlive(worker));
  ASSERT_TRUE(shoal::ProcessAlive(child));
  ASSERT_EQ(Segments("life-node").size(), 1u);

  auto killed = std::chrono::steady_clock::now();
  cluster_->KillHead();
  ASSERT_TRUE(Eventually([&] { return !shoal::ProcessAlive(agent); }))
      << "the agent of life-node outlived its head: " << AgentLog(1);
  double exit_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed)
          .count();
  RecordProperty("agent_exit_after_head_s", std::to_string(exit_s));
  printf("agent_exit_after_head_s %.2f s (--head-timeout-s 3)\n", exit_s);
  EXPECT_TRUE(Eventually([&] { return !shoal::ProcessAlive(worker); }))
      << "worker " << worker;
  EXPECT_TRUE(Eventually([&] { return !shoal::ProcessAlive(child); }))
      << "the worker's child " << child;
  EXPECT_THAT(Segments("life-node"), ::testing::IsEmpty());
  const std::string log = AgentLog(1);
  EXPECT_THAT(log, HasSubstr(absl::StrCat(
                       "the head at ", cluster_->address(),
                       " has been unreachable for 3 s; stopping this node "
                       "(--head-timeout-s)")));
  EXPECT_FALSE(shoal::PathExists(cluster_->session_dir(1) + "/agent.pid"));
  EXPECT_FALSE(shoal::PathExists(cluster_->session_dir(1) + "/agent_address"));

  // The head's own node, in the session of the head that was killed, goes
  // the same way.
  EXPECT_TRUE(
      Eventually([&] { return !shoal::ProcessAlive(head_node_agent); }));
  EXPECT_THAT(Segments("life-head"), ::testing::IsEmpty());
}

TEST_F(AgentLifetimeTest, AHeadStartedAgainWithinTheWindowKeepsTheNode) {
  constexpr int kTimeoutS = 15;
  ASSERT_NO_FATAL_FAILURE(StartCluster(kTimeoutS));
  const pid_t agent = cluster_->agent_pid(1);
  const pid_t head_node_agent = cluster_->agent_pid(0);
  auto killed = std::chrono::steady_clock::now();
  cluster_->KillHead();
  ASSERT_TRUE(cluster_->RestartHead().ok());
  ASSERT_TRUE(Eventually([&] { return AliveNodes() == 2; })) << Status().dump();
  // Past the window, counted from the kill: the nodes heard from the head
  // again within it, and stay.
  std::this_thread::sleep_until(killed + std::chrono::seconds(kTimeoutS + 3));
  EXPECT_TRUE(shoal::ProcessAlive(agent));
  EXPECT_TRUE(shoal::ProcessAlive(head_node_agent));
  EXPECT_EQ(cluster_->agent_pid(1), agent);
  EXPECT_EQ(Segments("life-node").size(), 1u);
  EXPECT_EQ(AliveNodes(), 2) << Status().dump();
  EXPECT_THAT(AgentLog(1), Not(HasSubstr("stopping this node")));
}

// Another cluster's head on the address (another token): it answers, and
// refuses the node, which counts as gone.
TEST_F(AgentLifetimeTest, AHeadThatRefusesTheNodeCountsAsGone) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(3));
  const pid_t agent = cluster_->agent_pid(1);
  const std::string address = cluster_->address();
  const std::string port = address.substr(address.rfind(':') + 1);
  const std::string other = cluster_->root() + "/other-cluster";
  cluster_->KillHead();
  struct StopOther {
    std::string temp_dir;
    ~StopOther() {
      std::string out;
      RunCli({"stop", "--temp-dir", temp_dir}, &out);
    }
  } stop_other{other};
  std::string out;
  ASSERT_EQ(
      RunCli({"start", "--head", "--port", port, "--temp-dir", other,
              "--node-ip-address", "127.0.0.1", "--num-cpus", "1",
              "--dashboard-port", "0", "--object-store-memory",
              std::to_string(16 << 20)},
             &out, {"SHOAL_DEVICE_ROOT=" + cluster_->root() + "/no-devices"}),
      0)
      << out;
  ASSERT_TRUE(Eventually([&] { return !shoal::ProcessAlive(agent); }))
      << AgentLog(1);
  EXPECT_THAT(Segments("life-node"), ::testing::IsEmpty());
  const std::string log = AgentLog(1);
  EXPECT_THAT(log, HasSubstr("stopping this node (--head-timeout-s)"));
  EXPECT_THAT(log, HasSubstr("It refuses this node")) << log;
  // The other cluster is untouched.
  EXPECT_NE(shoal::LivePid(other + "/session_latest", "head"), 0);
  EXPECT_NE(shoal::LivePid(other + "/session_latest", "agent"), 0);
}

// A worker whose agent dies (kill -9: it cleans up nothing) ends, and so
// does what the worker started.
TEST_F(AgentLifetimeTest, AWorkerAndWhatItStartedEndWithTheirAgent) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(60));
  pid_t worker = 0, child = 0;
  ASSERT_NO_FATAL_FAILURE(StartResident(&worker, &child));
  ASSERT_TRUE(shoal::ProcessAlive(child));
  cluster_->KillAgent(1);
  EXPECT_TRUE(Eventually([&] { return !shoal::ProcessAlive(worker); }))
      << "worker " << worker;
  EXPECT_TRUE(Eventually([&] { return !shoal::ProcessAlive(child); }))
      << "the worker's child " << child;
}

// A job's processes, the entrypoint and what it started in the background,
// end with the agent that ran it, even one killed with SIGKILL: the job
// runs under a guard that hears its agent die (common/process.h).
TEST_F(AgentLifetimeTest, AJobAndWhatItStartedEndWithTheirAgent) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(60));
  // A sleep no other process of this host runs.
  const std::string marker = absl::StrCat("sleep ", 1000 + getpid() % 9000);
  std::string out;
  ASSERT_EQ(
      RunCli({"job", "submit", "--address", cluster_->address(), "--token",
              cluster_->token(), "--no-wait", "--entrypoint-resources",
              R"({"life-node": 1})", "--", "sh", "-c",
              absl::StrCat(marker, " & ", marker, " & ", marker, "; wait")},
             &out),
      0)
      << out;
  // The three sleeps (and the shells that name them).
  std::vector<pid_t> started;
  ASSERT_TRUE(Eventually([&] {
    started.clear();
    for (const std::string& p : shoal::testing::ProcessesMentioning(marker)) {
      if (absl::StrContains(p, ": " + marker)) {
        started.push_back(std::stoi(p.substr(0, p.find(':'))));
      }
    }
    return started.size() == 3;
  })) << started.size();
  children_.insert(children_.end(), started.begin(), started.end());
  cluster_->KillAgent(1);
  EXPECT_TRUE(Eventually([&] {
    return shoal::testing::ProcessesMentioning(marker).empty();
  })) << absl::StrJoin(shoal::testing::ProcessesMentioning(marker), "\n");
}

// `shoal start --block` (the process a container or service manager
// watches) ends with its node, with the agent's non-zero exit code; the
// timeout comes from SHOAL_HEAD_TIMEOUT_S here.
TEST_F(AgentLifetimeTest, ABlockingStartEndsWithItsNode) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(60));
  const std::string temp_dir = cluster_->root() + "/blocking-node";
  struct StopNode {
    std::string temp_dir;
    ~StopNode() {
      std::string out;
      RunCli({"stop", "--temp-dir", temp_dir}, &out);
    }
  } stop_node{temp_dir};
  int fd = -1;
  pid_t start = shoal::testing::StartCli(
      {"start", "--address", cluster_->address(), "--token", cluster_->token(),
       "--block", "--temp-dir", temp_dir, "--node-ip-address", "127.0.0.1",
       "--num-cpus", "1", "--node-id", "blocking-node", "--object-store-memory",
       std::to_string(16 << 20)},
      &fd,
      {"SHOAL_HEAD_TIMEOUT_S=3",
       "SHOAL_DEVICE_ROOT=" + cluster_->root() + "/no-devices"});
  ASSERT_GT(start, 0);
  ASSERT_TRUE(Eventually([&] { return AliveNodes() == 3; })) << Status().dump();
  ASSERT_EQ(Segments("blocking-node").size(), 1u);
  cluster_->KillHead();
  std::string out;
  EXPECT_EQ(shoal::testing::FinishCli(start, fd, &out), 1) << out;
  EXPECT_THAT(out, HasSubstr("exited with code 1")) << out;
  EXPECT_THAT(Segments("blocking-node"), ::testing::IsEmpty());
  auto log = shoal::ReadFile(temp_dir + "/session_latest/logs/agent.log");
  EXPECT_THAT(log.ok() ? *log : "",
              HasSubstr("has been unreachable for 3 s; stopping this node"));
}

}  // namespace
