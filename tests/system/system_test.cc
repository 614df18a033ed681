// The system tier: every host is a network namespace with its own address
// (tests/system/netns.h), so nodes meet over a real (virtual) network as
// separate machines do, never over loopback. A head and node agents joining
// it by address, tasks on every host, a real torch.distributed program under
// `shoal launch`, and a host that dies or is cut off in the middle of a gang.
//
// Needs root; skipped, saying why, where network namespaces cannot be made.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/files.h"
#include "common/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shoal/api.h"
#include "tests/system/netns.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::testing::ClusterSpec;
using ::shoal::testing::FinishCommand;
using ::shoal::testing::HostNetwork;
using ::shoal::testing::NetnsUnavailableReason;
using ::shoal::testing::NodeSpec;
using ::shoal::testing::RunCli;
using ::shoal::testing::RunInNetns;
using ::shoal::testing::StartInNetns;
using ::shoal::testing::TestCluster;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Where a task ran: its node and the address its agent advertises.
std::string WhereAmI() {
  const char* ip = getenv("SHOAL_NODE_IP");
  return shoal::CurrentNodeId() + "@" + (ip ? ip : "?");
}
int64_t Add(int64_t a, int64_t b) { return a + b; }
int64_t SleepsOnHostB(int64_t ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
SHOAL_REMOTE(WhereAmI, Add, SleepsOnHostB);

// The driver of HeadAndAgentsOnThreeHostsRunTasksOnEveryHost, run by it as a
// separate process inside host A (SHOAL_ADDRESS names the head).
TEST(SystemDriver, DISABLED_TasksRunOnEveryHost) {
  shoal::Init();
  std::vector<shoal::ObjectRef<std::string>> refs;
  for (int i = 0; i < 10; ++i) {
    refs.push_back(shoal::Task(WhereAmI).SetResource("host_b", 1).Remote());
    refs.push_back(shoal::Task(WhereAmI).SetResource("host_c", 1).Remote());
  }
  for (const std::string& where : shoal::Get(refs, 60000)) {
    std::cout << "ran on " << where << "\n";
  }
  // A value made on host B is the argument of a task on host C.
  auto on_b = shoal::Task(Add).SetResource("host_b", 1).Remote(20, 1);
  auto on_c = shoal::Task(Add).SetResource("host_c", 1).Remote(on_b, 21);
  std::cout << "sum " << shoal::Get(on_c, 60000) << "\n";
  shoal::Shutdown();
}

// The driver of TasksOfADriverCutOffFromTheNetworkFail, run by it inside
// host C: two long tasks on host B, then it waits to be cut off.
TEST(SystemLostDriver, DISABLED_SleepsOnHostB) {
  shoal::Init();
  std::vector<shoal::ObjectRef<int64_t>> refs;
  for (int i = 0; i < 2; ++i) {
    refs.push_back(shoal::Task(SleepsOnHostB)
                       .SetResource("host_b", 1)
                       .Remote(int64_t{600000}));
  }
  std::cout << "submitted" << std::endl;
  std::this_thread::sleep_for(std::chrono::minutes(10));
}

// `shoal launch` running in the background inside a host, with its output.
class RunningLaunch {
 public:
  RunningLaunch(const std::string& netns,
                const std::vector<std::string>& args) {
    std::vector<std::string> argv = {shoal::SelfExecutable()};
    argv.insert(argv.end(), args.begin(), args.end());
    auto command = StartInNetns(netns, argv, {"SHOAL_ROLE=cli"});
    if (command.ok()) {
      command_ = *command;
    } else {
      output_ = std::string(command.status().message());
    }
  }
  ~RunningLaunch() {
    if (command_.pid > 0) Finish(0);
  }

  const std::string& output() const { return output_; }

  // Reads its output until done() or `limit`; false when the output ended
  // (the launch exited).
  template <typename Done>
  bool ReadUntil(Done done, Clock::time_point limit) {
    char buf[4096];
    while (command_.fd >= 0 && !done() && Clock::now() < limit) {
      pollfd p{command_.fd, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      ssize_t n = read(command_.fd, buf, sizeof(buf));
      if (n <= 0) return false;
      output_.append(buf, n);
    }
    return command_.fd >= 0;
  }

  // Waits up to `timeout_s` for it to exit, then interrupts it (Ctrl-C
  // stops the gang) and, 10 s later, kills it. Its exit code; -1 when it had
  // to be stopped or never started.
  int Finish(int timeout_s) {
    if (command_.pid <= 0) return -1;
    bool exited = !ReadUntil([] { return false; },
                             Clock::now() + std::chrono::seconds(timeout_s));
    if (!exited) {
      absl::StrAppend(&output_, "\n[test] still running after ", timeout_s,
                      " s: interrupted\n");
      kill(command_.pid, SIGINT);
      if (ReadUntil([] { return false; },
                    Clock::now() + std::chrono::seconds(10))) {
        kill(command_.pid, SIGKILL);
      }
    }
    int rc = FinishCommand(command_, &output_);
    return exited ? rc : -1;
  }

 private:
  shoal::testing::RunningCommand command_;
  std::string output_;
};

class SystemTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why = NetnsUnavailableReason();
    if (!why.empty()) GTEST_SKIP() << "system tier skipped: " << why;
  }

  // One host per node: host 0 runs the head (and its node agent), every
  // other host a node agent that joins host 0's address.
  void StartHosts(std::vector<NodeSpec> nodes) {
    auto net = HostNetwork::Create(static_cast<int>(nodes.size()));
    ASSERT_TRUE(net.ok()) << net.status();
    net_ = std::move(*net);
    for (size_t i = 0; i < nodes.size(); ++i) {
      nodes[i].netns = net_->netns(static_cast<int>(i));
    }
    ClusterSpec spec;
    spec.nodes = nodes;
    auto cluster = TestCluster::Start(spec);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    ASSERT_TRUE(absl::StartsWith(cluster_->address(), net_->address(0) + ":"))
        << "the head listens on " << cluster_->address()
        << ", not on host 0's address " << net_->address(0);
  }

  void TearDown() override {
    if (cluster_) {
      cluster_->Stop();
      EXPECT_EQ(cluster_->sanitizer_reports(), "");
    }
    if (net_) {
      // `shoal stop` ended every agent and their workers: nothing is left.
      for (int i = 0; i < net_->size(); ++i) {
        auto deadline = Clock::now() + std::chrono::seconds(10);
        while (!net_->Pids(i).empty() && Clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        EXPECT_THAT(net_->Pids(i), IsEmpty())
            << "processes left behind in host " << i;
      }
    }
    cluster_.reset();
    net_.reset();
  }

  // The CLI, run inside `host`.
  int Cli(int host, const std::vector<std::string>& args, std::string* out) {
    return RunCli(args, out, {}, net_->netns(host));
  }

  // `shoal launch ARGS` inside `host`; its exit code (-1 when it did not end
  // within `timeout_s`) and output.
  int Launch(int host, const std::vector<std::string>& args, std::string* out,
             int timeout_s = 120) {
    RunningLaunch launch(net_->netns(host), LaunchArgs(args));
    int rc = launch.Finish(timeout_s);
    *out = launch.output();
    return rc;
  }

  std::vector<std::string> LaunchArgs(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"launch", "--address", cluster_->address(),
                                     "--token", cluster_->token()};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  // Processes in any host whose command line contains `marker`.
  size_t CountEverywhere(const std::string& marker) {
    size_t n = 0;
    for (int i = 0; i < net_->size(); ++i) {
      n += net_->PidsMatching(i, marker).size();
    }
    return n;
  }

  // A gang of 2 hosts x 2 processes that sleeps, started from host 0; once
  // every rank is up, `fail_host_1` breaks host 1. Expects the launch to end
  // non-zero within 30 s naming host 1 or one of its ranks, and no rank to
  // be left on any host.
  void GangSurvivesLosingHost1(const std::function<void()>& fail_host_1);

  std::unique_ptr<HostNetwork> net_;
  std::unique_ptr<TestCluster> cluster_;
};

TEST_F(SystemTest, HeadAndAgentsOnThreeHostsRunTasksOnEveryHost) {
  ASSERT_NO_FATAL_FAILURE(StartHosts({{"host-a", 2, ""},
                                      {"host-b", 2, R"({"host_b": 1})"},
                                      {"host-c", 2, R"({"host_c": 1})"}}));
  // `shoal status` in host A lists every node at its own host's address.
  std::string out;
  ASSERT_EQ(Cli(0,
                {"status", "--address", cluster_->address(), "--token",
                 cluster_->token(), "--format", "json"},
                &out),
            0)
      << out;
  auto status = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(status.is_discarded()) << out;
  std::map<std::string, std::string> address_of;
  for (const auto& node : status["nodes"]) {
    EXPECT_EQ(node["state"], "ALIVE") << node.dump();
    std::string address = node["address"];
    address_of[node["node_id"]] = address.substr(0, address.rfind(':'));
  }
  EXPECT_EQ(address_of.size(), 3u) << out;
  EXPECT_EQ(address_of["host-a"], net_->address(0));
  EXPECT_EQ(address_of["host-b"], net_->address(1));
  EXPECT_EQ(address_of["host-c"], net_->address(2));
  ASSERT_EQ(Cli(0,
                {"status", "--address", cluster_->address(), "--token",
                 cluster_->token()},
                &out),
            0)
      << out;
  for (int i = 0; i < 3; ++i) EXPECT_THAT(out, HasSubstr(net_->address(i)));

  // A driver in host A: its tasks run on hosts B and C.
  ASSERT_EQ(
      RunInNetns(net_->netns(0),
                 {shoal::SelfExecutable(), "--gtest_also_run_disabled_tests",
                  "--gtest_filter=SystemDriver.DISABLED_*"},
                 &out,
                 {"SHOAL_ADDRESS=" + cluster_->address(),
                  "SHOAL_TOKEN=" + cluster_->token()}),
      0)
      << out;
  EXPECT_THAT(out, HasSubstr("ran on host-b@" + net_->address(1) + "\n"));
  EXPECT_THAT(out, HasSubstr("ran on host-c@" + net_->address(2) + "\n"));
  EXPECT_THAT(out, Not(HasSubstr("ran on host-a")));
  EXPECT_THAT(out, HasSubstr("sum 42\n"));
}

// A driver whose host drops off the network says nothing more: the head
// finds its connection dead (keepalive) and its running tasks end FAILED
// in the records, as for a driver that exited.
TEST_F(SystemTest, TasksOfADriverCutOffFromTheNetworkFail) {
  ASSERT_NO_FATAL_FAILURE(StartHosts({{"host-a", 2, ""},
                                      {"host-b", 2, R"({"host_b": 2})"},
                                      {"host-c", 2, ""}}));
  auto driver =
      StartInNetns(net_->netns(2),
                   {shoal::SelfExecutable(), "--gtest_also_run_disabled_tests",
                    "--gtest_filter=SystemLostDriver.DISABLED_*"},
                   {"SHOAL_ADDRESS=" + cluster_->address(),
                    "SHOAL_TOKEN=" + cluster_->token()});
  ASSERT_TRUE(driver.ok()) << driver.status();
  auto tasks = [&] {
    std::string out;
    Cli(0,
        {"list", "tasks", "--address", cluster_->address(), "--token",
         cluster_->token(), "--filter", "name=SleepsOnHostB", "--format",
         "json"},
        &out);
    nlohmann::json list = nlohmann::json::parse(out, nullptr, false);
    return list.is_array() ? list : nlohmann::json::array();
  };
  auto all_in = [](const nlohmann::json& list, const std::string& state) {
    return list.size() == 2 &&
           std::all_of(list.begin(), list.end(),
                       [&](const auto& t) { return t["state"] == state; });
  };
  auto deadline = Clock::now() + std::chrono::seconds(60);
  nlohmann::json list = tasks();
  while (!all_in(list, "RUNNING") && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    list = tasks();
  }
  ASSERT_TRUE(all_in(list, "RUNNING")) << list.dump();

  auto start = Clock::now();
  ASSERT_TRUE(net_->Disconnect(2).ok());
  deadline = Clock::now() + std::chrono::seconds(60);
  while (!all_in(list, "FAILED") && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    list = tasks();
  }
  double took = SecondsSince(start);
  kill(driver->pid, SIGKILL);
  std::string out;
  FinishCommand(*driver, &out);
  ASSERT_TRUE(all_in(list, "FAILED")) << list.dump() << "\ndriver:\n" << out;
  for (const auto& t : list) {
    EXPECT_EQ(t["error_type"], "WORKER_DIED") << t.dump();
    EXPECT_THAT(t["error"].get<std::string>(), HasSubstr("driver ended"));
  }
  std::cout << "tasks of the cut-off driver failed " << took
            << " s after its host left the network\n";
}

// torch_allreduce.py, which the torch tests launch on two hosts.
std::string TorchScript() {
  return std::string(SHOAL_SOURCE_DIR) +
         "/tests/integration/torch_allreduce.py";
}

TEST_F(SystemTest, TorchPerDeviceAllReduceAcrossTwoHosts) {
  ASSERT_NO_FATAL_FAILURE(StartHosts({{"host-0", 2, ""}, {"host-1", 2, ""}}));
  std::string out;
  ASSERT_EQ(Launch(0,
                   {"--per-device", "--nodes", "2", "--nproc-per-node", "2",
                    "--", "/bin/sh", "-c",
                    "echo master=$MASTER_ADDR on=$SHOAL_NODE_IP "
                    "gloo=$GLOO_SOCKET_IFNAME; "
                    "exec /usr/bin/python3 \"$0\" per-device",
                    TorchScript()},
                   &out),
            0)
      << out;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_THAT(out, HasSubstr(absl::StrCat("rank ", rank, " of 4 sum 6")));
    // Ranks 0 and 1 on host 0, 2 and 3 on host 1; all meet at host 0's
    // address, never at loopback.
    int host = rank / 2;
    EXPECT_THAT(
        out, HasSubstr(absl::StrCat(
                 "[rank ", rank, " host ", host, "] master=", net_->address(0),
                 " on=", net_->address(host), " gloo=eth0\n")));
  }
  EXPECT_THAT(out, Not(HasSubstr("master=127.")));
  EXPECT_THAT(out, HasSubstr("all 4 processes exited 0"));
}

TEST_F(SystemTest, TorchPerHostReadsTheHostCentricVariablesAcrossTwoHosts) {
  ASSERT_NO_FATAL_FAILURE(StartHosts({{"host-0", 2, ""}, {"host-1", 2, ""}}));
  std::string out;
  ASSERT_EQ(Launch(0,
                   {"--per-host", "--nodes", "2", "--", "/bin/sh", "-c",
                    "echo coordinator=$SHOAL_COORDINATOR_ADDRESS "
                    "on=$SHOAL_NODE_IP; "
                    "exec /usr/bin/python3 \"$0\" per-host",
                    TorchScript()},
                   &out),
            0)
      << out;
  EXPECT_THAT(out, HasSubstr("rank 0 of 2 sum 1"));
  EXPECT_THAT(out, HasSubstr("rank 1 of 2 sum 1"));
  for (int host = 0; host < 2; ++host) {
    EXPECT_THAT(
        out, HasSubstr(absl::StrCat("[rank ", host, " host ", host,
                                    "] coordinator=", net_->address(0), ":")));
    EXPECT_THAT(out, HasSubstr(absl::StrCat("on=", net_->address(host), "\n")));
  }
}

void SystemTest::GangSurvivesLosingHost1(
    const std::function<void()>& fail_host_1) {
  ASSERT_NO_FATAL_FAILURE(StartHosts({{"host-0", 2, ""}, {"host-1", 2, ""}}));
  std::string marker = "shoal-system-marker-" + shoal::RandomHex(4);
  RunningLaunch launch(
      net_->netns(0),
      LaunchArgs({"--per-device", "--nodes", "2", "--nproc-per-node", "2", "--",
                  "/bin/sh", "-c", "echo up; sleep 120; echo " + marker}));
  auto ups = [&] {
    size_t n = 0;
    const std::string& out = launch.output();
    for (size_t at = out.find("] up"); at != std::string::npos;
         at = out.find("] up", at + 1)) {
      ++n;
    }
    return n;
  };
  launch.ReadUntil([&] { return ups() == 4; },
                   Clock::now() + std::chrono::seconds(60));
  ASSERT_EQ(ups(), 4u) << "the gang never came up:\n" << launch.output();
  ASSERT_FALSE(net_->PidsMatching(1, marker).empty());

  auto start = Clock::now();
  fail_host_1();
  int rc = launch.Finish(60);
  double took = SecondsSince(start);
  const std::string& out = launch.output();
  ASSERT_NE(rc, -1) << "the launch did not end within 60 s of losing host 1:\n"
                    << out;
  EXPECT_NE(rc, 0) << out;
  EXPECT_LT(took, 30) << out;
  std::vector<std::string> lines =
      absl::StrSplit(out, '\n', absl::SkipWhitespace());
  ASSERT_FALSE(lines.empty());
  const std::string& last = lines.back();
  EXPECT_TRUE(absl::StrContains(last, "host 1") ||
              absl::StrContains(last, "rank 2") ||
              absl::StrContains(last, "rank 3"))
      << "the last line does not name host 1 or one of its ranks: " << last
      << "\nwhole output:\n"
      << out;
  std::cout << "launch ended " << took << " s after host 1 was lost: " << last
            << "\n";
  // No rank is left on any host; one cut off stops its own ranks once it
  // cannot reach the launcher.
  auto deadline = Clock::now() + std::chrono::seconds(15);
  while (CountEverywhere(marker) > 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(CountEverywhere(marker), 0u) << "ranks were left behind";
}

TEST_F(SystemTest, HostDeathStopsTheGangAndNamesTheHost) {
  GangSurvivesLosingHost1([&] {
    net_->KillAll(1);
    EXPECT_THAT(net_->Pids(1), IsEmpty());
  });
}

TEST_F(SystemTest, NetworkPartitionStopsTheGangAndNamesTheHost) {
  GangSurvivesLosingHost1([&] {
    absl::Status st = net_->Disconnect(1);
    EXPECT_TRUE(st.ok()) << st;
  });
}

}  // namespace
