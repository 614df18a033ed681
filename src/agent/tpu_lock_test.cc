// ClearTpuLock against real processes holding a real lock file in a
// temporary folder: each holder is a child that opens and locks the file
// and then runs `sleep` with exactly the environment a test gives it, as a
// process using the chips holds libtpu's lock file with the environment its
// worker gave it.
#include "agent/tpu_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/process.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kNode[] = "tpu-node-0";

bool NoneBusy(const std::string&) { return false; }

class TpuLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string dir = ::testing::TempDir() + "/tpu_lock_testXXXXXX";
    ASSERT_NE(mkdtemp(dir.data()), nullptr);
    dir_ = dir;
    lockfile_ = dir_ + "/libtpu_lockfile";
  }

  void TearDown() override {
    // A copy: Reap() takes each one off holders_.
    std::vector<pid_t> left = holders_;
    for (pid_t pid : left) Reap(pid, /*kill_first=*/true);
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }

  // Starts a process that holds the lock file open, and locked unless
  // `lock` is false (as a process that inherited the descriptor, a rank's
  // child, holds it), with `env` as its whole environment; returns its pid
  // once it runs `sleep` (so that its /proc entries show that environment),
  // or -1.
  pid_t Hold(const std::vector<std::string>& env, bool lock = true) {
    // Everything the child needs is made before fork: between fork and exec
    // it may only make async-signal-safe calls.
    std::vector<char*> envp;
    for (const std::string& var : env) {
      envp.push_back(const_cast<char*>(var.c_str()));
    }
    envp.push_back(nullptr);
    const char* sleep_path =
        access("/bin/sleep", X_OK) == 0 ? "/bin/sleep" : "/usr/bin/sleep";
    char arg0[] = "sleep";
    char arg1[] = "600";
    char* argv[] = {arg0, arg1, nullptr};
    const char* path = lockfile_.c_str();
    // Closed by a successful exec: EOF on it says the child runs `sleep`.
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
      close(ready[0]);
      // Without O_CLOEXEC: the descriptor, and its lock, outlive the exec.
      int fd = open(path, O_RDWR | O_CREAT, 0644);
      if (fd >= 0 && (!lock || flock(fd, LOCK_EX | LOCK_NB) == 0)) {
        execve(sleep_path, argv, envp.data());
      }
      char failed = 1;
      ssize_t n = write(ready[1], &failed, 1);
      (void)n;
      _exit(127);
    }
    close(ready[1]);
    char byte;
    ssize_t n;
    do {
      n = read(ready[0], &byte, 1);
    } while (n < 0 && errno == EINTR);
    close(ready[0]);
    if (n != 0) {
      Reap(pid, /*kill_first=*/false);
      return -1;
    }
    holders_.push_back(pid);
    return pid;
  }

  // Reaps `pid`, which ClearTpuLock must have ended with SIGKILL.
  void ExpectEndedBySigkill(pid_t pid) {
    std::optional<int> exit = Reap(pid, /*kill_first=*/false);
    ASSERT_TRUE(exit.has_value()) << "pid " << pid;
    EXPECT_TRUE(WIFSIGNALED(*exit) && WTERMSIG(*exit) == SIGKILL)
        << DescribeWaitStatus(*exit);
  }

  // Waits for `pid` (a holder) and returns its wait status.
  std::optional<int> Reap(pid_t pid, bool kill_first) {
    if (kill_first) kill(pid, SIGKILL);
    int status = 0;
    pid_t got;
    do {
      got = waitpid(pid, &status, 0);
    } while (got < 0 && errno == EINTR);
    std::erase(holders_, pid);
    if (got != pid) return std::nullopt;
    return status;
  }

  std::string dir_;
  std::string lockfile_;
  std::vector<pid_t> holders_;  // not reaped yet
};

TEST_F(TpuLockTest, NoLockFileMeansTheChipsAreFree) {
  EXPECT_TRUE(ClearTpuLock(lockfile_, kNode, NoneBusy).ok());
  EXPECT_FALSE(PathExists(lockfile_));
}

TEST_F(TpuLockTest, LockFileWithoutHolderIsRemoved) {
  std::ofstream(lockfile_) << "";
  ASSERT_TRUE(PathExists(lockfile_));
  absl::Status status = ClearTpuLock(lockfile_, kNode, NoneBusy);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_FALSE(PathExists(lockfile_));
}

TEST_F(TpuLockTest, LockOfAHolderThatExitedIsRemoved) {
  pid_t holder = Hold({});
  ASSERT_GT(holder, 0);
  Reap(holder, /*kill_first=*/true);
  absl::Status status = ClearTpuLock(lockfile_, kNode, NoneBusy);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_FALSE(PathExists(lockfile_));
}

TEST_F(TpuLockTest, HolderShoalDidNotStartFailsTheRequestNamingIt) {
  pid_t holder = Hold({"PATH=/usr/bin:/bin"});
  ASSERT_GT(holder, 0);
  absl::Status status = ClearTpuLock(lockfile_, kNode, NoneBusy);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(status.message(),
              HasSubstr(absl::StrCat("held by pid ", holder, " (sleep 600)")));
  EXPECT_THAT(status.message(), HasSubstr("which Shoal did not start"));
  EXPECT_THAT(status.message(), HasSubstr(lockfile_));
  EXPECT_THAT(status.message(), HasSubstr("Stop that process"));
  EXPECT_THAT(status.message(), HasSubstr(kNode));
  // Neither the stranger nor its lock is touched.
  EXPECT_TRUE(ProcessAlive(holder));
  EXPECT_TRUE(PathExists(lockfile_));
}

TEST_F(TpuLockTest, ProcessOfAnotherNodeIsAStranger) {
  pid_t holder =
      Hold({"SHOAL_NODE_ID=tpu-node-1", "SHOAL_WORKER_ID=gone-worker"});
  ASSERT_GT(holder, 0);
  absl::Status status = ClearTpuLock(lockfile_, kNode, NoneBusy);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(status.message(),
              HasSubstr(absl::StrCat("held by pid ", holder)));
  EXPECT_THAT(status.message(), HasSubstr("which Shoal did not start"));
  EXPECT_TRUE(ProcessAlive(holder));
}

TEST_F(TpuLockTest, LeftoverOfAnEarlierGangIsEndedAndTheLockRemoved) {
  pid_t leftover = Hold(
      {absl::StrCat("SHOAL_NODE_ID=", kNode), "SHOAL_WORKER_ID=gone-worker"});
  ASSERT_GT(leftover, 0);
  auto busy = [](const std::string& id) { return id == "busy-worker"; };
  absl::Status status = ClearTpuLock(lockfile_, kNode, busy);
  EXPECT_TRUE(status.ok()) << status;
  ExpectEndedBySigkill(leftover);
  EXPECT_FALSE(PathExists(lockfile_));
}

TEST_F(TpuLockTest, EveryLeftoverIsEnded) {
  std::vector<pid_t> leftovers = {
      Hold({absl::StrCat("SHOAL_NODE_ID=", kNode), "SHOAL_WORKER_ID=gone-1"}),
      Hold({absl::StrCat("SHOAL_NODE_ID=", kNode), "SHOAL_WORKER_ID=gone-2"},
           /*lock=*/false)};
  for (pid_t pid : leftovers) ASSERT_GT(pid, 0);
  absl::Status status = ClearTpuLock(lockfile_, kNode, NoneBusy);
  EXPECT_TRUE(status.ok()) << status;
  for (pid_t pid : leftovers) ExpectEndedBySigkill(pid);
  EXPECT_FALSE(PathExists(lockfile_));
}

TEST_F(TpuLockTest, ProcessOfABusyWorkerKeepsTheChips) {
  pid_t holder = Hold(
      {absl::StrCat("SHOAL_NODE_ID=", kNode), "SHOAL_WORKER_ID=busy-worker"});
  ASSERT_GT(holder, 0);
  auto busy = [](const std::string& id) { return id == "busy-worker"; };
  absl::Status status = ClearTpuLock(lockfile_, kNode, busy);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(status.message(),
              HasSubstr(absl::StrCat("held by pid ", holder)));
  EXPECT_THAT(status.message(), HasSubstr("worker busy-worker"));
  EXPECT_THAT(status.message(), Not(HasSubstr("did not start")));
  EXPECT_TRUE(ProcessAlive(holder));
  EXPECT_TRUE(PathExists(lockfile_));
}

TEST(LibtpuLockfilePathTest, EnvironmentOverridesTheDefault) {
  const char* old = getenv("SHOAL_LIBTPU_LOCKFILE");
  std::optional<std::string> saved;
  if (old != nullptr) saved = old;
  unsetenv("SHOAL_LIBTPU_LOCKFILE");
  EXPECT_EQ(LibtpuLockfilePath(), "/tmp/libtpu_lockfile");
  setenv("SHOAL_LIBTPU_LOCKFILE", "", 1);
  EXPECT_EQ(LibtpuLockfilePath(), "/tmp/libtpu_lockfile");
  setenv("SHOAL_LIBTPU_LOCKFILE", "/run/node-3/libtpu_lockfile", 1);
  EXPECT_EQ(LibtpuLockfilePath(), "/run/node-3/libtpu_lockfile");
  if (saved.has_value()) {
    setenv("SHOAL_LIBTPU_LOCKFILE", saved->c_str(), 1);
  } else {
    unsetenv("SHOAL_LIBTPU_LOCKFILE");
  }
}

}  // namespace
}  // namespace shoal::agent
