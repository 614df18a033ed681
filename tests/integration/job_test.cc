// `shoal job` on a real two-node cluster: entrypoints that succeed and fail
// with their exit code, output kept in the head's session folder and
// followed live, the entrypoint's resources choosing its node, programs and
// launch gangs the entrypoint starts joining the cluster, stop ending the
// whole process tree on every host, a working dir sent along (and one too
// big refused), 20 jobs at once, and bad input.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::testing::ClusterSpec;
using ::shoal::testing::FinishCli;
using ::shoal::testing::ProcessesMentioning;
using ::shoal::testing::RunCli;
using ::shoal::testing::StartCli;
using ::shoal::testing::StartSuiteCluster;
using ::shoal::testing::StopSuiteCluster;
using ::shoal::testing::TestCluster;
using ::testing::HasSubstr;
using ::testing::Not;

// The CLI as an entrypoint runs it: this binary in the CLI's role.
std::string Cli() {
  return absl::StrCat("env SHOAL_ROLE=cli ", shoal::SelfExecutable());
}

class JobTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterSpec spec;
    spec.nodes = {{"job-head", 2, ""}, {"job-big", 2, R"({"big": 1})"}};
    StartSuiteCluster(spec, &cluster_);
  }
  static void TearDownTestSuite() { StopSuiteCluster(&cluster_); }

  // `shoal job ARGS` against the cluster; its exit code, output in *out.
  int Job(const std::vector<std::string>& args, std::string* out) {
    std::vector<std::string> full = {"job"};
    full.insert(full.end(), args.begin(), args.end());
    return RunCli(full, out, Env());
  }
  std::vector<std::string> Env() const {
    return {"SHOAL_ADDRESS=" + cluster_->address(),
            "SHOAL_TOKEN=" + cluster_->token()};
  }
  nlohmann::json Status(const std::string& id) {
    std::string out;
    EXPECT_EQ(Job({"status", "--format", "json", id}, &out), 0) << out;
    return nlohmann::json::parse(out, nullptr, false);
  }
  // Submits with --no-wait; the job's id.
  std::string SubmitNoWait(const std::vector<std::string>& args) {
    std::vector<std::string> full = {"submit", "--no-wait"};
    full.insert(full.end(), args.begin(), args.end());
    std::string out;
    EXPECT_EQ(Job(full, &out), 0) << out;
    // The id is the last line on stdout; hints go to stderr before it.
    std::string id = out.substr(out.find_last_of('\n', out.size() - 2) + 1);
    while (!id.empty() && id.back() == '\n') id.pop_back();
    return id;
  }

  static std::unique_ptr<TestCluster> cluster_;
};

std::unique_ptr<TestCluster> JobTest::cluster_;

TEST_F(JobTest, SuccessAndFailureWithTheExitCode) {
  std::string out;
  EXPECT_EQ(Job({"submit", "--submission-id", "ok-1", "--", "sh", "-c",
                 "echo to stdout; echo to stderr >&2"},
                &out),
            0)
      << out;
  EXPECT_THAT(out, HasSubstr("to stdout"));
  EXPECT_THAT(out, HasSubstr("to stderr"));
  EXPECT_THAT(out, HasSubstr("Job ok-1 SUCCEEDED"));
  nlohmann::json ok = Status("ok-1");
  EXPECT_EQ(ok["status"], "SUCCEEDED");
  EXPECT_EQ(ok["node_id"], "job-head");  // the head's node by default

  EXPECT_EQ(Job({"submit", "--submission-id", "fails-7", "--", "sh", "-c",
                 "echo about to fail; exit 7"},
                &out),
            7)
      << out;
  nlohmann::json failed = Status("fails-7");
  EXPECT_EQ(failed["status"], "FAILED");
  EXPECT_EQ(failed["exit_code"], 7);
  EXPECT_THAT(failed["message"].get<std::string>(),
              HasSubstr("exited with code 7"));
  // The output is kept in the head's session folder.
  auto log =
      shoal::ReadFile(cluster_->session_dir(0) + "/logs/job-fails-7.log");
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ(*log, "about to fail\n");
  EXPECT_EQ(Job({"logs", "fails-7"}, &out), 0);
  EXPECT_EQ(out, "about to fail\n");
}

// A job's output is bytes, whatever it prints (Latin-1, NUL bytes, a 1 MiB
// line with no newline, a binary file), and so is its entrypoint (a raw
// Latin-1 byte in an argument): followed, logged and listed whole, with the
// exit code right.
TEST_F(JobTest, AnyBytesItPrintsComeBackAsPrinted) {
  const std::string binary = "/bin/true";
  std::string out;
  EXPECT_EQ(Job({"submit", "--submission-id", "bytes-1", "--", "sh", "-c",
                 "printf 'caf\\351 ok\\n'; printf 'nul\\000byte\\n'; "
                 "head -c 1048576 /dev/zero | tr '\\000' x; printf '\\n'; "
                 "cat " +
                     binary +
                     "; echo 'raw \xE9 arg'; "
                     "printf 'no newline'; exit 5"},
                &out),
            5)
      << out.substr(0, 4096);
  auto contents = shoal::ReadFile(binary);
  ASSERT_TRUE(contents.ok());
  const std::string expected = "caf\xE9 ok\n" + std::string("nul\0byte\n", 9) +
                               std::string(1 << 20, 'x') + "\n" + *contents +
                               "raw \xE9 arg\nno newline";
  EXPECT_NE(out.find(expected), std::string::npos)
      << "the followed output lost bytes";
  std::string logs;
  ASSERT_EQ(Job({"logs", "bytes-1"}, &logs), 0);
  EXPECT_NE(logs.find(expected), std::string::npos) << "the logs lost bytes";
  nlohmann::json status = Status("bytes-1");
  EXPECT_EQ(status["status"], "FAILED") << status.dump();
  EXPECT_EQ(status["exit_code"], 5);
  EXPECT_THAT(status["entrypoint"].get<std::string>(), HasSubstr("raw "));
  ASSERT_EQ(RunCli({"list", "jobs", "--format", "json"}, &out, Env()), 0)
      << out;
  EXPECT_THAT(out, HasSubstr("bytes-1"));
}

TEST_F(JobTest, ProgramsItStartsJoinThisCluster) {
  std::string out;
  EXPECT_EQ(Job({"submit", "--env", "GREETING=hello", "--", "sh", "-c",
                 "echo $GREETING; " + Cli() + " status"},
                &out),
            0)
      << out;
  EXPECT_THAT(out, HasSubstr("hello"));
  EXPECT_THAT(out, HasSubstr("job-big"));  // the status of this cluster
}

TEST_F(JobTest, TheEntrypointsResourcesChooseItsNode) {
  std::string out;
  EXPECT_EQ(Job({"submit", "--submission-id", "on-big",
                 "--entrypoint-resources", R"({"big": 1})", "--", "true"},
                &out),
            0)
      << out;
  EXPECT_EQ(Status("on-big")["node_id"], "job-big");
  EXPECT_EQ(Job({"submit", "--entrypoint-num-cpus", "64", "--", "true"}, &out),
            1);
  EXPECT_THAT(out, HasSubstr("no alive node has the entrypoint's resources"));
}

TEST_F(JobTest, TheEntrypointsResourcesAreHeldWhileItRuns) {
  // The node has one "big": the second job waits until the first ends.
  std::string first =
      SubmitNoWait({"--submission-id", "holds-big", "--entrypoint-resources",
                    R"({"big": 1})", "--", "sleep", "3"});
  for (int i = 0; i < 100 && Status(first)["status"] != "RUNNING"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(Status(first)["status"], "RUNNING");
  std::string out;
  // The cluster shows it in use, as a lease would.
  bool used = false;
  for (int i = 0; i < 50 && !used; ++i) {
    ASSERT_EQ(RunCli({"status"}, &out, Env()), 0) << out;
    used = absl::StrContains(out, "1.0/1.0 big");
    if (!used) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(used) << out;
  std::string second =
      SubmitNoWait({"--submission-id", "waits-for-big",
                    "--entrypoint-resources", R"({"big": 1})", "--", "true"});
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  nlohmann::json waiting = Status(second);
  EXPECT_EQ(waiting["status"], "PENDING") << waiting.dump();
  EXPECT_THAT(waiting["message"].get<std::string>(),
              HasSubstr("waiting for the entrypoint's resources"));
  EXPECT_EQ(Job({"logs", "--follow", second}, &out), 0) << out;
  nlohmann::json a = Status(first), b = Status(second);
  EXPECT_EQ(a["status"], "SUCCEEDED");
  EXPECT_EQ(b["status"], "SUCCEEDED");
  EXPECT_EQ(b["node_id"], "job-big");

  // Stopped while it waits, it never starts.
  std::string third =
      SubmitNoWait({"--submission-id", "holds-big-2", "--entrypoint-resources",
                    R"({"big": 1})", "--", "sleep", "3"});
  std::string never =
      SubmitNoWait({"--submission-id", "never-starts", "--entrypoint-resources",
                    R"({"big": 1})", "--", "echo", "ran"});
  EXPECT_EQ(Job({"stop", never}, &out), 0) << out;
  EXPECT_EQ(Status(never)["status"], "STOPPED");
  EXPECT_EQ(Job({"stop", third}, &out), 0) << out;
}

TEST_F(JobTest, LogsFollowTheOutputWhileItRuns) {
  std::string id = SubmitNoWait(
      {"--", "sh", "-c",
       "for i in 1 2 3 4 5 6 7 8; do echo line $i; sleep 0.25; done"});
  int fd = -1;
  pid_t follower = StartCli({"job", "logs", "-f", id}, &fd, Env());
  ASSERT_GT(follower, 0);
  // The first line arrives long before the job ends (2 s).
  std::string first;
  char buf[256];
  auto start = std::chrono::steady_clock::now();
  while (!absl::StrContains(first, "line 1")) {
    ssize_t n = read(fd, buf, sizeof(buf));
    ASSERT_GT(n, 0);
    first.append(buf, n);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(Status(id)["status"], "RUNNING");
  std::string rest;
  EXPECT_EQ(FinishCli(follower, fd, &rest), 0) << rest;
  EXPECT_THAT(first + rest, HasSubstr("line 8"));
  EXPECT_THAT(rest, HasSubstr("SUCCEEDED"));
}

TEST_F(JobTest, StopEndsTheWholeTreeAndItsLaunchGangOnEveryHost) {
  const std::string marker = "611.25";  // sleep 611.25: this test's ranks
  std::string id = SubmitNoWait(
      {"--", "sh", "-c",
       Cli() + " launch --per-host --nproc-per-node 1 -- sleep " + marker});
  // The ranks themselves ("PID: sleep 611.25"), not the shell and the
  // launcher whose command lines name them.
  auto ranks_running = [&] {
    std::vector<std::string> ranks;
    for (const std::string& p : ProcessesMentioning(marker)) {
      if (absl::StrContains(p, ": sleep " + marker)) ranks.push_back(p);
    }
    return ranks;
  };
  std::vector<std::string> ranks;
  for (int i = 0; i < 150 && ranks.size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ranks = ranks_running();
  }
  ASSERT_EQ(ranks.size(), 2u) << "a rank on each host";
  std::string out;
  EXPECT_EQ(Job({"stop", id}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("STOPPED"));
  EXPECT_EQ(Status(id)["status"], "STOPPED");
  std::vector<std::string> left;
  for (int i = 0; i < 150; ++i) {
    left = ProcessesMentioning(marker);
    if (left.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_THAT(left, ::testing::IsEmpty());
  // Stopping it again says so.
  EXPECT_EQ(Job({"stop", id}, &out), 0);
  EXPECT_THAT(out, HasSubstr("already ended"));
}

TEST_F(JobTest, AWorkingDirIsSentAndOneTooBigIsRefused) {
  std::string dir = cluster_->root() + "/working-dir";
  std::filesystem::create_directories(dir + "/sub");
  std::ofstream(dir + "/sub/data.txt") << "forty-two\n";
  std::string out;
  EXPECT_EQ(
      Job({"submit", "--working-dir", dir, "--", "cat", "sub/data.txt"}, &out),
      0)
      << out;
  EXPECT_THAT(out, HasSubstr("forty-two"));

  std::string big = cluster_->root() + "/too-big";
  std::filesystem::create_directories(big);
  {
    std::ofstream blob(big + "/random.bin", std::ios::binary);
    std::mt19937_64 rng(7);
    std::vector<uint64_t> chunk(1 << 17);  // 1 MiB
    for (int i = 0; i < 101; ++i) {
      for (auto& v : chunk) v = rng();
      blob.write(reinterpret_cast<const char*>(chunk.data()),
                 chunk.size() * sizeof(uint64_t));
    }
  }
  EXPECT_EQ(Job({"submit", "--working-dir", big, "--", "true"}, &out), 1);
  EXPECT_THAT(out, HasSubstr("over the 100 MiB limit"));
  EXPECT_EQ(
      Job({"submit", "--working-dir", big + "/nothing", "--", "true"}, &out),
      1);
  EXPECT_THAT(out, HasSubstr("is not a folder"));
}

TEST_F(JobTest, TwentyJobsAtOnce) {
  std::vector<std::string> ids;
  for (int i = 0; i < 20; ++i) {
    ids.push_back(
        SubmitNoWait({"--submission-id", absl::StrCat("many-", i), "--", "sh",
                      "-c", "sleep 0.5; echo I am $SHOAL_JOB_SUBMISSION_ID"}));
  }
  for (const std::string& id : ids) {
    std::string out;
    EXPECT_EQ(Job({"logs", "-f", id}, &out), 0) << out;
    EXPECT_THAT(out, HasSubstr("I am " + id));
  }
  std::string out;
  ASSERT_EQ(Job({"list", "--format", "json"}, &out), 0) << out;
  nlohmann::json list = nlohmann::json::parse(out);
  int succeeded = 0;
  for (const auto& job : list) {
    if (absl::StartsWith(job["submission_id"].get<std::string>(), "many-") &&
        job["status"] == "SUCCEEDED") {
      ++succeeded;
    }
  }
  EXPECT_EQ(succeeded, 20);
  EXPECT_EQ(Job({"list"}, &out), 0);
  EXPECT_THAT(out, HasSubstr("many-19"));
}

TEST_F(JobTest, BadInputGetsAClearError) {
  std::string out;
  EXPECT_EQ(Job({"submit", "--submission-id", "twice", "--", "true"}, &out), 0);
  EXPECT_EQ(Job({"submit", "--submission-id", "twice", "--", "true"}, &out), 1);
  EXPECT_THAT(out, HasSubstr("exists already"));
  EXPECT_EQ(Job({"submit"}, &out), 2);
  EXPECT_THAT(out, HasSubstr("after --"));
  EXPECT_EQ(Job({"submit", "--submission-id", "../escape", "--", "true"}, &out),
            1);
  EXPECT_THAT(out, HasSubstr("is not allowed"));
  EXPECT_EQ(Job({"status", "nobody"}, &out), 1);
  EXPECT_THAT(out, HasSubstr("no job nobody"));
  EXPECT_EQ(Job({"submit", "--env", "NOEQUALS", "--", "true"}, &out), 2);
  EXPECT_THAT(out, HasSubstr("NAME=VALUE"));
  EXPECT_EQ(Job({"logs"}, &out), 2);
}

TEST_F(JobTest, ShoalListShowsTheClustersState) {
  std::string out;
  ASSERT_EQ(RunCli({"list", "nodes"}, &out, Env()), 0) << out;
  EXPECT_THAT(out, HasSubstr("NODE_ID"));
  EXPECT_THAT(out, HasSubstr("job-head"));
  EXPECT_THAT(out, HasSubstr("job-big"));
  ASSERT_EQ(RunCli({"list", "nodes", "--filter", "node_id=job-big", "--format",
                    "json"},
                   &out, Env()),
            0)
      << out;
  nlohmann::json nodes = nlohmann::json::parse(out);
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0]["state"], "ALIVE");
  EXPECT_THAT(nodes[0]["resources"].get<std::string>(), HasSubstr("big:1"));
  EXPECT_EQ(Job({"submit", "--submission-id", "listed", "--", "true"}, &out),
            0);
  ASSERT_EQ(
      RunCli({"list", "jobs", "--filter", "submission_id=listed"}, &out, Env()),
      0);
  EXPECT_THAT(out, HasSubstr("SUCCEEDED"));
  ASSERT_EQ(RunCli({"list", "jobs", "--limit", "1"}, &out, Env()), 0);
  EXPECT_THAT(out, HasSubstr("--limit N shows more"));
  EXPECT_EQ(RunCli({"list", "nodes", "--filter", "colour=red"}, &out, Env()),
            2);
  EXPECT_THAT(out, HasSubstr("have no key \"colour\""));
  EXPECT_EQ(RunCli({"list", "gangs"}, &out, Env()), 0) << out;
  EXPECT_EQ(RunCli({"list", "things"}, &out, Env()), 2);
}

}  // namespace
