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
#include <string>
#include <thread>
#include <vector>

#include "accel/fake_host.h"
#include "common/util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::testing::ClusterSpec;
using ::shoal::testing::NodeSpec;
using ::shoal::testing::RunCli;
using ::shoal::testing::TestCluster;
using ::testing::HasSubstr;

// Processes whose command line contains `marker`.
int CountProcesses(const std::string& marker) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    auto cmdline = shoal::ReadFile(entry.path().string() + "/cmdline");
    if (!cmdline.ok()) continue;
    for (char& c : *cmdline) {
      if (c == '\0') c = ' ';
    }
    if (cmdline->find(marker) != std::string::npos &&
        cmdline->find("gtest") == std::string::npos) {
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

TEST_F(LaunchTest, InterruptStopsEveryProcessOnEveryHost) {
  std::string marker = "shoal-interrupt-marker-" + shoal::RandomHex(4);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(pipe_fds[1], 1);
    dup2(pipe_fds[1], 2);
    close(pipe_fds[0]);
    setenv("SHOAL_ROLE", "cli", 1);
    std::string self = shoal::SelfExecutable();
    std::string address = cluster_->address();
    std::string token = cluster_->token();
    std::string command = "echo up; sleep 60; echo " + marker;
    execl(self.c_str(), self.c_str(), "launch", "--address", address.c_str(),
          "--token", token.c_str(), "--per-device", "--", "/bin/sh", "-c",
          command.c_str(), nullptr);
    _exit(127);
  }
  close(pipe_fds[1]);
  // Wait until all 8 said they are up.
  std::string out;
  char buf[4096];
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  size_t ups = 0;
  while (ups < 8 && std::chrono::steady_clock::now() < deadline) {
    ssize_t n = read(pipe_fds[0], buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, n);
    ups = 0;
    for (size_t at = out.find("] up"); at != std::string::npos;
         at = out.find("] up", at + 1)) {
      ++ups;
    }
  }
  ASSERT_EQ(ups, 8u) << out;
  ASSERT_GT(CountProcesses(marker), 0);
  kill(pid, SIGINT);
  ssize_t n;
  while ((n = read(pipe_fds[0], buf, sizeof(buf))) > 0) out.append(buf, n);
  close(pipe_fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130) << out;
  EXPECT_THAT(out, HasSubstr("interrupted"));
  EXPECT_EQ(CountProcesses(marker), 0) << "processes were left behind";
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
