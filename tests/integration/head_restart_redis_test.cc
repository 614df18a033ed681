// A head that keeps the cluster's state in Redis (`--storage redis://...`),
// killed with SIGKILL in the middle of a two-node workload and taken over
// by a new head on ANOTHER temp dir, with the same URL, port and token (as a
// head on another host behind the same address would): the nodes, the
// key-value store, the placement group, the submitted job (its status
// and its whole log), the actors and the launch gang are all there, and a task
// that ran through the outage returns its result. Also: a head started again on
// its own temp dir takes its Redis state up, and a Redis that cannot be
// reached, or state of another cluster, stops `shoal start --head` with a clear
// error.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shoal/api.h"
#include "shoal/init.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/restart_workload.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::testing::ClusterSpec;
using ::shoal::testing::kResultTimeoutMs;
using ::shoal::testing::NodeSpec;
using ::shoal::testing::RedisServer;
using ::shoal::testing::RestartWorkload;
using ::shoal::testing::RunCli;
using ::shoal::testing::SleepThenSquare;
using ::shoal::testing::Square;
using ::testing::HasSubstr;

int CountSubstr(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + what.size())) {
    ++n;
  }
  return n;
}

class HeadRestartRedisTest : public shoal::testing::DriverClusterTest {
 protected:
  void SetUp() override {
    auto redis = RedisServer::Start();
    ASSERT_TRUE(redis.ok()) << redis.status();
    redis_ = std::move(*redis);
    ClusterSpec spec;
    NodeSpec head{"redis-head", 4, ""};
    head.extra_args = {"--storage", redis_->url(), "--storage-sync", "full"};
    spec.nodes = {head, {"redis-node", 4, ""}};
    StartAndConnect(spec);
    workload_.emplace(cluster_.get());
  }
  void TearDown() override {
    // First: the takeover's temp dir is inside the cluster's root, which
    // stopping the cluster removes, and with it what `shoal stop` needs to
    // find the takeover head and its agent (which then ran on for hours).
    if (!takeover_dir_.empty()) {
      std::string out;
      RunCli({"stop", "--temp-dir", takeover_dir_}, &out);
    }
    DriverClusterTest::TearDown();
  }
  int Port() const {
    const std::string& a = cluster_->address();
    return std::stoi(a.substr(a.rfind(':') + 1));
  }
  // `shoal start --head` on `temp_dir` (and `extra` flags).
  int StartHeadOn(const std::string& temp_dir,
                  const std::vector<std::string>& extra, std::string* out) {
    std::string no_devices = cluster_->root() + "/no-devices";
    std::vector<std::string> args = {"start",
                                     "--head",
                                     "--temp-dir",
                                     temp_dir,
                                     "--node-ip-address",
                                     "127.0.0.1",
                                     "--num-cpus",
                                     "2",
                                     "--health-timeout-ms",
                                     "2000",
                                     "--dashboard-port",
                                     "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    return RunCli(args, out, {"SHOAL_DEVICE_ROOT=" + no_devices});
  }
  nlohmann::json StatusJson() {
    std::string out;
    if (RunCli({"status", "--format", "json"}, &out, workload_->Env()) != 0) {
      return nlohmann::json();
    }
    return nlohmann::json::parse(out, nullptr, false);
  }
  // The nodes that are alive, by id.
  std::vector<std::string> AliveNodes() {
    std::vector<std::string> alive;
    nlohmann::json s = StatusJson();
    if (!s.is_object()) return alive;
    for (const auto& n : s["nodes"]) {
      if (n["state"] == "ALIVE") alive.push_back(n["node_id"]);
    }
    return alive;
  }
  bool WaitForAlive(const std::vector<std::string>& nodes) {
    for (int i = 0; i < 200; ++i) {
      std::vector<std::string> alive = AliveNodes();
      bool all = true;
      for (const auto& n : nodes) {
        all = all && std::find(alive.begin(), alive.end(), n) != alive.end();
      }
      if (all) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  std::unique_ptr<RedisServer> redis_;
  std::optional<RestartWorkload> workload_;
  std::string takeover_dir_;
};

TEST_F(HeadRestartRedisTest, AHeadOnAnotherTempDirTakesTheClusterOver) {
  ASSERT_NO_FATAL_FAILURE(workload_->Start());
  std::string out;
  auto through = shoal::Task(SleepThenSquare).Remote(int64_t{3000});
  std::this_thread::sleep_for(std::chrono::milliseconds(800));

  cluster_->KillHead();
  auto killed = std::chrono::steady_clock::now();
  takeover_dir_ = cluster_->root() + "/takeover";
  // The cluster's Redis URL and port, as a head on another host would be
  // started. Without the cluster's token the state is not taken (its agents
  // could not reach this head), and nothing is left running.
  const std::vector<std::string> same = {"--storage", redis_->url(), "--port",
                                         std::to_string(Port())};
  ASSERT_NE(StartHeadOn(takeover_dir_ + "-no-token", same, &out), 0);
  EXPECT_THAT(out, HasSubstr("another token")) << out;
  EXPECT_THAT(shoal::testing::ProcessesMentioning(takeover_dir_ + "-no-token"),
              ::testing::IsEmpty());
  std::vector<std::string> with_token = same;
  with_token.insert(with_token.end(), {"--token", cluster_->token()});
  ASSERT_EQ(StartHeadOn(takeover_dir_, with_token, &out), 0) << out;
  // The old nodes come back to the new head (same address), and the new
  // head's own node joins.
  ASSERT_TRUE(WaitForAlive({"redis-head", "redis-node"}))
      << StatusJson().dump();
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
  printf("head_recovery_s (Redis, takeover on another temp dir) %.2f s\n",
         recovery_s);
  EXPECT_EQ(shoal::Get(through, kResultTimeoutMs), 3000 * 3000);

  // The whole log too, including what the old head took before it died:
  // it is in Redis, not only in the old head's session folder.
  ASSERT_NO_FATAL_FAILURE(workload_->ExpectIntact());
  ASSERT_EQ(RunCli({"job", "status", "long-job"}, &out, workload_->Env()), 0)
      << out;
  EXPECT_THAT(out, HasSubstr("SUCCEEDED"));
}

TEST_F(HeadRestartRedisTest, AHeadStartedAgainOnItsTempDirTakesItsStateUp) {
  ASSERT_TRUE(workload_->KvPut("k", "v").ok());
  cluster_->KillHead();
  // No --storage, --storage-sync or --port: the session remembers them.
  std::string out;
  ASSERT_EQ(StartHeadOn(cluster_->temp_dir(0), {}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("Taking up session")) << out;
  auto log = shoal::ReadFile(cluster_->session_dir(0) + "/logs/head.log");
  ASSERT_TRUE(log.ok()) << log.status();
  // The first head's line and the second's (the log is appended to).
  EXPECT_EQ(CountSubstr(*log, "(--storage-sync full)"), 2) << *log;
  // Redis here fsyncs once a second, less than `full` asks: said at start.
  EXPECT_THAT(*log, HasSubstr("--appendfsync always")) << *log;
  ASSERT_TRUE(WaitForAlive({"redis-head", "redis-node"}))
      << StatusJson().dump();
  auto kv = workload_->KvGet("k");
  ASSERT_TRUE(kv.ok()) << kv.status();
  EXPECT_EQ(kv->value(), "v");
  EXPECT_FALSE(std::filesystem::exists(cluster_->session_dir(0) + "/head.db"));
}

TEST_F(HeadRestartRedisTest, AnUnreachableRedisStopsTheStartWithAClearError) {
  auto other = RedisServer::Start();
  ASSERT_TRUE(other.ok()) << other.status();
  const std::string url = (*other)->url();
  (*other)->Kill();
  const std::string dir = cluster_->root() + "/unreachable";
  std::string out;
  EXPECT_NE(
      RunCli({"start", "--head", "--port", "0", "--storage", url, "--temp-dir",
              dir, "--node-ip-address", "127.0.0.1", "--dashboard-port", "0"},
             &out),
      0);
  EXPECT_THAT(out, HasSubstr(url)) << out;
  EXPECT_THAT(out, HasSubstr("start redis-server")) << out;
  EXPECT_THAT(shoal::testing::ProcessesMentioning(dir), ::testing::IsEmpty());
  EXPECT_NE(RunCli({"start", "--head", "--storage", "redis://nowhere",
                    "--temp-dir", dir},
                   &out),
            0);
  EXPECT_THAT(out, HasSubstr("redis://HOST:PORT")) << out;
  EXPECT_EQ(
      RunCli({"start", "--head", "--storage-sync", "always", "--temp-dir", dir},
             &out),
      2);
  EXPECT_THAT(out, HasSubstr("`normal`")) << out;
  EXPECT_THAT(out, HasSubstr("`full`")) << out;
}

}  // namespace
