// The cluster core end to end: a real head and node agents (separate
// processes on loopback, each with its own temp dir, as hosts would have),
// this test binary as the driver and, re-executed by the agents, as the
// workers.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "common/files.h"
#include "common/net.h"
#include "common/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shoal/api.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::testing::ClusterSpec;
using ::shoal::testing::RunCli;
using ::shoal::testing::TestCluster;
using ::testing::HasSubstr;

std::string WhereAmI() { return shoal::CurrentNodeId(); }
int64_t Add(int64_t a, int64_t b) { return a + b; }
int64_t SlowIdentity(int64_t x, int64_t ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return x;
}
std::string Thrower(std::string message) { throw std::runtime_error(message); }
std::string Echo(std::string s) { return s; }
int64_t KillSelf() {
  raise(SIGKILL);
  return 0;
}
// First attempt: writes its pid to dir/pid and sleeps (the test kills it);
// a later attempt sees dir/killed and answers.
int64_t PidThenSleep(std::string dir) {
  if (shoal::PathExists(dir + "/killed")) return 42;
  std::ofstream(dir + "/pid") << getpid();
  std::this_thread::sleep_for(std::chrono::seconds(60));
  return -1;
}
// A task that submits a task: the worker joins the cluster as a driver.
int64_t AddOneRemotely(int64_t x) {
  return shoal::Get(shoal::Task(Add).Remote(x, int64_t{1}));
}
int64_t Sum(std::vector<int64_t> values) {
  int64_t s = 0;
  for (int64_t v : values) s += v;
  return s;
}
SHOAL_REMOTE(WhereAmI, Add, SlowIdentity, Thrower, Echo, KillSelf, PidThenSleep,
             AddOneRemotely, Sum);

// The pid PidThenSleep wrote to `dir` once it began (0 after 10 s).
pid_t PidWrittenTo(const std::string& dir) {
  pid_t pid = 0;
  for (int i = 0; i < 1000 && pid == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::ifstream(dir + "/pid") >> pid;
  }
  return pid;
}

ClusterSpec ThreeNodes() {
  ClusterSpec spec;
  spec.nodes = {{"node-a", 2, ""},
                {"node-b", 2, R"({"accel_x": 2})"},
                {"node-c", 1, R"({"gpu_y": 1})"}};
  return spec;
}

std::unique_ptr<TestCluster> StartCluster(const ClusterSpec& spec) {
  auto cluster = TestCluster::Start(spec);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  if (!cluster.ok()) return nullptr;
  return std::move(*cluster);
}

void Connect(const TestCluster& cluster) { cluster.Connect(); }

nlohmann::json StatusJson(const TestCluster& cluster) {
  std::string out;
  int rc = RunCli({"status", "--address", cluster.address(), "--token",
                   cluster.token(), "--format", "json"},
                  &out);
  EXPECT_EQ(rc, 0) << out;
  return nlohmann::json::parse(out, nullptr, false);
}

std::string NodeState(const nlohmann::json& status, const std::string& id) {
  for (const auto& n : status["nodes"]) {
    if (n["node_id"] == id) return n["state"];
  }
  return "";
}

class ClusterTest : public ::testing::Test {
 protected:
  void TearDown() override {
    shoal::Shutdown();
    if (cluster_) {
      cluster_->Stop();
      EXPECT_EQ(cluster_->sanitizer_reports(), "");
    }
  }
  std::unique_ptr<TestCluster> cluster_;
};

TEST_F(ClusterTest, CustomResourcesLandOnlyWhereTheyExist) {
  cluster_ = StartCluster(ThreeNodes());
  ASSERT_NE(cluster_, nullptr);
  Connect(*cluster_);
  auto total = shoal::ClusterResources();
  EXPECT_EQ(total["CPU"], 5);
  EXPECT_EQ(total["accel_x"], 2);
  EXPECT_EQ(total["gpu_y"], 1);
  EXPECT_EQ(shoal::Nodes().size(), 3u);

  std::vector<shoal::ObjectRef<std::string>> on_b, on_c;
  for (int i = 0; i < 50; ++i) {
    on_b.push_back(shoal::Task(WhereAmI).SetResource("accel_x", 1).Remote());
    on_c.push_back(shoal::Task(WhereAmI)
                       .SetResources({{"gpu_y", 1}, {"CPU", 0.5}})
                       .Remote());
  }
  for (const auto& node : shoal::Get(on_b)) EXPECT_EQ(node, "node-b");
  for (const auto& node : shoal::Get(on_c)) EXPECT_EQ(node, "node-c");
}

TEST_F(ClusterTest, TenThousandTinyTasksAllReturnTheRightValues) {
  cluster_ = StartCluster(ThreeNodes());
  ASSERT_NE(cluster_, nullptr);
  Connect(*cluster_);
  std::vector<shoal::ObjectRef<int64_t>> refs;
  for (int64_t i = 0; i < 10000; ++i) {
    refs.push_back(shoal::Task(Add).Remote(i, int64_t{1}));
  }
  std::vector<int64_t> values = shoal::Get(refs);
  for (int64_t i = 0; i < 10000; ++i) ASSERT_EQ(values[i], i + 1);
}

TEST_F(ClusterTest, ObjectRefArgumentsResolveAcrossNodes) {
  cluster_ = StartCluster(ThreeNodes());
  ASSERT_NE(cluster_, nullptr);
  Connect(*cluster_);
  auto a = shoal::Task(Add).SetResource("accel_x", 1).Remote(1, 2);
  auto b = shoal::Task(Add).SetResource("gpu_y", 1).Remote(a, 10);
  EXPECT_EQ(shoal::Get(b), 13);
  auto values = shoal::Put(std::vector<int64_t>{1, 2, 3, 4});
  EXPECT_EQ(shoal::Get(shoal::Task(Sum).Remote(values)), 10);
  EXPECT_EQ(shoal::Get(values), (std::vector<int64_t>{1, 2, 3, 4}));

  std::vector<shoal::ObjectRef<int64_t>> refs;
  for (int i = 0; i < 4; ++i) {
    refs.push_back(shoal::Task(SlowIdentity).Remote(i, i == 3 ? 3000 : 10));
  }
  auto waited = shoal::Wait(refs, 2, 10000);
  EXPECT_GE(waited.ready.size(), 2u);
  EXPECT_EQ(waited.ready.size() + waited.not_ready.size(), 4u);
}

TEST_F(ClusterTest, TasksCanSubmitTasks) {
  cluster_ = StartCluster(ThreeNodes());
  ASSERT_NE(cluster_, nullptr);
  Connect(*cluster_);
  EXPECT_EQ(shoal::Get(shoal::Task(AddOneRemotely).Remote(41), 30000), 42);
}

TEST_F(ClusterTest, RemoteExceptionCarriesFunctionNodeAndMessage) {
  cluster_ = StartCluster(ThreeNodes());
  ASSERT_NE(cluster_, nullptr);
  Connect(*cluster_);
  auto ref = shoal::Task(Thrower).SetResource("accel_x", 1).Remote("boom");
  try {
    shoal::Get(ref);
    FAIL() << "expected RemoteError";
  } catch (const shoal::RemoteError& e) {
    EXPECT_EQ(e.function_name(), "Thrower");
    EXPECT_EQ(e.node_id(), "node-b");
    EXPECT_EQ(e.remote_message(), "boom");
  }
  // A task that depends on the failed one fails with the same error.
  auto dependent = shoal::Task(Echo).Remote(ref);
  try {
    shoal::Get(dependent);
    FAIL() << "expected RemoteError";
  } catch (const shoal::RemoteError& e) {
    EXPECT_EQ(e.function_name(), "Thrower");
    EXPECT_EQ(e.remote_message(), "boom");
  }
}

TEST_F(ClusterTest, WorkerKilledMidTaskIsRetried) {
  cluster_ = StartCluster(ThreeNodes());
  ASSERT_NE(cluster_, nullptr);
  Connect(*cluster_);
  std::string dir = cluster_->root() + "/retry";
  std::filesystem::create_directories(dir);
  auto ref = shoal::Task(PidThenSleep).Remote(dir);
  pid_t pid = PidWrittenTo(dir);
  ASSERT_GT(pid, 0) << "the task never started";
  std::ofstream(dir + "/killed") << "yes";
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  EXPECT_EQ(shoal::Get(ref, 30000), 42);
}

// shoal::Cancel: a task waiting for its argument fails at once; a running
// C++ task is stopped by ending its worker (force), and is not retried.
TEST_F(ClusterTest, CancelFailsAWaitingTaskAndForceEndsARunningOne) {
  cluster_ = StartCluster(ThreeNodes());
  ASSERT_NE(cluster_, nullptr);
  Connect(*cluster_);
  std::string dir = cluster_->root() + "/cancel";
  std::filesystem::create_directories(dir);
  auto running = shoal::Task(PidThenSleep).SetMaxRetries(3).Remote(dir);
  auto waiting = shoal::Task(Add).Remote(running, int64_t{1});
  pid_t pid = PidWrittenTo(dir);
  ASSERT_GT(pid, 0) << "the task never started";
  EXPECT_TRUE(shoal::Cancel(waiting));
  EXPECT_THROW(shoal::Get(waiting, 5000), shoal::TaskCancelledError);
  EXPECT_TRUE(shoal::Cancel(running, /*force=*/true));
  try {
    shoal::Get(running, 30000);
    FAIL() << "expected TaskCancelledError";
  } catch (const shoal::TaskCancelledError& e) {
    EXPECT_THAT(e.what(), HasSubstr("its worker was ended"));
  }
  for (int i = 0; i < 500 && kill(pid, 0) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_NE(kill(pid, 0), 0) << "the worker still runs";
  // Ended tasks keep what they had.
  auto done = shoal::Task(Add).Remote(int64_t{2}, int64_t{3});
  EXPECT_EQ(shoal::Get(done, 30000), 5);
  EXPECT_FALSE(shoal::Cancel(done));
  EXPECT_EQ(shoal::Get(done), 5);
}

TEST_F(ClusterTest, WorkerThatAlwaysDiesFailsWithHowItDied) {
  cluster_ = StartCluster(ThreeNodes());
  ASSERT_NE(cluster_, nullptr);
  Connect(*cluster_);
  auto ref = shoal::Task(KillSelf).SetMaxRetries(1).Remote();
  try {
    shoal::Get(ref, 30000);
    FAIL() << "expected WorkerDiedError";
  } catch (const shoal::WorkerDiedError& e) {
    EXPECT_THAT(e.what(), HasSubstr("killed by signal 9"));
    EXPECT_THAT(e.what(), HasSubstr("KillSelf"));
    EXPECT_THAT(e.what(), HasSubstr("ran 2 time(s)"));
  }
}

TEST_F(ClusterTest, InfeasibleRequestFailsNamingTheLargestFit) {
  ClusterSpec spec = ThreeNodes();
  spec.infeasible_grace_ms = 5000;
  cluster_ = StartCluster(spec);
  ASSERT_NE(cluster_, nullptr);
  Connect(*cluster_);
  auto start = std::chrono::steady_clock::now();
  auto ref = shoal::Task(WhereAmI).SetResource("accel_x", 8).Remote();
  // While it waits for a node that fits, status lists it as infeasible.
  bool listed = false;
  nlohmann::json status;
  while (!listed && std::chrono::steady_clock::now() - start <
                        std::chrono::milliseconds(4000)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    status = StatusJson(*cluster_);
    for (const auto& d : status["demands"]) {
      if (d["infeasible"] == true && d["shape"].contains("accel_x")) {
        listed = true;
      }
    }
  }
  EXPECT_TRUE(listed) << "shoal status did not show the infeasible demand: "
                      << status.dump();
  try {
    shoal::Get(ref, 20000);
    FAIL() << "expected InfeasibleError";
  } catch (const shoal::InfeasibleError& e) {
    EXPECT_THAT(e.what(), HasSubstr("no node has 8.0 accel_x"));
    EXPECT_THAT(e.what(), HasSubstr("the largest is 2.0 on node node-b"));
  }
  double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_GE(waited, 4.5);
  EXPECT_LT(waited, 15);
  // Feasible work still runs.
  EXPECT_EQ(shoal::Get(shoal::Task(Add).Remote(2, 2)), 4);
}

TEST_F(ClusterTest, InfeasibleRequestRunsWhenAFittingNodeJoinsInTime) {
  ClusterSpec spec = ThreeNodes();
  spec.infeasible_grace_ms = 8000;
  cluster_ = StartCluster(spec);
  ASSERT_NE(cluster_, nullptr);
  Connect(*cluster_);
  auto ref = shoal::Task(WhereAmI).SetResource("big", 1).Remote();
  ASSERT_TRUE(cluster_->AddNode({"node-big", 1, R"({"big": 1})"}).ok());
  EXPECT_EQ(shoal::Get(ref, 20000), "node-big");
}

TEST_F(ClusterTest, KilledAgentLosesNoTaskAndStatusShowsItDead) {
  cluster_ = StartCluster(ThreeNodes());
  ASSERT_NE(cluster_, nullptr);
  Connect(*cluster_);
  std::vector<shoal::ObjectRef<int64_t>> refs;
  for (int64_t i = 0; i < 3000; ++i) {
    refs.push_back(shoal::Task(SlowIdentity).Remote(i, int64_t{1}));
  }
  // Let work reach every node, then kill one agent (and with it its workers).
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  cluster_->KillAgent(1);
  std::vector<int64_t> values = shoal::Get(refs, 120000);
  for (int64_t i = 0; i < 3000; ++i) ASSERT_EQ(values[i], i);

  std::string state;
  for (int i = 0; i < 100 && state != "DEAD"; ++i) {
    state = NodeState(StatusJson(*cluster_), "node-b");
    if (state != "DEAD")
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(state, "DEAD");
  std::string text;
  RunCli({"status", "--address", cluster_->address(), "--token",
          cluster_->token()},
         &text);
  EXPECT_THAT(text, HasSubstr("no heartbeat"));
  EXPECT_EQ(shoal::ClusterResources()["CPU"], 3);
}

// As ray.init() joins what `ray start` started: Init() with no address and
// nothing exported finds the cluster of its temp dir, with its token.
TEST_F(ClusterTest, InitJoinsTheClusterStartedFromItsTempDir) {
  cluster_ = StartCluster(ThreeNodes());
  ASSERT_NE(cluster_, nullptr);
  unsetenv("SHOAL_ADDRESS");
  unsetenv("SHOAL_TOKEN");
  size_t sessions = shoal::ListSessionDirs(cluster_->temp_dir(0)).size();
  shoal::InitOptions options;
  options.temp_dir = cluster_->temp_dir(0);
  shoal::Init(options);
  EXPECT_EQ(shoal::Nodes().size(), 3u);
  EXPECT_EQ(shoal::Get(shoal::Task(Add).Remote(int64_t{1}, int64_t{2})), 3);
  EXPECT_EQ(shoal::ListSessionDirs(cluster_->temp_dir(0)).size(), sessions);
  shoal::Shutdown();

  // A program's own local cluster is not joined by the next program: it ends
  // with the program that started it.
  std::string own = cluster_->root() + "/own";
  options.temp_dir = own;
  shoal::Init(options);
  EXPECT_EQ(shoal::Nodes().size(), 1u);
  std::string address, token;
  EXPECT_TRUE(
      absl::IsNotFound(shoal::ResolveClusterAddress(own, &address, &token)));
  shoal::Shutdown();
}

// The head and agents answer on 127.0.0.1 as well as on the address they
// advertise, and a loopback address finds the token of the cluster there.
TEST_F(ClusterTest, LoopbackReachesAHeadThatAdvertisesThePrimaryAddress) {
  std::string primary = shoal::PrimaryIpAddress();
  if (primary.rfind("127.", 0) == 0) {
    GTEST_SKIP() << "this host has no address but loopback";
  }
  ClusterSpec spec;
  spec.nodes = {{"node-p", 2, ""}};
  spec.nodes[0].primary_address = true;
  cluster_ = StartCluster(spec);
  ASSERT_NE(cluster_, nullptr);
  ASSERT_EQ(cluster_->address().rfind(primary + ":", 0), 0u)
      << cluster_->address();
  std::string port =
      cluster_->address().substr(cluster_->address().rfind(':') + 1);
  std::string loopback = "127.0.0.1:" + port;
  unsetenv("SHOAL_ADDRESS");
  unsetenv("SHOAL_TOKEN");
  std::string out;
  EXPECT_EQ(RunCli({"status", "--address", loopback, "--temp-dir",
                    cluster_->temp_dir(0)},
                   &out),
            0)
      << out;
  EXPECT_THAT(out, HasSubstr("node-p"));
  shoal::InitOptions options;
  options.address = loopback;
  options.temp_dir = cluster_->temp_dir(0);
  shoal::Init(options);
  EXPECT_EQ(shoal::Get(shoal::Task(Add).Remote(int64_t{20}, int64_t{22})), 42);
}

// `shoal status --verbose` lists the leases a job holds, with the job, the
// worker's pid and the age; with the work done they are gone within 2 s.
TEST_F(ClusterTest, StatusListsLeasesUntilTheyAreReturned) {
  cluster_ = StartCluster(ThreeNodes());
  ASSERT_NE(cluster_, nullptr);
  Connect(*cluster_);
  auto slow = shoal::Task(SlowIdentity).Remote(int64_t{7}, int64_t{3000});
  auto status = [&](bool verbose) {
    std::vector<std::string> args = {"status", "--address", cluster_->address(),
                                     "--token", cluster_->token()};
    if (verbose) args.push_back("--verbose");
    std::string out;
    RunCli(args, &out);
    return out;
  };
  std::string out;
  // Once its worker has registered (it shows as "starting" until then).
  for (int i = 0; i < 100; ++i) {
    out = status(/*verbose=*/true);
    if (out.find("  worker ") != std::string::npos &&
        out.find(" starting  ") == std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_THAT(out, ::testing::ContainsRegex(
                       " [0-9a-f]+ on node-[abc]  job[0-9]+  worker [0-9a-f]+ "
                       "[(]pid [0-9]+[)]  [{]CPU: 1[.]0[}]  for "));
  EXPECT_THAT(status(/*verbose=*/false),
              ::testing::ContainsRegex("Leases:. 1 held by job[0-9]+ "));
  EXPECT_EQ(shoal::Get(slow), 7);
  // Returned 500 ms after the work ran out.
  for (int i = 0; i < 40; ++i) {
    out = status(/*verbose=*/true);
    if (out.find("(no leases)") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_THAT(out, HasSubstr("Leases:\n (no leases)"));
}

TEST_F(ClusterTest, WrongTokenIsRefusedWithAClearError) {
  cluster_ = StartCluster(ThreeNodes());
  ASSERT_NE(cluster_, nullptr);
  shoal::InitOptions options;
  options.address = cluster_->address();
  options.token = "not-the-token";
  try {
    shoal::Init(options);
    FAIL() << "expected the cluster to refuse the driver";
  } catch (const shoal::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("token"));
  }
  EXPECT_FALSE(shoal::IsInitialized());
  std::string out;
  EXPECT_NE(
      RunCli({"status", "--address", cluster_->address(), "--token", "nope"},
             &out),
      0);
  EXPECT_THAT(out, HasSubstr("token"));
  // The head logged the refusal.
  auto log = shoal::ReadFile(cluster_->session_dir(0) + "/logs/head.log");
  ASSERT_TRUE(log.ok());
  EXPECT_THAT(*log, HasSubstr("wrong or missing cluster token"));
}

TEST_F(ClusterTest, StartAndStopAreIdempotentAndSayWhatTheyDid) {
  cluster_ = StartCluster(ThreeNodes());
  ASSERT_NE(cluster_, nullptr);
  std::string out;
  std::string port =
      cluster_->address().substr(cluster_->address().find(':') + 1);
  // A second head on the same port names the running one.
  EXPECT_NE(RunCli({"start", "--head", "--port", port, "--node-ip-address",
                    "127.0.0.1", "--temp-dir", cluster_->root() + "/other"},
                   &out),
            0);
  EXPECT_THAT(out, HasSubstr("already in use by a running Shoal head"));
  // A second head from the same temp dir as well.
  EXPECT_NE(
      RunCli({"start", "--head", "--temp-dir", cluster_->temp_dir(0)}, &out),
      0);
  EXPECT_THAT(out, HasSubstr("a head is already running"));
  // Joining twice from the same temp dir does nothing.
  EXPECT_EQ(RunCli({"start", "--address", cluster_->address(), "--token",
                    cluster_->token(), "--temp-dir", cluster_->temp_dir(1)},
                   &out),
            0);
  EXPECT_THAT(out, HasSubstr("already running"));
  // Stop, then stop again.
  EXPECT_EQ(RunCli({"stop", "--temp-dir", cluster_->temp_dir(2)}, &out), 0);
  EXPECT_THAT(out, HasSubstr("Stopped node agent"));
  EXPECT_EQ(RunCli({"stop", "--temp-dir", cluster_->temp_dir(2)}, &out), 0);
  EXPECT_THAT(out, HasSubstr("nothing to stop"));
  // A graceful stop shows at once in status, with the reason.
  EXPECT_EQ(NodeState(StatusJson(*cluster_), "node-c"), "DEAD");
}

// Run by BinaryIsFetchedFromTheHeadByHash from a copy of this binary that
// deletes itself: agents cannot find the file at its path and fetch it.
TEST(DriverFromDeletedBinary, DISABLED_RunsTasks) {
  std::string self = shoal::SelfExecutable();
  ASSERT_EQ(unlink(self.c_str()), 0);
  shoal::Init();
  EXPECT_EQ(shoal::Get(shoal::Task(Add).Remote(20, 22)), 42);
  shoal::Shutdown();
}

TEST_F(ClusterTest, BinaryIsFetchedFromTheHeadByHash) {
  cluster_ = StartCluster(ThreeNodes());
  ASSERT_NE(cluster_, nullptr);
  std::string copy = cluster_->root() + "/driver_copy";
  std::filesystem::copy_file(shoal::SelfExecutable(), copy);
  chmod(copy.c_str(), 0755);
  pid_t pid = fork();
  if (pid == 0) {
    cluster_->ExportEnvironment();
    execl(copy.c_str(), copy.c_str(), "--gtest_also_run_disabled_tests",
          "--gtest_filter=DriverFromDeletedBinary.*", nullptr);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_FALSE(shoal::PathExists(copy));
  auto log = shoal::ReadFile(cluster_->session_dir(0) + "/logs/agent.log");
  ASSERT_TRUE(log.ok());
  EXPECT_THAT(*log, HasSubstr("fetching binary"));
}

}  // namespace
