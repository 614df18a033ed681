// `shoal launch --num-slices 2` on two simulated TPU v5p-16 slices
// ("slice-0", "slice-1": four node agents on fake TPU hosts): every rank
// gets its own slice's TPU variables, the MEGASCALE_* variables that join
// the slices and ranks numbered across them (docs/launch_contracts.md,
// "Several slices"), and a rank's failure restarts both slices.
#include <sys/stat.h>

#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shoal/api.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class MultiSliceTest : public shoal::testing::FakeTpuSliceTest {
 protected:
  void SetUp() override { StartSlices("v5p-16", 2, 2, 2); }
};

// Hosts are all 127.0.0.1 here: a slice's TPU_WORKER_HOSTNAMES lists its
// own two hosts, never the four of both slices.
constexpr char kSliceHosts[] = "127.0.0.1,127.0.0.1";

TEST_F(MultiSliceTest, PerHostRanksGetTheirSlicesContract) {
  std::string out;
  ASSERT_EQ(Launch({"--per-host", "--num-slices", "2", "--", "/bin/sh", "-c",
                    "echo id=$JAX_PROCESS_ID n=$JAX_NUM_PROCESSES "
                    "w=$TPU_WORKER_ID h=$TPU_WORKER_HOSTNAMES t=$TPU_NAME "
                    "s=$MEGASCALE_SLICE_ID ns=$MEGASCALE_NUM_SLICES "
                    "m=$MEGASCALE_COORDINATOR_ADDRESS:$MEGASCALE_PORT "
                    "g=$SHOAL_GLOBAL_DEVICE_COUNT"},
                   &out),
            0)
      << out;
  for (int rank = 0; rank < 4; ++rank) {
    const int slice = rank / 2;
    EXPECT_THAT(out, HasSubstr(absl::StrCat(
                         "[rank ", rank, " host ", rank, "] id=", rank,
                         " n=4 w=", rank % 2, " h=", kSliceHosts, " t=slice-",
                         slice, " s=", slice, " ns=2 m=127.0.0.1:8081 g=16")))
        << out;
  }
  EXPECT_THAT(out, HasSubstr("all 4 processes exited 0"));
}

TEST_F(MultiSliceTest, PerDeviceRanksSpanTheSlicesAndTaskIdsDoNot) {
  std::string out;
  ASSERT_EQ(Launch({"--per-device", "--num-slices", "2", "--", "/bin/sh", "-c",
                    "echo R=$RANK W=$WORLD_SIZE T=$CLOUD_TPU_TASK_ID "
                    "w=$TPU_WORKER_ID t=$TPU_NAME s=$MEGASCALE_SLICE_ID "
                    "h=$TPU_WORKER_HOSTNAMES"},
                   &out),
            0)
      << out;
  EXPECT_THAT(out, HasSubstr(absl::StrCat("[rank 13 host 3 chip 1] R=13 W=16 "
                                          "T=5 w=1 t=slice-1 s=1 h=",
                                          kSliceHosts)))
      << out;
  EXPECT_THAT(out, HasSubstr("[rank 5 host 1 chip 1] R=5 W=16 T=5 w=1 "
                             "t=slice-0 s=0"))
      << out;
  EXPECT_THAT(out, HasSubstr("all 16 processes exited 0"));
}

TEST_F(MultiSliceTest, ARankFailureRestartsBothSlices) {
  std::string out;
  ASSERT_EQ(Launch({"--per-host", "--num-slices", "2", "--max-restarts", "1",
                    "--", "/bin/sh", "-c",
                    "if [ $JAX_PROCESS_ID = 3 ] && "
                    "[ $SHOAL_RESTART_COUNT = 0 ]; then exit 3; fi; "
                    "echo attempt=$SHOAL_RESTART_COUNT t=$TPU_NAME"},
                   &out),
            0)
      << out;
  EXPECT_THAT(out, HasSubstr("restarting the gang (restart 1 of 1)"));
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_THAT(out, HasSubstr(absl::StrCat("[rank ", rank, " host ", rank,
                                            "] attempt=1 t=slice-", rank / 2)))
        << out;
  }
}

TEST_F(MultiSliceTest, MoreSlicesThanTheClusterHasIsRefusedAtOnce) {
  std::string out;
  EXPECT_EQ(Launch({"--per-host", "--num-slices", "3", "--", "true"}, &out), 1);
  EXPECT_THAT(out, HasSubstr("cannot reserve 3 v5p-16 (2x2x2) slices: the "
                             "cluster has 2 intact"));
  EXPECT_EQ(Launch({"--per-host", "--num-slices", "2", "--slice-type", "v6e-8",
                    "--", "true"},
                   &out),
            1);
  EXPECT_THAT(out, HasSubstr("no TPU slice of type v6e-8 is alive"));
  EXPECT_EQ(Launch({"--per-host", "--num-slices", "2", "--slice", "slice-0",
                    "--", "true"},
                   &out),
            2);
  EXPECT_THAT(out, Not(HasSubstr("exited 0")));
}

// Two launches on 2x2x1 sub-slices (one host each) of one v5p-16 run at
// the same time: each waits until both have started, and each sees its
// sub-slice as a v5p-8 of its own.
TEST_F(MultiSliceTest, TwoSubslicesOfOneSliceRunGangsSideBySide) {
  const std::string marks = roots_ + "/marks";
  ASSERT_EQ(mkdir(marks.c_str(), 0700), 0);
  const std::string command =
      "touch " + marks + "/$$; i=0; while [ $(ls " + marks +
      " | wc -l) -lt 2 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; "
      "echo n=$(ls " +
      marks +
      " | wc -l) type=$TPU_ACCELERATOR_TYPE "
      "w=$TPU_WORKER_ID t=$TPU_NAME h=$TPU_WORKER_HOSTNAMES "
      "d=$SHOAL_DEVICE_ROOT";
  std::vector<std::string> env = {"SHOAL_ADDRESS=" + cluster_->address(),
                                  "SHOAL_TOKEN=" + cluster_->token()};
  int fds[2];
  pid_t pids[2];
  for (int i = 0; i < 2; ++i) {
    pids[i] =
        shoal::testing::StartCli({"launch", "--per-host", "--subslice", "2x2x1",
                                  "--", "/bin/sh", "-c", command},
                                 &fds[i], env);
    ASSERT_GT(pids[i], 0);
  }
  std::set<std::string> hosts;  // each gang's host's device tree
  for (int i = 0; i < 2; ++i) {
    std::string out;
    EXPECT_EQ(shoal::testing::FinishCli(pids[i], fds[i], &out), 0) << out;
    EXPECT_THAT(out, HasSubstr("[rank 0 host 0] n=2 type=v5p-8 w=0 "
                               "t=slice-0 h=127.0.0.1 d="))
        << out;
    size_t d = out.find(" d=");
    if (d != std::string::npos) {
      hosts.insert(out.substr(d, out.find('\n', d) - d));
    }
  }
  EXPECT_EQ(hosts.size(), 2u);
}

TEST_F(MultiSliceTest, ASubsliceThatDoesNotTileSaysWhy) {
  std::string out;
  EXPECT_EQ(Launch({"--per-host", "--subslice", "2x2x4", "--", "true"}, &out),
            1);
  EXPECT_THAT(out, HasSubstr("no intact v5p slice can be cut into a 2x2x4 "
                             "sub-slice"));
  EXPECT_EQ(Launch({"--per-host", "--subslice", "2x2x1", "--num-slices", "2",
                    "--", "true"},
                   &out),
            2);
  EXPECT_THAT(out, HasSubstr("say one of --slice, --num-slices"));
}

// Slices held by one group: a host lost for good fails the group after the
// grace period, naming the bundle's slice and worker and the lost host; the
// rest is given back.
TEST_F(MultiSliceTest, ALostHostFailsTheSlicesNamingIt) {
  cluster_->Connect();
  shoal::tpu::SliceGroup slices = shoal::tpu::ReserveSlices(
      {.topology = "2x2x2", .accelerator_version = "v5p", .num_slices = 2});
  ASSERT_TRUE(slices.Wait(30000));
  EXPECT_EQ(slices.slice_names,
            (std::vector<std::string>{"slice-0", "slice-1"}));
  EXPECT_EQ(slices.Hosts(1), (std::vector<std::string>{"tpu-1-0", "tpu-1-1"}));
  cluster_->KillAgent(3);  // tpu-1-1: worker 1 of slice-1
  // Held until the head finds the host dead; then placed again it cannot
  // be (no other host is that worker), and after the grace period it fails.
  std::string error;
  for (int i = 0; i < 300 && error.empty(); ++i) {
    try {
      slices.Wait(100);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    } catch (const shoal::InfeasibleError& e) {
      error = e.what();
    }
  }
  EXPECT_THAT(error, HasSubstr("bundle 3 lost with node tpu-1-1"));
  EXPECT_THAT(error, HasSubstr("bundle 3's label_selector "
                               "{shoal.io/tpu-slice-name=slice-1, "
                               "shoal.io/tpu-worker-id=1} matches no live "
                               "node"));
  slices.Release();
  shoal::Shutdown();
}

}  // namespace
