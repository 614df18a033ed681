// The Slurm tier: a real slurmctld schedules `shoal symmetric-run` on three
// simulated hosts (tests/slurm/slurm_cluster.h), through srun, through the
// sbatch example with both launch modes, and through scancel; after each, no
// process of the run and no /dev/shm segment is left on any host, and the
// job's folder (with its token) is gone.
//
// Needs root, network namespaces and Slurm installed; where one is missing
// every test fails saying which (scripts/test runs the tier only as root).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/slurm/slurm_cluster.h"

namespace shoal::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr int kHosts = 3;

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

class SlurmTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    why_ = SlurmCluster::UnavailableReason();
    if (!why_.empty()) return;
    char pattern[] = "/tmp/shoal-test-slurm-XXXXXX";
    if (mkdtemp(pattern) == nullptr) {
      why_ = "mkdtemp failed";
      return;
    }
    root_ = new std::string(pattern);
    chmod(root_->c_str(), 0755);
    auto cluster = SlurmCluster::Start(kHosts, *root_);
    if (!cluster.ok()) {
      failed_ = new std::string(cluster.status().ToString());
      return;
    }
    cluster_ = cluster->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
    // Kept after a failure, for the daemons' and nodes' logs.
    if (root_ != nullptr && failed_ == nullptr &&
        ::testing::UnitTest::GetInstance()->failed_test_count() == 0) {
      std::error_code ec;
      std::filesystem::remove_all(*root_, ec);
    }
    delete root_;
    root_ = nullptr;
    delete failed_;
    failed_ = nullptr;
  }

  void SetUp() override {
    // Run where it can run: scripts/test runs it only as root with network
    // namespaces, after installing Slurm; elsewhere leave the tier out
    // (ctest -LE slurm). A missing piece is a failure, never a pass.
    ASSERT_TRUE(why_.empty())
        << "the Slurm tier cannot run here: " << why_
        << " (run it as root with slurm-wlm and munge installed, "
           "scripts/setup-deps installs them; or leave it out: ctest -LE "
           "slurm)";
    ASSERT_EQ(failed_, nullptr) << *failed_;
    shm_before_ = ShmEntries();
    // Each test submits from a folder of its own: the job folders go there.
    submit_dir_ = absl::StrCat(
        *root_, "/",
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(MakeDirs(submit_dir_ + "/tmp", 0755).ok());
  }

  // Every host is back to its Slurm daemons, /dev/shm holds what it did
  // before, and no job folder (with its token) is left.
  void ExpectClean() {
    for (int i = 0; i < kHosts; ++i) {
      std::vector<std::string> stray;
      for (int tries = 0; tries < 100; ++tries) {
        stray = cluster_->StrayProcesses(i);
        if (stray.empty()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      EXPECT_THAT(stray, IsEmpty()) << "left on " << cluster_->node_name(i);
    }
    std::vector<std::string> added;
    for (const std::string& name : ShmEntries()) {
      if (!shm_before_.contains(name) && absl::StrContains(name, "shoal")) {
        added.push_back(name);
      }
    }
    EXPECT_THAT(added, IsEmpty()) << "/dev/shm segments left";
    std::error_code ec;
    EXPECT_TRUE(std::filesystem::is_empty(submit_dir_ + "/.shoal", ec) ||
                !std::filesystem::exists(submit_dir_ + "/.shoal"))
        << "a job folder is left in " << submit_dir_ << "/.shoal";
  }

  // What a job's tasks and the programs they run need.
  std::vector<std::string> Env() const {
    return {absl::StrCat("SHOAL_TEMP_DIR=", submit_dir_, "/tmp"),
            absl::StrCat("SHOAL_HOME=", SHOAL_SOURCE_DIR),
            absl::StrCat("SHOAL_BIN_DIR=", SHOAL_BIN_DIR)};
  }

  int Run(const std::string& shell, std::string* out) {
    int rc = cluster_->Run(shell, out, Env(), submit_dir_);
    if (rc != 0 && ::testing::Test::HasFailure()) {
      *out += cluster_->Logs();
    }
    return rc;
  }

  static std::string Shoal() { return absl::StrCat(SHOAL_BIN_DIR, "/shoal"); }

  static inline std::string why_;
  static inline std::string* root_ = nullptr;
  static inline std::string* failed_ = nullptr;
  static inline SlurmCluster* cluster_ = nullptr;
  std::set<std::string> shm_before_;
  std::string submit_dir_;
};

// srun -N3 runs symmetric-run on every node: one cluster of the three
// nodes, each advertising the one CPU and the one GPU the step has there;
// the program runs once, on node 0, and its exit code is srun's.
TEST_F(SlurmTest, SrunSymmetricRunMakesOneClusterAndRunsTheProgramOnce) {
  std::string out;
  const int rc =
      Run(absl::StrCat("srun -N3 --ntasks-per-node=1 -c1 --gres=gpu:1 ",
                       Shoal(), " symmetric-run -- /bin/sh -c '", Shoal(),
                       " status; echo program ran on $(hostname) with GPU "
                       "$CUDA_VISIBLE_DEVICES; exit 7'"),
          &out);
  EXPECT_EQ(rc, 7) << out;
  EXPECT_EQ(Count(out, "program ran on node"), 1) << out;
  EXPECT_THAT(out, HasSubstr("program ran on node1")) << out;
  EXPECT_THAT(out, HasSubstr("3 nodes joined the head at ")) << out;
  // Three nodes, one CPU each: what Slurm gave the step, not the host's 2.
  EXPECT_EQ(Count(out, " ALIVE"), 3) << out;
  EXPECT_THAT(out, HasSubstr(" 0.0/3.0 CPU\n")) << out;
  // --gres=gpu:1: one of each host's two GPUs, the one Slurm chose.
  EXPECT_THAT(out, HasSubstr(" 0.0/3.0 GPU\n")) << out;
  EXPECT_THAT(out, HasSubstr("program ran on node1 with GPU 0\n")) << out;
  ExpectClean();
}

// The sbatch example: a cluster per step over the allocation, the
// data-parallel trainer per device and per host; the job's memory bounds
// what each node advertises.
TEST_F(SlurmTest, TheSbatchExampleRunsBothLaunchModes) {
  std::string out;
  const int rc =
      Run(absl::StrCat("sbatch --wait --output=", submit_dir_, "/job.out ",
                       SHOAL_SOURCE_DIR, "/examples/slurm/train.sbatch"),
          &out);
  auto job = ReadFile(submit_dir_ + "/job.out");
  const std::string log = job.ok() ? *job : "(no job output)";
  EXPECT_EQ(rc, 0) << out << log;
  EXPECT_EQ(Count(log, " ALIVE"), 3) << log;
  // --cpus-per-task=2 and --mem=1500M per node: 30% of it for the object
  // store, the rest for tasks.
  EXPECT_THAT(log, HasSubstr(" 0.0/6.0 CPU\n")) << log;
  EXPECT_THAT(log, HasSubstr("/3.08GiB memory\n")) << log;
  EXPECT_THAT(log, HasSubstr("/1.32GiB object_store_memory\n")) << log;
  EXPECT_THAT(log, HasSubstr("RESULT mode=per-device replicas=6")) << log;
  EXPECT_THAT(log, HasSubstr("RESULT mode=per-host replicas=3")) << log;
  EXPECT_EQ(Count(log, "RESULT mode=per-device"), 1) << log;
  ExpectClean();
}

// scancel sends every task SIGTERM (SIGKILL 10 s later): each node stops
// its program, agent and head, and nothing is left anywhere.
TEST_F(SlurmTest, ScancelStopsEveryNodeAndLeavesNothing) {
  const std::string script = submit_dir_ + "/sleep.sbatch";
  ASSERT_TRUE(
      WriteFile(script,
                absl::StrCat("#!/bin/sh\n#SBATCH --nodes=3\n"
                             "#SBATCH --ntasks-per-node=1\n",
                             "srun ", Shoal(),
                             " symmetric-run --per-host -- /bin/sh -c "
                             "'touch started-$(hostname); exec sleep 600'\n"),
                0755)
          .ok());
  std::string out;
  ASSERT_EQ(Run("sbatch --parsable sleep.sbatch", &out), 0) << out;
  int job = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(out), &job)) << out;
  int started = 0;
  for (int i = 0; i < 600 && started < kHosts; ++i) {
    started = 0;
    for (int h = 0; h < kHosts; ++h) {
      started += PathExists(
          absl::StrCat(submit_dir_, "/started-", cluster_->node_name(h)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(started, kHosts) << cluster_->Logs();
  out.clear();
  ASSERT_EQ(Run(absl::StrCat("scancel ", job), &out), 0) << out;
  bool gone = false;
  for (int i = 0; i < 300 && !gone; ++i) {
    out.clear();
    Run(absl::StrCat("squeue -h -j ", job), &out);
    gone = absl::StripAsciiWhitespace(out).empty() ||
           absl::StrContains(out, "Invalid job id");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(gone) << out;
  // Every task ended on SIGTERM (143), within KillWait: none was killed.
  auto log = ReadFile(absl::StrCat(submit_dir_, "/slurm-", job, ".out"));
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_THAT(*log, Not(HasSubstr("Killed"))) << *log;
  ExpectClean();
}

}  // namespace
}  // namespace shoal::testing
