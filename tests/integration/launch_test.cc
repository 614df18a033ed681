// `shoal launch` on a simulated TPU v5p-16 slice (two node agents on fake TPU
// hosts): the per-device and per-host environments, rank-prefixed output,
// torchrun's failure rules (the first failure stops the gang, restarts,
// exit codes that must not restart), Ctrl-C, and nothing left behind.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "accel/fake_host.h"
#include "common/files.h"
#include "common/random.h"
#include "common/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shoal/api.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::testing::ClusterSpec;
using ::shoal::testing::FinishCli;
using ::shoal::testing::NodeSpec;
using ::shoal::testing::RunCli;
using ::shoal::testing::StartCli;
using ::shoal::testing::TestCluster;
using ::testing::HasSubstr;
using ::testing::Not;

// Processes whose command line contains `marker`, but for the test and the
// launcher (whose own arguments hold it).
int CountProcesses(const std::string& marker) {
  int count = 0;
  for (const std::string& p : shoal::testing::ProcessesMentioning(marker)) {
    if (p.find("gtest") == std::string::npos &&
        p.find(" launch ") == std::string::npos) {
      ++count;
    }
  }
  return count;
}

class LaunchTest : public shoal::testing::FakeTpuSliceTest {
 protected:
  void SetUp() override { StartSlice("v5p-16", 2, 4); }
};

TEST_F(LaunchTest, PerDeviceRunsOneProcessPerChipWithTheXlaContract) {
  std::string out;
  ASSERT_EQ(Launch({"--per-device", "--", "/bin/sh", "-c",
                    "echo R=$RANK L=$LOCAL_RANK W=$WORLD_SIZE "
                    "C=$TPU_VISIBLE_CHIPS B=$TPU_PROCESS_BOUNDS "
                    "T=$CLOUD_TPU_TASK_ID P=$TPU_PROCESS_PORT D=$PJRT_DEVICE"},
                   &out),
            0)
      << out;
  EXPECT_THAT(out, HasSubstr("[rank 6 host 1 chip 2] R=6 L=2 W=8 C=2 B=2,2,2 "
                             "T=6 P=8478 D=TPU"));
  EXPECT_THAT(out, HasSubstr("[rank 0 host 0 chip 0] R=0 L=0 W=8 C=0"));
  EXPECT_THAT(out, HasSubstr("all 8 processes exited 0"));
}

TEST_F(LaunchTest, PerHostRunsOneProcessPerHostWithTheJaxContract) {
  std::string out;
  ASSERT_EQ(Launch({"--per-host", "--", "/bin/sh", "-c",
                    "echo id=$SHOAL_PROCESS_ID n=$SHOAL_NUM_PROCESSES "
                    "g=$SHOAL_GLOBAL_DEVICE_COUNT l=$SHOAL_LOCAL_DEVICE_COUNT "
                    "c=$JAX_COORDINATOR_ADDRESS w=$TPU_WORKER_ID"},
                   &out),
            0)
      << out;
  EXPECT_THAT(out, HasSubstr("[rank 0 host 0] id=0 n=2 g=8 l=4 "
                             "c=127.0.0.1:"));
  EXPECT_THAT(out, HasSubstr("[rank 1 host 1] id=1 n=2 g=8 l=4 "
                             "c=127.0.0.1:"));
  // Both found the same coordinator: process 0's host and the free port it
  // published in the head's key-value store.
  auto coordinator = [&](const std::string& line_start) {
    size_t at = out.find(line_start);
    size_t c = out.find("c=", at);
    return out.substr(c, out.find(' ', c) - c);
  };
  EXPECT_EQ(coordinator("[rank 0"), coordinator("[rank 1"));
  EXPECT_NE(coordinator("[rank 0"), "c=127.0.0.1:0");
}

TEST_F(LaunchTest, ProgramsAreFoundOnPathLikeAShellWould) {
  std::string out;
  ASSERT_EQ(
      Launch({"--per-device", "--", "sh", "-c", "echo found $RANK"}, &out), 0)
      << out;
  EXPECT_THAT(out, HasSubstr("found 7")) << out;
  EXPECT_NE(Launch({"--per-device", "--", "no-such-program-xyz"}, &out), 0);
  EXPECT_THAT(out, HasSubstr("no-such-program-xyz: no such program on PATH"));
}

// What a rank printed, from the launcher's output: the lines after its
// prefix, joined as it printed them.
std::string OutputOfRank(const std::string& out, const std::string& prefix) {
  std::string printed;
  size_t at = 0;
  while (at < out.size()) {
    size_t end = out.find('\n', at);
    if (end == std::string::npos) end = out.size();
    std::string_view line(out.data() + at, end - at);
    if (line.substr(0, prefix.size() + 1) == prefix + " ") {
      printed.append(line.substr(prefix.size() + 1));
      printed += '\n';
    }
    at = end + 1;
  }
  return printed;
}

// Programs print bytes, not text: Latin-1, NUL bytes, a 1 MiB line with no
// newline, a binary file, output without a final newline. All of it reaches
// the terminal as printed, the gang runs to its end and the exit code is
// the failing rank's.
TEST_F(LaunchTest, AnyBytesTheRanksPrintReachTheTerminalAsPrinted) {
  const std::string done = cluster_->root() + "/rank0-done";
  const std::string binary = "/bin/true";
  std::string out;
  int rc =
      Launch({"--per-host", "--", "/bin/sh", "-c",
              "if [ \"$SHOAL_PROCESS_ID\" = 1 ]; then "
              "  while [ ! -e " +
                  done +
                  " ]; do sleep 0.1; done; "
                  "  printf 'rank one \\351 exits 3'; exit 3; "
                  "fi; "
                  "printf 'caf\\351 ok\\n'; printf 'nul\\000byte\\n'; "
                  "head -c 1048576 /dev/zero | tr '\\000' x; printf '\\n'; "
                  "cat " +
                  binary + "; printf '\\nafter\\n'; touch " + done},
             &out);
  EXPECT_EQ(rc, 3) << out.substr(0, 4096);
  auto contents = shoal::ReadFile(binary);
  ASSERT_TRUE(contents.ok());
  const std::string expected = "caf\xE9 ok\n" + std::string("nul\0byte\n", 9) +
                               std::string(1 << 20, 'x') + "\n" + *contents +
                               "\nafter\n";
  std::string printed = OutputOfRank(out, "[rank 0 host 0]");
  EXPECT_EQ(printed.size(), expected.size());
  EXPECT_TRUE(printed == expected) << "rank 0's bytes differ";
  EXPECT_THAT(out, HasSubstr("[rank 1 host 1] rank one \xE9 exits 3\n"));
  EXPECT_THAT(out, HasSubstr("rank 1 failed first: exited with code 3"));
  // Nothing logged an error per line on the way.
  EXPECT_THAT(out, Not(HasSubstr("UTF-8")));
}

TEST_F(LaunchTest, FirstFailureStopsTheWholeGangAndNamesTheRank) {
  std::string marker = "shoal-gang-marker-" + shoal::RandomHex(4);
  std::string out;
  auto start = std::chrono::steady_clock::now();
  int rc = Launch({"--per-device", "--", "/bin/sh", "-c",
                   "if [ $RANK = 5 ]; then echo bye; exit 3; fi; sleep 60; "
                   "echo " +
                       marker},
                  &out);
  double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_EQ(rc, 3) << out;
  EXPECT_THAT(out, HasSubstr("[rank 5 host 1 chip 1] bye"));
  EXPECT_THAT(out, HasSubstr("rank 5 failed first: exited with code 3"));
  EXPECT_LT(took, 20);  // the others were stopped, not waited for
  EXPECT_EQ(CountProcesses(marker), 0) << "processes were left behind";
}

TEST_F(LaunchTest, TheGangRestartsAsAWholeUnlessTheCodeSaysNot) {
  std::string out;
  // Rank 2 fails on the first attempt only.
  EXPECT_EQ(
      Launch({"--per-device", "--max-restarts", "2", "--", "/bin/sh", "-c",
              "if [ $RANK = 2 ] && [ $SHOAL_RESTART_COUNT = 0 ]; then "
              "exit 1; fi; echo attempt=$SHOAL_RESTART_COUNT"},
             &out),
      0)
      << out;
  EXPECT_THAT(out, HasSubstr("restarting the gang (restart 1 of 2)"));
  EXPECT_THAT(out, HasSubstr("[rank 7 host 1 chip 3] attempt=1"));
  EXPECT_THAT(out, HasSubstr("all 8 processes exited 0"));

  EXPECT_EQ(Launch({"--per-device", "--max-restarts", "3", "--no-restart-on",
                    "2,4", "--", "/bin/sh", "-c", "exit 4"},
                   &out),
            4);
  EXPECT_THAT(out, Not(HasSubstr("restarting")));
  EXPECT_THAT(out, HasSubstr("exit code 4 is in --no-restart-on"));
}

// A launch typed as the README types it: no --address, no --token, nothing
// exported but the temp dir the cluster was started from.
TEST_F(LaunchTest, FindsTheClusterOfItsTempDirAndItsTokenWithNothingExported) {
  unsetenv("SHOAL_ADDRESS");
  unsetenv("SHOAL_TOKEN");
  size_t sessions = shoal::ListSessionDirs(cluster_->temp_dir(0)).size();
  std::string out;
  ASSERT_EQ(RunCli({"launch", "--per-device", "--", "sh", "-c",
                    "echo hi $RANK; sleep 0.5; echo bye $RANK"},
                   &out, {"SHOAL_TEMP_DIR=" + cluster_->temp_dir(0)}),
            0)
      << out;
  EXPECT_THAT(out, HasSubstr("[rank 7 host 1 chip 3] hi 7"));
  EXPECT_THAT(out, HasSubstr("[rank 7 host 1 chip 3] bye 7"));
  EXPECT_THAT(out, HasSubstr("[rank 0 host 0 chip 0] bye 0"));
  EXPECT_THAT(out, HasSubstr("all 8 processes exited 0"));
  EXPECT_THAT(out, Not(HasSubstr("refused")));
  // It used the cluster there, and started none of its own.
  EXPECT_EQ(shoal::ListSessionDirs(cluster_->temp_dir(0)).size(), sessions);
}

TEST_F(LaunchTest, WithNoClusterToFindItStartsNoneAndSaysHow) {
  unsetenv("SHOAL_ADDRESS");
  unsetenv("SHOAL_TOKEN");
  std::string empty = cluster_->root() + "/empty-temp-dir";
  std::filesystem::create_directories(empty);
  std::string out;
  EXPECT_EQ(RunCli({"launch", "--per-device", "--", "true"}, &out,
                   {"SHOAL_TEMP_DIR=" + empty}),
            1)
      << out;
  EXPECT_THAT(out, HasSubstr("shoal start --head"));
  EXPECT_TRUE(shoal::ListSessionDirs(empty).empty());
}

TEST_F(LaunchTest, AGangThatCannotBeLaunchedAsAskedSaysWhyAtOnce) {
  std::string out;
  EXPECT_EQ(Launch({"--per-device", "--nodes", "5", "--", "true"}, &out), 1);
  EXPECT_THAT(out, HasSubstr("asked for 5 nodes; the cluster has 2"));
  EXPECT_EQ(Launch({"--per-device", "--local", "--", "true"}, &out), 2);
  EXPECT_THAT(out, HasSubstr("leave out --local and --nodes"));
  EXPECT_EQ(
      Launch({"--per-device", "--nproc-per-node", "2", "--", "true"}, &out), 2);
  EXPECT_THAT(out, HasSubstr("drop --nproc-per-node"));
  // Nothing stays reserved: a whole-slice launch runs at once.
  EXPECT_EQ(Launch({"--per-host", "--", "true"}, &out), 0) << out;
}

// A gang of 8 processes that say "up" and sleep; `marker` is in their
// command lines. Returns the launcher's pid once all 8 are up (output so far
// in *out, the rest on *fd).
pid_t StartSleepingGang(const TestCluster& cluster, const std::string& marker,
                        int* fd, std::string* out) {
  pid_t pid = StartCli({"launch", "--address", cluster.address(), "--token",
                        cluster.token(), "--per-device", "--", "/bin/sh", "-c",
                        "echo up; sleep 30; echo " + marker},
                       fd);
  if (pid < 0) return pid;
  char buf[4096];
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  auto ups = [&] {
    size_t n = 0;
    for (size_t at = out->find("] up"); at != std::string::npos;
         at = out->find("] up", at + 1)) {
      ++n;
    }
    return n;
  };
  while (ups() < 8 && std::chrono::steady_clock::now() < deadline) {
    ssize_t n = read(*fd, buf, sizeof(buf));
    if (n <= 0) break;
    out->append(buf, n);
  }
  return pid;
}

std::string LastLine(const std::string& out) {
  std::string s = out;
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s.substr(s.rfind('\n') + 1);
}

// Waits up to `seconds` for the processes running `marker` to be gone.
bool GoneWithin(const std::string& marker, int seconds) {
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (CountProcesses(marker) > 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return CountProcesses(marker) == 0;
}

TEST_F(LaunchTest, InterruptStopsEveryProcessOnEveryHost) {
  std::string marker = "shoal-interrupt-marker-" + shoal::RandomHex(4);
  int fd = -1;
  std::string out;
  pid_t pid = StartSleepingGang(*cluster_, marker, &fd, &out);
  ASSERT_GT(pid, 0);
  ASSERT_GT(CountProcesses(marker), 0) << out;
  kill(pid, SIGINT);
  EXPECT_EQ(FinishCli(pid, fd, &out), 130) << out;
  EXPECT_THAT(out, HasSubstr("interrupted"));
  EXPECT_EQ(CountProcesses(marker), 0) << "processes were left behind";
}

// Groups in `shoal status --format json`, as "id:STATE" strings.
std::vector<std::string> Groups(const TestCluster& cluster) {
  std::string out;
  RunCli({"status", "--address", cluster.address(), "--token", cluster.token(),
          "--format", "json"},
         &out);
  std::vector<std::string> groups;
  auto j = nlohmann::json::parse(out, nullptr, false);
  if (!j.is_object()) return {"<no status: " + out + ">"};
  for (const auto& g : j["placement_groups"]) {
    groups.push_back(g["id"].get<std::string>() + ":" +
                     g["state"].get<std::string>());
  }
  return groups;
}

// Ctrl-C while the gang waits for its hosts ends the launch at once and
// leaves no reservation behind.
TEST_F(LaunchTest, InterruptWhileWaitingForTheSliceReleasesEverything) {
  cluster_->Connect();
  shoal::SliceReservation held = shoal::ReserveTpuSlice("", 30000);
  int fd = -1;
  pid_t pid = StartCli({"launch", "--address", cluster_->address(), "--token",
                        cluster_->token(), "--per-device", "--", "true"},
                       &fd);
  ASSERT_GT(pid, 0);
  // The launch's group waits behind ours.
  bool waiting = false;
  for (int i = 0; i < 100 && !waiting; ++i) {
    waiting = Groups(*cluster_).size() == 2;
    if (!waiting) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(waiting) << ::testing::PrintToString(Groups(*cluster_));
  auto start = std::chrono::steady_clock::now();
  kill(pid, SIGINT);
  std::string out;
  EXPECT_EQ(FinishCli(pid, fd, &out), 130) << out;
  EXPECT_LT(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count(),
      2)
      << out;
  EXPECT_THAT(out, HasSubstr("interrupted while reserving"));
  std::vector<std::string> left;
  for (int i = 0; i < 40; ++i) {
    left = Groups(*cluster_);
    if (left.size() == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(left, std::vector<std::string>{held.group.id() + ":CREATED"});
  shoal::RemovePlacementGroup(held.group);
  shoal::Shutdown();
}

// A launch that cannot get its hosts says who holds them.
TEST_F(LaunchTest, ABusyGangSaysWhoHoldsItsHosts) {
  cluster_->Connect();
  shoal::SliceReservation held = shoal::ReserveTpuSlice("", 30000);
  std::string out;
  EXPECT_EQ(
      Launch({"--per-device", "--reserve-timeout", "1", "--", "true"}, &out),
      1);
  EXPECT_THAT(out, HasSubstr("was not free within 1000 ms"));
  EXPECT_THAT(out, HasSubstr("held by: placement group " + held.group.id()));
  EXPECT_THAT(out, HasSubstr(" of job"));
  shoal::RemovePlacementGroup(held.group);
  shoal::Shutdown();
}

// The report channel breaks (the launcher stops answering): every runner
// stops its processes and the launch fails naming the host, never "exited 0".
TEST_F(LaunchTest, RunnersThatLoseTheirLauncherFailTheLaunch) {
  std::string marker = "shoal-lost-marker-" + shoal::RandomHex(4);
  int fd = -1;
  std::string out;
  pid_t pid = StartSleepingGang(*cluster_, marker, &fd, &out);
  ASSERT_GT(pid, 0);
  ASSERT_GT(CountProcesses(marker), 0) << out;
  kill(pid, SIGSTOP);
  // Runners give up on a launcher that has not answered for 10 s.
  EXPECT_TRUE(GoneWithin(marker, 25)) << "the runners kept their processes";
  kill(pid, SIGCONT);
  int rc = FinishCli(pid, fd, &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_THAT(out, Not(HasSubstr("exited 0")));
  EXPECT_THAT(LastLine(out), HasSubstr("lost its launcher")) << out;
  EXPECT_THAT(LastLine(out), HasSubstr("host ")) << out;
}

// The pid of the runner (a worker) of the processes running `marker`.
pid_t RunnerOf(const std::string& marker) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    auto cmdline = shoal::ReadFile(entry.path().string() + "/cmdline");
    if (!cmdline.ok() || cmdline->find(marker) == std::string::npos ||
        cmdline->rfind("/bin/sh", 0) != 0) {
      continue;
    }
    auto status = shoal::ReadFile(entry.path().string() + "/status");
    if (!status.ok()) continue;
    size_t at = status->find("PPid:");
    if (at == std::string::npos) continue;
    return static_cast<pid_t>(std::atoi(status->c_str() + at + 5));
  }
  return 0;
}

TEST_F(LaunchTest, AKilledRunnerFailsTheLaunchNamingItsHost) {
  std::string marker = "shoal-runner-marker-" + shoal::RandomHex(4);
  int fd = -1;
  std::string out;
  pid_t pid = StartSleepingGang(*cluster_, marker, &fd, &out);
  ASSERT_GT(pid, 0);
  pid_t runner = RunnerOf(marker);
  ASSERT_GT(runner, 1) << out;
  ASSERT_EQ(kill(runner, SIGKILL), 0);
  auto start = std::chrono::steady_clock::now();
  int rc = FinishCli(pid, fd, &out);
  double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_NE(rc, 0) << out;
  EXPECT_LT(took, 20) << out;
  EXPECT_THAT(out, Not(HasSubstr("exited 0")));
  EXPECT_THAT(LastLine(out), HasSubstr("the runner on host")) << out;
  EXPECT_THAT(LastLine(out), HasSubstr("signal 9")) << out;
  // Its processes, and what they started, went with it.
  EXPECT_TRUE(GoneWithin(marker, 10)) << "processes were left behind";
}

}  // namespace

namespace {

// A real client: torch.distributed (Debian's python3-torch, Gloo) under
// `shoal launch`, on two CPU hosts with two processes each.
class TorchLaunchTest : public shoal::testing::TwoCpuHostsTest {
 protected:
  std::string script_ =
      std::string(SHOAL_SOURCE_DIR) + "/tests/integration/torch_allreduce.py";
};

TEST_F(TorchLaunchTest, PerDeviceAllReduceOfRanksIsSix) {
  std::string out;
  ASSERT_EQ(Launch({"--per-device", "--nodes", "2", "--nproc-per-node", "2",
                    "--", "/usr/bin/python3", script_, "per-device"},
                   &out),
            0)
      << out;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_THAT(out, HasSubstr("rank " + std::to_string(rank) + " of 4 sum 6"))
        << out;
  }
}

TEST_F(TorchLaunchTest, PerHostProgramReadsTheHostCentricVariables) {
  std::string out;
  ASSERT_EQ(Launch({"--per-host", "--nodes", "2", "--", "/usr/bin/python3",
                    script_, "per-host"},
                   &out),
            0)
      << out;
  EXPECT_THAT(out, HasSubstr("rank 0 of 2 sum 1"));
  EXPECT_THAT(out, HasSubstr("rank 1 of 2 sum 1"));
}

}  // namespace
