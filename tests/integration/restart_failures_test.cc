// A head that crashed leaves its session to the next `shoal start --head`,
// which takes it up with the same token and address. Each way that start
// can fail leaves the session as it found it, so that the start after
// takes it up all the same: flags refused (before anything is touched),
// state that cannot be opened (a head.db that is not a database, a Redis
// that refuses), the head's port taken by another program, an agent that
// cannot join, and the `shoal start` command itself killed with SIGKILL
// in the middle, with or without the head it had started.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::testing::ClusterSpec;
using ::shoal::testing::FinishCli;
using ::shoal::testing::NodeSpec;
using ::shoal::testing::ProcessesMentioning;
using ::shoal::testing::RedisServer;
using ::shoal::testing::RunCli;
using ::shoal::testing::StartCli;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// What of a session folder tells the next start which session to take up
// and how: its small files (the token, addresses, pids, storage) by name
// and contents, and the files a start sets aside.
std::map<std::string, std::string> SessionPointers(const std::string& dir) {
  std::map<std::string, std::string> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || absl::StartsWith(name, "head.db")) {
      continue;
    }
    files[name] = shoal::ReadFile(entry.path().string()).value_or("?");
  }
  return files;
}

std::vector<std::string> SetAside(const std::string& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (absl::EndsWith(name, ".resuming") || absl::EndsWith(name, ".next")) {
      found.push_back(name);
    }
  }
  return found;
}

class RestartFailuresTest : public shoal::testing::ClusterTest {
 protected:
  void SetUp() override { StartCluster({}); }

  void StartCluster(const std::vector<std::string>& head_args) {
    ClusterSpec spec;
    NodeSpec head{"rf-head", 2, ""};
    head.extra_args = {"--storage-sync", "full"};
    head.extra_args.insert(head.extra_args.end(), head_args.begin(),
                           head_args.end());
    spec.nodes = {head, {"rf-node", 2, ""}};
    auto cluster = shoal::testing::TestCluster::Start(spec);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    token_ = cluster_->token();
    address_ = cluster_->address();
    session_ = std::filesystem::canonical(cluster_->session_dir(0)).string();
    std::string out;
    ASSERT_EQ(
        RunCli({"job", "submit", "--no-wait", "--submission-id", "kept-job",
                "--temp-dir", cluster_->temp_dir(0), "--", "sleep", "300"},
               &out),
        0)
        << out;
  }

  // The head killed with SIGKILL (its node's agent keeps running), and
  // what its session looks like then.
  void CrashHead() {
    cluster_->KillHead();
    crashed_ = SessionPointers(session_);
    latest_ =
        std::filesystem::read_symlink(cluster_->temp_dir(0) + "/session_latest")
            .string();
  }

  // `shoal start --head` on the head's temp dir with `extra` flags.
  int StartHead(const std::vector<std::string>& extra, std::string* out) {
    std::vector<std::string> args = {"start",
                                     "--head",
                                     "--port",
                                     "0",
                                     "--dashboard-port",
                                     "0",
                                     "--temp-dir",
                                     cluster_->temp_dir(0),
                                     "--node-ip-address",
                                     "127.0.0.1",
                                     "--num-cpus",
                                     "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    return RunCli(args, out);
  }

  // The session is as CrashHead found it.
  void ExpectAsCrashed(const std::string& after) {
    EXPECT_EQ(SessionPointers(session_), crashed_) << after;
    EXPECT_EQ(
        std::filesystem::read_symlink(cluster_->temp_dir(0) + "/session_latest")
            .string(),
        latest_)
        << after;
  }

  int AliveNodes() {
    std::string out;
    if (RunCli(
            {"status", "--format", "json", "--temp-dir", cluster_->temp_dir(0)},
            &out) != 0) {
      return -1;
    }
    nlohmann::json s = nlohmann::json::parse(out, nullptr, false);
    if (!s.is_object()) return -1;
    int alive = 0;
    for (const auto& n : s["nodes"]) alive += n["state"] == "ALIVE";
    return alive;
  }

  // The next start takes the session up: same token and address, nothing
  // left set aside, the job and both nodes there.
  void ExpectTakenUp() {
    std::string out;
    ASSERT_EQ(StartHead({}, &out), 0) << out;
    EXPECT_EQ(std::filesystem::canonical(cluster_->session_dir(0)).string(),
              session_);
    EXPECT_EQ(shoal::ReadSessionFile(session_, "token"), token_);
    EXPECT_EQ(shoal::ReadSessionFile(session_, "cluster_address"), address_);
    EXPECT_THAT(SetAside(session_), IsEmpty());
    // Its head and its node's agent run (the head's view of a node only
    // changes after a health timeout).
    EXPECT_NE(shoal::LivePid(session_, "head"), 0);
    EXPECT_NE(shoal::LivePid(session_, "agent"), 0);
    EXPECT_EQ(RunCli({"job", "status", "--temp-dir", cluster_->temp_dir(0),
                      "kept-job"},
                     &out),
              0)
        << out;
    int alive = 0;
    for (int i = 0; i < 100 && alive != 2; ++i) {
      alive = AliveNodes();
      if (alive != 2)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_EQ(alive, 2);
  }

  std::string token_;
  std::string address_;
  std::string session_;
  std::map<std::string, std::string> crashed_;
  std::string latest_;
};

TEST_F(RestartFailuresTest, FlagsRefusedTouchNothing) {
  CrashHead();
  struct Case {
    std::vector<std::string> flags;
    int exit_code;
  };
  const std::vector<Case> cases = {
      {{"--num-cpus", "-1"}, 2},
      {{"--node-id", "../../etc"}, 2},
      {{"--health-timeout-ms", "100", "--heartbeat-ms", "500"}, 2},
      {{"--storage-sync", "sometimes"}, 2},
      {{"--storage", "redis://:pw@127.0.0.1:notaport"}, 2},
      {{"--discard-wal", "--storage", "memory"}, 2},
      // Another token than the session's: it is the session's cluster.
      {{"--token", "not-the-sessions"}, 1},
  };
  for (const Case& c : cases) {
    std::string out;
    EXPECT_EQ(StartHead(c.flags, &out), c.exit_code)
        << c.flags[0] << ": " << out;
    ExpectAsCrashed(c.flags[0]);
  }
  ExpectTakenUp();
}

TEST_F(RestartFailuresTest, AHeadDbThatCannotBeOpened) {
  CrashHead();
  const std::string db = session_ + "/head.db";
  std::filesystem::rename(db, db + ".kept");
  std::filesystem::create_directory(db);
  std::string out;
  EXPECT_NE(StartHead({}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("cannot start the head")) << out;
  ExpectAsCrashed("head.db a folder");
  std::filesystem::remove(db);
  std::filesystem::rename(db + ".kept", db);
  ExpectTakenUp();
}

TEST_F(RestartFailuresTest, ThePortTakenByAnotherProgram) {
  CrashHead();
  const int port = std::stoi(address_.substr(address_.rfind(':') + 1));
  int squatter = shoal::testing::HoldPort(port);
  ASSERT_GE(squatter, 0) << strerror(errno);
  std::string out;
  EXPECT_NE(StartHead({}, &out), 0);
  EXPECT_THAT(out, HasSubstr("already in use")) << out;
  // The crashed head's agents and programs come back to that port: the
  // hint is to free it, not `shoal stop` (which would end the session).
  EXPECT_THAT(out, HasSubstr("then run `shoal start --head` again")) << out;
  EXPECT_THAT(out, Not(HasSubstr("shoal stop"))) << out;
  ExpectAsCrashed("port taken");
  close(squatter);
  ExpectTakenUp();
}

// An agent start on the head's temp dir that fails (no head answers where
// it was pointed) moves nothing: the crashed head's session is still the
// one the next `shoal start --head` takes up.
TEST_F(RestartFailuresTest, AnAgentThatCannotJoin) {
  cluster_->KillAgent(0);
  for (int i = 0; i < 500 && shoal::LivePid(session_, "agent") != 0; ++i) {
    usleep(10000);
  }
  CrashHead();
  std::string out;
  EXPECT_NE(RunCli({"start", "--address", "127.0.0.1:1", "--token", token_,
                    "--temp-dir", cluster_->temp_dir(0), "--node-ip-address",
                    "127.0.0.1", "--num-cpus", "1"},
                   &out),
            0)
      << out;
  ExpectAsCrashed("agent join failed");
  ExpectTakenUp();
}

// `shoal start --head` killed with SIGKILL while it takes the session up:
// once the crashed head's files are set aside, and once the new head is up
// (before its agent). Each time alone, and with the head it started.
TEST_F(RestartFailuresTest, TheStartKilledMidway) {
  for (const char* moment : {"cluster_address.resuming", "head.pid"}) {
    for (bool with_its_head : {false, true}) {
      SCOPED_TRACE(absl::StrCat("killed at ", moment,
                                with_its_head ? ", with its head" : ""));
      CrashHead();
      if (std::string(moment) == "head.pid") {
        // Its node's agent died too: the start has an agent to start after
        // its head is up, and is killed between the two.
        cluster_->KillAgent(0);
        unlink((session_ + "/head.pid").c_str());
      }
      int fd = -1;
      pid_t cli =
          StartCli({"start", "--head", "--port", "0", "--dashboard-port", "0",
                    "--temp-dir", cluster_->temp_dir(0), "--node-ip-address",
                    "127.0.0.1", "--num-cpus", "2"},
                   &fd);
      ASSERT_GT(cli, 0);
      for (int i = 0; i < 2000 && !std::filesystem::exists(
                                      absl::StrCat(session_, "/", moment));
           ++i) {
        usleep(1000);
      }
      kill(cli, SIGKILL);
      std::string out;
      FinishCli(cli, fd, &out);
      // The head it spawned runs on (a session of its own), until it is up
      // or has failed; or it is killed too.
      const std::string its_head = absl::StrCat("_head ");
      auto head_of_session = [&] {
        std::vector<std::string> heads;
        for (const std::string& p : ProcessesMentioning(session_)) {
          if (absl::StrContains(p, its_head)) heads.push_back(p);
        }
        return heads;
      };
      for (int i = 0; i < 200; ++i) {
        if (head_of_session().empty() ||
            shoal::LivePid(session_, "head") != 0) {
          break;
        }
        usleep(50000);
      }
      if (with_its_head) {
        for (const std::string& p : head_of_session()) {
          kill(std::stoi(p.substr(0, p.find(':'))), SIGKILL);
        }
        for (int i = 0; i < 200 && !head_of_session().empty(); ++i) {
          usleep(10000);
        }
      }
      ASSERT_NO_FATAL_FAILURE(ExpectTakenUp());
    }
  }
}

// A start in a temp dir with no session, that fails (its port is taken),
// leaves no session for the next start to take up: that one starts a
// cluster of its own.
TEST_F(RestartFailuresTest, AFailedFirstStartLeavesNothingToTakeUp) {
  const std::string temp_dir = cluster_->root() + "/first";
  const std::string port = address_.substr(address_.rfind(':') + 1);
  std::string out;
  EXPECT_NE(RunCli({"start", "--head", "--port", port, "--dashboard-port", "0",
                    "--temp-dir", temp_dir, "--node-ip-address", "127.0.0.1",
                    "--num-cpus", "1"},
                   &out),
            0)
      << out;
  EXPECT_THAT(out, HasSubstr("already in use"));
  EXPECT_FALSE(std::filesystem::exists(temp_dir + "/session_latest"));
  ASSERT_EQ(RunCli({"start", "--head", "--port", "0", "--dashboard-port", "0",
                    "--temp-dir", temp_dir, "--node-ip-address", "127.0.0.1",
                    "--num-cpus", "1"},
                   &out),
            0)
      << out;
  EXPECT_THAT(out, Not(HasSubstr("Taking up session")));
  EXPECT_NE(shoal::ReadSessionFile(temp_dir + "/session_latest", "token"),
            token_);
  RunCli({"stop", "--temp-dir", temp_dir}, &out);
}

// The same with the state in Redis: a Redis that refuses connections
// fails the start, and the one after, with Redis back, takes the session
// up.
class RedisRestartFailuresTest : public RestartFailuresTest {
 protected:
  void SetUp() override {
    auto redis = RedisServer::Start();
    ASSERT_TRUE(redis.ok()) << redis.status();
    redis_ = std::move(*redis);
    StartCluster({"--storage", redis_->url()});
  }
  void TearDown() override {
    RestartFailuresTest::TearDown();
    redis_.reset();
  }
  std::unique_ptr<RedisServer> redis_;
};

TEST_F(RedisRestartFailuresTest, ARedisThatRefuses) {
  CrashHead();
  redis_->Kill();
  std::string out;
  EXPECT_NE(StartHead({}, &out), 0) << out;
  ExpectAsCrashed("redis down");
  // Another --storage that fails does not replace the session's.
  EXPECT_NE(StartHead({"--storage", "redis://127.0.0.1:1"}, &out), 0) << out;
  ExpectAsCrashed("another redis, down");
  ASSERT_TRUE(redis_->Restart().ok());
  ExpectTakenUp();
}

}  // namespace
