#include "cli/start_command.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "cli/cli_fakes.h"
#include "cli/session_files.h"
#include "common/files.h"
#include "common/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::cli::testing {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsSupersetOf;
using ::testing::Not;

std::string Joined(const std::vector<std::string>& argv) {
  return absl::StrJoin(argv, " ");
}

int Mode(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return -1;
  return st.st_mode & 0777;
}

class StartTest : public CliTest {
 protected:
  std::string TempDir() const { return dir_ + "/t"; }
  Ran StartHead(std::vector<std::string> more = {}) {
    std::vector<std::string> args = {"start",
                                     "--head",
                                     "--port",
                                     "7100",
                                     "--temp-dir",
                                     TempDir(),
                                     "--node-ip-address",
                                     "127.0.0.1"};
    args.insert(args.end(), more.begin(), more.end());
    return shoal_.Run(args);
  }
  Shoal shoal_;
};

TEST_F(StartTest, HeadStartsTheHeadThenItsNodeAgent) {
  Ran ran = StartHead({"--token", "sekret", "--num-cpus", "4"});
  ASSERT_EQ(ran.code, 0) << ran.err;
  ASSERT_EQ(shoal_.host.started.size(), 2u);
  const DaemonSpec& head = shoal_.host.started[0];
  const DaemonSpec& agent = shoal_.host.started[1];
  EXPECT_EQ(head.argv[1], "_head");
  EXPECT_THAT(Joined(head.argv),
              HasSubstr("--node-ip-address 127.0.0.1 --port 7100"));
  EXPECT_THAT(Joined(head.argv),
              HasSubstr("--dashboard-port 8265 --dashboard-port-fallback 1"));
  EXPECT_EQ(head.token, "sekret");
  EXPECT_EQ(head.ready_file, "cluster_address");
  EXPECT_FALSE(head.block);
  EXPECT_EQ(agent.argv[1], "_agent");
  EXPECT_THAT(Joined(agent.argv), HasSubstr("--address 127.0.0.1:7100"));
  EXPECT_THAT(Joined(agent.argv), HasSubstr("--num-cpus 4.000000"));
  EXPECT_EQ(agent.argv.back(), "--head-node");
  EXPECT_EQ(agent.ready_file, "agent_address");
  // The token never travels in arguments.
  EXPECT_THAT(Joined(head.argv), Not(HasSubstr("sekret")));
  EXPECT_THAT(Joined(agent.argv), Not(HasSubstr("sekret")));

  const std::string session = head.session_dir;
  EXPECT_EQ(ReadSessionFile(session, "token"), "sekret");
  EXPECT_EQ(Mode(session + "/token"), 0600);
  EXPECT_EQ(Mode(session), 0700);
  EXPECT_THAT(ran.out, HasSubstr("Shoal head started."));
  EXPECT_THAT(ran.out, HasSubstr("Head address:   127.0.0.1:7100"));
  EXPECT_THAT(ran.out, HasSubstr("shoal start --address=127.0.0.1:7100 "
                                 "--token=sekret"));
  EXPECT_THAT(ran.out, HasSubstr("Dashboard:      http://127.0.0.1:8265/"
                                 "?token=sekret"));
  EXPECT_THAT(ran.out, HasSubstr("shoal stop --temp-dir " + TempDir()));
}

TEST_F(StartTest, AHeadWithoutATokenMakesOne) {
  ASSERT_EQ(StartHead().code, 0);
  std::string token =
      ReadSessionFile(shoal_.host.started[0].session_dir, "token");
  EXPECT_EQ(token.size(), 32u);
  EXPECT_EQ(shoal_.host.started[0].token, token);
}

TEST_F(StartTest, StorageGoesInAPrivateFileNotTheArguments) {
  const std::string url = "redis://:pw@10.0.0.5:6379/2";
  Ran ran = StartHead({"--storage", url, "--storage-sync", "full"});
  ASSERT_EQ(ran.code, 0) << ran.err;
  const DaemonSpec& head = shoal_.host.started[0];
  EXPECT_THAT(Joined(head.argv), Not(HasSubstr("pw@")));
  EXPECT_EQ(FakeHost::ArgAfter(head.argv, "--storage-file"),
            head.session_dir + "/storage.next");
  EXPECT_EQ(FakeHost::ArgAfter(head.argv, "--storage-sync"), "full");
  // Once the head is up the session keeps them, for a head that takes it up.
  EXPECT_EQ(ReadSessionFile(head.session_dir, kStorageFile), url);
  EXPECT_EQ(Mode(head.session_dir + "/" + kStorageFile), 0600);
  EXPECT_EQ(ReadSessionFile(head.session_dir, kStorageSyncFile), "full");
  EXPECT_FALSE(std::filesystem::exists(head.session_dir + "/storage.next"));
}

TEST_F(StartTest, JoiningStartsOnlyAnAgent) {
  Ran ran = shoal_.Run({"start", "--address", "192.0.2.1:6379", "--token", "t",
                        "--temp-dir", TempDir(), "--metrics-port", "0"});
  ASSERT_EQ(ran.code, 0) << ran.err;
  ASSERT_EQ(shoal_.host.started.size(), 1u);
  const DaemonSpec& agent = shoal_.host.started[0];
  EXPECT_EQ(agent.argv[1], "_agent");
  EXPECT_THAT(Joined(agent.argv), HasSubstr("--metrics-port 0"));
  EXPECT_THAT(agent.argv, Not(Contains("--head-node")));
  EXPECT_EQ(ReadSessionFile(agent.session_dir, "cluster_address"),
            "192.0.2.1:6379");
  EXPECT_THAT(ran.out, HasSubstr("Shoal node agent started: node node-1 at "
                                 "127.0.0.1:42000 joined 192.0.2.1:6379."));
}

TEST_F(StartTest, BlockWaitsAndEndsWithTheAgentsExitStatus) {
  shoal_.host.child_ends = 3 << 8;  // the agent exited 3
  Ran ran = StartHead({"--block"});
  EXPECT_EQ(ran.code, 3);
  EXPECT_TRUE(shoal_.host.blocked);
  ASSERT_EQ(shoal_.host.started.size(), 2u);
  EXPECT_TRUE(shoal_.host.started[0].block);
  EXPECT_EQ(shoal_.host.awaited, 1001);  // the agent
  EXPECT_THAT(ran.err, HasSubstr("shoal: the node agent (pid 1001) "));
  EXPECT_THAT(shoal_.host.terminated, ElementsAre(1000));  // the head
}

TEST_F(StartTest, BlockStopsBothOnASignal) {
  Ran ran = StartHead({"--block"});
  EXPECT_EQ(ran.code, 0);
  EXPECT_THAT(shoal_.host.terminated, ElementsAre(1001, 1000));
}

TEST_F(StartTest, WhatRunsAlreadyIsLeftAlone) {
  ASSERT_EQ(StartHead().code, 0);
  const std::string session = shoal_.host.started[0].session_dir;
  shoal_.host.SetLive(session, "head", 1000);
  shoal_.host.SetLive(session, "agent", 1001);
  Ran again = StartHead();
  EXPECT_EQ(again.code, 0);
  EXPECT_EQ(shoal_.host.started.size(), 2u);
  EXPECT_THAT(again.out, HasSubstr("A Shoal head is already running from " +
                                   TempDir() + " (pid 1000"));
  EXPECT_THAT(again.out, HasSubstr("nothing to do"));

  Ran other_port = shoal_.Run(
      {"start", "--head", "--port", "7200", "--temp-dir", TempDir()});
  EXPECT_EQ(other_port.code, 1);
  EXPECT_THAT(other_port.err,
              HasSubstr("shoal: a head is already running from " + TempDir() +
                        ": pid 1000, address 127.0.0.1:7100 (not port 7200)"));

  Ran join = shoal_.Run({"start", "--address", "192.0.2.1:6379", "--token", "t",
                         "--temp-dir", TempDir()});
  EXPECT_EQ(join.code, 0);
  EXPECT_THAT(join.out, HasSubstr("A node agent is already running from"));
  EXPECT_EQ(shoal_.host.started.size(), 2u);
}

TEST_F(StartTest, AHeadWithoutItsAgentGetsOne) {
  ASSERT_EQ(StartHead().code, 0);
  const std::string session = shoal_.host.started[0].session_dir;
  shoal_.host.SetLive(session, "head", 1000);
  Ran ran = StartHead();
  EXPECT_EQ(ran.code, 0) << ran.err;
  ASSERT_EQ(shoal_.host.started.size(), 3u);
  EXPECT_EQ(shoal_.host.started[2].argv[1], "_agent");
  EXPECT_EQ(shoal_.host.started[2].token, ReadSessionFile(session, "token"));
  EXPECT_THAT(ran.out, HasSubstr("without its node agent: starting it."));
}

TEST_F(StartTest, ACrashedHeadsSessionIsTakenUpOnItsPortWithItsToken) {
  ASSERT_EQ(StartHead({"--token", "first"}).code, 0);
  const std::string session = shoal_.host.started[0].session_dir;
  WriteFile(session + "/head.db", "").IgnoreError();  // state left behind
  // The head and agent died without `shoal stop`.
  Ran ran = shoal_.Run({"start", "--head", "--port", "6379", "--temp-dir",
                        TempDir(), "--node-ip-address", "127.0.0.1"});
  ASSERT_EQ(ran.code, 0) << ran.err;
  ASSERT_EQ(shoal_.host.started.size(), 4u);
  const DaemonSpec& head = shoal_.host.started[2];
  EXPECT_EQ(head.session_dir, session);
  EXPECT_EQ(FakeHost::ArgAfter(head.argv, "--port"), "7100");
  EXPECT_EQ(head.token, "first");
  EXPECT_THAT(ran.out, HasSubstr("Taking up session " + session));
  EXPECT_FALSE(
      std::filesystem::exists(session + "/cluster_address" + kResumingSuffix));

  // Another token would be another cluster.
  Ran other = shoal_.Run(
      {"start", "--head", "--temp-dir", TempDir(), "--token", "second"});
  EXPECT_EQ(other.code, 1);
  EXPECT_THAT(other.err, HasSubstr("did not stop, and a head started here "
                                   "takes it up with its own token"));
}

TEST_F(StartTest, AStoppedClusterIsNotTakenUp) {
  ASSERT_EQ(StartHead().code, 0);
  const std::string session = shoal_.host.started[0].session_dir;
  WriteFile(session + "/head.db", "").IgnoreError();
  WriteFile(session + "/" + kStoppedMarker, "").IgnoreError();
  Ran ran = StartHead();
  ASSERT_EQ(ran.code, 0);
  EXPECT_NE(shoal_.host.started[2].session_dir, session);
}

// A program's shoal.init() cluster that died with the program (killed)
// left its state: `shoal start --head` starts a cluster of its own instead
// of taking that one up, which `shoal status` would not find.
TEST_F(StartTest, AProgramsEmbeddedClusterIsNotTakenUp) {
  ASSERT_EQ(StartHead().code, 0);
  const std::string session = shoal_.host.started[0].session_dir;
  WriteFile(session + "/head.db", "").IgnoreError();
  MarkSessionEmbedded(session);
  Ran ran = StartHead();
  ASSERT_EQ(ran.code, 0);
  EXPECT_NE(shoal_.host.started[2].session_dir, session);
  EXPECT_THAT(ran.out, Not(HasSubstr("Taking up session")));
}

TEST_F(StartTest, AHeadThatFailsLeavesTheTempDirAsItWas) {
  shoal_.host.fail_start = [](const DaemonSpec&) {
    return absl::UnavailableError("bind: address already in use");
  };
  Ran ran = StartHead();
  EXPECT_EQ(ran.code, 1);
  EXPECT_THAT(ran.err,
              HasSubstr("shoal: cannot start the head: 127.0.0.1:7100 is "
                        "already in use by another program. Stop it with "
                        "`shoal stop --temp-dir " +
                        TempDir() + "`, or choose another --port"));
  EXPECT_FALSE(std::filesystem::exists(TempDir() + "/session_latest"));
  EXPECT_EQ(shoal_.host.started.size(), 1u);
}

TEST_F(StartTest, AnAgentThatFailsStopsTheHead) {
  shoal_.host.fail_start = [](const DaemonSpec& d) {
    return d.log_name == "agent" ? absl::UnavailableError("it died")
                                 : absl::OkStatus();
  };
  Ran ran = StartHead();
  EXPECT_EQ(ran.code, 1);
  EXPECT_THAT(ran.err,
              HasSubstr("shoal: cannot start the node agent: it died"));
  EXPECT_THAT(shoal_.host.terminated, ElementsAre(1000));
}

// Each: the command line, and what the error says. All are usage errors
// found before anything is made.
struct BadStart {
  std::vector<std::string> args;
  std::string says;
};

class BadStartTest : public StartTest,
                     public ::testing::WithParamInterface<BadStart> {};

TEST_P(BadStartTest, IsAUsageErrorBeforeAnythingIsMade) {
  std::vector<std::string> args = {"start", "--temp-dir", TempDir()};
  args.insert(args.end(), GetParam().args.begin(), GetParam().args.end());
  Ran ran = shoal_.Run(args);
  EXPECT_EQ(ran.code, 2);
  EXPECT_THAT(ran.err, HasSubstr(GetParam().says));
  EXPECT_TRUE(shoal_.host.started.empty());
  EXPECT_FALSE(std::filesystem::exists(TempDir()));
}

INSTANTIATE_TEST_SUITE_P(
    Flags, BadStartTest,
    ::testing::Values(
        BadStart{{"--head", "--address", "192.0.2.1:6379"},
                 "say either --head (start a new cluster here) or --address "
                 "HOST:PORT (join a cluster), not both"},
        BadStart{{}, "say --head (start a new cluster here) or --address"},
        BadStart{{"--head", "--num-gpus", "2.5"}, "--num-gpus: "},
        BadStart{{"--head", "--resources", "{bad"}, "--resources: "},
        BadStart{{"--head", "--node-id", ".hidden"}, "--node-id"},
        BadStart{
            {"--head", "--health-timeout-ms", "900", "--heartbeat-ms", "500"},
            "--health-timeout-ms (900) must be at least twice "
            "--heartbeat-ms (500)"},
        BadStart{{"--head", "--storage-sync", "sometimes"}, "sometimes"},
        BadStart{{"--head", "--storage", "redis://"}, "redis"},
        BadStart{{"--address", "192.0.2.1:6379", "--discard-wal"},
                 "--discard-wal is for a head (--head) that keeps its state "
                 "in SQLite"},
        BadStart{{"--head", "--storage", "memory", "--discard-wal"},
                 "--discard-wal is for a head"}));

}  // namespace
}  // namespace shoal::cli::testing
