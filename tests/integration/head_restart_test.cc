// The head killed with SIGKILL in the middle of a two-node workload and
// started again on its temp dir (it takes up its session, from the SQLite
// state it kept): the nodes, the key-value store, placement groups,
// actors (in the same processes, found by name), a launch gang and
// submitted jobs (their output going on) are all there, a task that ran
// through the outage returns its result, the driver carries on with the
// same job, and a driver that did not come back loses what it owned.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "head_client/head_client.h"
#include "rpc/event_loop.h"
#include "shoal/api.h"
#include "shoal/init.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/restart_workload.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::testing::ClusterSpec;
using ::shoal::testing::kResultTimeoutMs;
using ::shoal::testing::NodeSpec;
using ::shoal::testing::RestartWorkload;
using ::shoal::testing::RunCli;
using ::shoal::testing::SleepThenSquare;
using ::shoal::testing::Square;
using ::testing::HasSubstr;

class HeadRestartTest : public shoal::testing::DriverClusterTest {
 protected:
  void SetUp() override {
    ClusterSpec spec;
    // Each write fsynced: the default (`normal`) is killed mid-workload
    // by the chaos tier.
    NodeSpec head{"keep-head", 4, ""};
    head.extra_args = {"--storage-sync", "full"};
    spec.nodes = {head, {"keep-node", 4, ""}};
    StartAndConnect(spec);
    workload_.emplace(cluster_.get());
  }
  nlohmann::json StatusJson() {
    std::string out;
    if (RunCli({"status", "--format", "json"}, &out, workload_->Env()) != 0) {
      return nlohmann::json();
    }
    return nlohmann::json::parse(out, nullptr, false);
  }
  int AliveNodes() {
    nlohmann::json s = StatusJson();
    if (!s.is_object()) return -1;
    int alive = 0;
    for (const auto& n : s["nodes"]) alive += n["state"] == "ALIVE";
    return alive;
  }
  std::optional<RestartWorkload> workload_;
};

TEST_F(HeadRestartTest, NothingIsLostWhenTheHeadIsKilledAndStartedAgain) {
  // State before the kill.
  ASSERT_NO_FATAL_FAILURE(workload_->Start());
  // A task that runs through the outage.
  auto through = shoal::Task(SleepThenSquare).Remote(int64_t{2500});
  std::this_thread::sleep_for(std::chrono::milliseconds(500));

  cluster_->KillHead();
  auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(cluster_->RestartHead().ok());
  // Usable again: every node alive, a new group placed through the head
  // and the agents, a new task run.
  int alive = -1;
  for (int i = 0; i < 100 && alive != 2; ++i) {
    alive = AliveNodes();
    if (alive != 2) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(alive, 2) << StatusJson().dump();
  shoal::PlacementGroupOptions after;
  after.bundles = {{{"CPU", 1}}};
  ASSERT_TRUE(shoal::CreatePlacementGroup(after).Wait(10000));
  EXPECT_EQ(
      shoal::Get(shoal::Task(Square).Remote(int64_t{12}), kResultTimeoutMs),
      144);
  double recovery_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed)
          .count();
  RecordProperty("head_recovery_s", std::to_string(recovery_s));
  printf("head_recovery_s %.2f s\n", recovery_s);

  // The result of the task that ran meanwhile reaches its driver.
  EXPECT_EQ(shoal::Get(through, kResultTimeoutMs), 2500 * 2500);

  // The rest of what was there before the kill.
  workload_->ExpectIntact();

  // The driver came back, so its group stays past the grace period.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  std::string out;
  ASSERT_EQ(RunCli({"list", "placement-groups", "--format", "json"}, &out,
                   workload_->Env()),
            0);
  EXPECT_THAT(out, HasSubstr("kept-group")) << out;
  EXPECT_THAT(out, HasSubstr("CREATED")) << out;
}

// A program that starts while the head is down (killed, about to be
// started again) waits for it instead of failing, and says so.
TEST_F(HeadRestartTest, AProgramStartedWhileTheHeadRestartsWaitsForIt) {
  cluster_->KillHead();
  int fd = -1;
  pid_t launch =
      shoal::testing::StartCli({"launch", "--per-host", "--nodes", "1", "--",
                                "sh", "-c", "echo started-in-outage"},
                               &fd, workload_->Env());
  ASSERT_GT(launch, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ASSERT_TRUE(cluster_->RestartHead().ok());
  std::string out;
  EXPECT_EQ(shoal::testing::FinishCli(launch, fd, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("started-in-outage"));
  EXPECT_THAT(out, HasSubstr("refuses connections"));
}

// A start that fails while taking up a crashed session (another process
// took the head's port meanwhile) leaves the session as it found it: the
// next start takes it up, on the same address with the same token, and the
// cluster's other node is heard from again.
TEST_F(HeadRestartTest, AFailedRestartLeavesTheSessionToTheNextStart) {
  const std::string address = cluster_->address();
  const std::string token = cluster_->token();
  const std::string session = cluster_->session_dir(0);
  const int port = std::stoi(address.substr(address.rfind(':') + 1));
  cluster_->KillHead();
  int squatter = shoal::testing::HoldPort(port);
  ASSERT_GE(squatter, 0) << strerror(errno);
  absl::Status failed = cluster_->RestartHead();
  EXPECT_FALSE(failed.ok());
  EXPECT_THAT(std::string(failed.message()), HasSubstr("already in use"));
  // The crashed session's files are back where the next start looks.
  EXPECT_EQ(shoal::ReadSessionFile(session, "cluster_address"), address);
  close(squatter);

  ASSERT_TRUE(cluster_->RestartHead().ok());
  EXPECT_EQ(shoal::ReadSessionFile(session, "token"), token);
  EXPECT_EQ(shoal::ReadSessionFile(session, "cluster_address"), address);
  EXPECT_FALSE(std::filesystem::exists(session + "/cluster_address.resuming"));
  int alive = 0;
  for (int i = 0; i < 100 && alive != 2; ++i) {
    alive = AliveNodes();
    if (alive != 2) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(alive, 2);
}

TEST_F(HeadRestartTest, AStoppedClusterStartsAfreshAndDamagedStateIsRefused) {
  std::string session = cluster_->session_dir(0);
  shoal::Shutdown();
  std::string out;
  ASSERT_EQ(RunCli({"stop", "--temp-dir", cluster_->temp_dir(0)}, &out), 0);
  EXPECT_TRUE(std::filesystem::exists(session + "/stopped")) << out;
  // A head whose state is damaged does not start on it. (The head leaves
  // its write-ahead log beside the file, not checkpointed: without it.)
  std::ofstream(session + "/head.db") << "not a database";
  for (const char* log : {"/head.db-wal", "/head.db-shm"}) {
    unlink((session + log).c_str());
  }
  unlink((session + "/stopped").c_str());
  EXPECT_NE(RunCli({"start", "--head", "--port", "0", "--temp-dir",
                    cluster_->temp_dir(0), "--node-ip-address", "127.0.0.1"},
                   &out),
            0);
  EXPECT_THAT(out, HasSubstr("damaged")) << out;
  RunCli({"stop", "--temp-dir", cluster_->temp_dir(0)}, &out);
}

}  // namespace
