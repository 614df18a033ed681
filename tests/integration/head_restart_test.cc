// The head killed with SIGKILL in the middle of a two-node workload and
// started again on its temp dir (it takes up its session, from the SQLite
// state it kept): the nodes, the key-value store, placement groups and
// submitted jobs (their output going on) are all there, a task that ran
// through the outage returns its result, the driver carries on with the
// same job, and a driver that did not come back loses what it owned.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/event_loop.h"
#include "rpc/head_client.h"
#include "shoal/api.h"
#include "shoal/init.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::testing::ClusterSpec;
using ::shoal::testing::RunCli;
using ::testing::HasSubstr;

int64_t SleepThenSquare(int64_t ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms * ms;
}
int64_t Square(int64_t x) { return x * x; }
SHOAL_REMOTE(SleepThenSquare, Square);

class HeadRestartTest : public shoal::testing::DriverClusterTest {
 protected:
  void SetUp() override {
    ClusterSpec spec;
    spec.nodes = {{"keep-head", 2, ""}, {"keep-node", 2, ""}};
    StartAndConnect(spec);
  }
  std::vector<std::string> Env() const {
    return {"SHOAL_ADDRESS=" + cluster_->address(),
            "SHOAL_TOKEN=" + cluster_->token()};
  }
  nlohmann::json StatusJson() {
    std::string out;
    if (RunCli({"status", "--format", "json"}, &out, Env()) != 0) {
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
  // A client of the head for the key-value store.
  absl::StatusOr<shoal::proto::KvGetReply> KvGet(const std::string& key) {
    auto loop = shoal::rpc::EventLoop::Create("test-kv");
    if (!loop.ok()) return loop.status();
    absl::StatusOr<shoal::proto::KvGetReply> reply;
    {
      shoal::rpc::HeadClient head(loop->get(), cluster_->address(),
                                  cluster_->token(), "test");
      shoal::proto::KvGetRequest req;
      req.set_key(key);
      reply = head.KvGet(req);
    }
    (*loop)->Stop();
    return reply;
  }
  absl::Status KvPut(const std::string& key, const std::string& value) {
    auto loop = shoal::rpc::EventLoop::Create("test-kv");
    if (!loop.ok()) return loop.status();
    absl::Status st;
    {
      shoal::rpc::HeadClient head(loop->get(), cluster_->address(),
                                  cluster_->token(), "test");
      shoal::proto::KvPutRequest req;
      req.set_key(key);
      req.set_value(value);
      st = head.KvPut(req).status();
    }
    (*loop)->Stop();
    return st;
  }
};

TEST_F(HeadRestartTest, NothingIsLostWhenTheHeadIsKilledAndStartedAgain) {
  // State before the kill.
  ASSERT_TRUE(KvPut("rendezvous/group-1", "10.0.0.1:29500").ok());
  shoal::PlacementGroupOptions pg;
  pg.name = "kept-group";
  pg.bundles = {{{"CPU", 1}}, {{"CPU", 1}}};
  pg.strategy = shoal::PlacementStrategy::kStrictSpread;
  shoal::PlacementGroup group = shoal::CreatePlacementGroup(pg);
  ASSERT_TRUE(group.Wait(10000));
  std::vector<std::string> bundle_nodes = group.BundleNodes();
  std::string out;
  ASSERT_EQ(RunCli({"job", "submit", "--no-wait", "--submission-id", "long-job",
                    "--", "sh", "-c",
                    "for i in 1 2 3 4 5 6 7 8 9 10; do echo line $i; sleep "
                    "0.3; done"},
                   &out, Env()),
            0)
      << out;
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
  EXPECT_EQ(shoal::Get(shoal::Task(Square).Remote(int64_t{12})), 144);
  double recovery_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed)
          .count();
  RecordProperty("head_recovery_s", std::to_string(recovery_s));
  printf("head_recovery_s %.2f s\n", recovery_s);

  // The result of the task that ran meanwhile reaches its driver.
  EXPECT_EQ(shoal::Get(through), 2500 * 2500);

  // The key-value store, the group (same nodes) and the job.
  auto kv = KvGet("rendezvous/group-1");
  ASSERT_TRUE(kv.ok()) << kv.status();
  EXPECT_TRUE(kv->found());
  EXPECT_EQ(kv->value(), "10.0.0.1:29500");
  std::optional<shoal::PlacementGroup> again =
      shoal::GetPlacementGroup("kept-group");
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->id(), group.id());
  EXPECT_EQ(again->BundleNodes(), bundle_nodes);
  ASSERT_EQ(RunCli({"job", "logs", "--follow", "long-job"}, &out, Env()), 0)
      << out;
  for (int i = 1; i <= 10; ++i) {
    EXPECT_THAT(out, HasSubstr(absl::StrCat("line ", i, "\n"))) << out;
  }
  // Not twice: reports sent again are not written again.
  EXPECT_EQ(out.find("line 1\n"), out.rfind("line 1\n")) << out;
  EXPECT_THAT(out, HasSubstr("SUCCEEDED"));

  // The driver came back, so its group stays past the grace period.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  ASSERT_EQ(
      RunCli({"list", "placement-groups", "--format", "json"}, &out, Env()), 0);
  EXPECT_THAT(out, HasSubstr("kept-group")) << out;
  EXPECT_THAT(out, HasSubstr("CREATED")) << out;
}

TEST_F(HeadRestartTest, AStoppedClusterStartsAfreshAndDamagedStateIsRefused) {
  std::string session = cluster_->session_dir(0);
  shoal::Shutdown();
  std::string out;
  ASSERT_EQ(RunCli({"stop", "--temp-dir", cluster_->temp_dir(0)}, &out), 0);
  EXPECT_TRUE(std::filesystem::exists(session + "/stopped")) << out;
  // A head whose state is damaged does not start on it.
  std::ofstream(session + "/head.db") << "not a database";
  unlink((session + "/stopped").c_str());
  EXPECT_NE(RunCli({"start", "--head", "--port", "0", "--temp-dir",
                    cluster_->temp_dir(0), "--node-ip-address", "127.0.0.1"},
                   &out),
            0);
  EXPECT_THAT(out, HasSubstr("damaged")) << out;
  RunCli({"stop", "--temp-dir", cluster_->temp_dir(0)}, &out);
}

}  // namespace
