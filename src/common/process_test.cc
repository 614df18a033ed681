#include "common/process.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal {
namespace {

using ::testing::HasSubstr;

class SpawnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/shoal-test-spawn-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Runs `script` under /bin/sh with `options`, waits, returns its output.
  std::string Run(SpawnOptions options, const std::string& script) {
    options.argv = {"/bin/sh", "-c", script};
    options.log_path = dir_ + "/out.log";
    absl::StatusOr<pid_t> pid = Spawn(options);
    EXPECT_TRUE(pid.ok()) << pid.status();
    if (!pid.ok()) return "";
    int status = 0;
    waitpid(*pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return ReadFile(options.log_path).value_or("");
  }

  std::string dir_;
};

TEST_F(SpawnTest, TheChildGetsThisEnvironmentWithTheChanges) {
  setenv("SHOAL_SPAWN_TEST_KEPT", "kept", 1);
  setenv("SHOAL_SPAWN_TEST_GONE", "gone", 1);
  SpawnOptions options;
  options.env = {{"SHOAL_SPAWN_TEST_SET", "a b=c"}};
  options.unset_env = {"SHOAL_SPAWN_TEST_GONE"};
  std::string out = Run(options,
                        "echo \"[$SHOAL_SPAWN_TEST_KEPT]\" "
                        "\"[$SHOAL_SPAWN_TEST_GONE]\" "
                        "\"[$SHOAL_SPAWN_TEST_SET]\"");
  EXPECT_EQ(out, "[kept] [] [a b=c]\n");
  unsetenv("SHOAL_SPAWN_TEST_KEPT");
  unsetenv("SHOAL_SPAWN_TEST_GONE");
}

TEST_F(SpawnTest, StandardInputIsEmptyAndTheLogIsTheUsersOnly) {
  std::string out = Run(SpawnOptions{}, "cat; echo done; echo err >&2");
  EXPECT_EQ(out, "done\nerr\n");
  struct stat st;
  ASSERT_EQ(stat((dir_ + "/out.log").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(SpawnTest, ABareNameIsLookedUpOnTheChildsPath) {
  std::string tool = dir_ + "/bin/shoal-spawn-test-tool";
  std::filesystem::create_directories(dir_ + "/bin");
  ASSERT_TRUE(WriteFile(tool, "#!/bin/sh\necho found me\n").ok());
  chmod(tool.c_str(), 0700);
  SpawnOptions options;
  options.argv = {"shoal-spawn-test-tool"};
  options.env = {{"PATH", "/nonexistent:" + dir_ + "/bin"}};
  options.log_path = dir_ + "/out.log";
  absl::StatusOr<pid_t> pid = Spawn(options);
  ASSERT_TRUE(pid.ok()) << pid.status();
  waitpid(*pid, nullptr, 0);
  EXPECT_EQ(ReadFile(options.log_path).value_or(""), "found me\n");
}

TEST_F(SpawnTest, AMissingProgramSaysWhereItWasLookedFor) {
  SpawnOptions options;
  options.argv = {"shoal-no-such-program"};
  options.env = {{"PATH", "/nonexistent-a:/nonexistent-b"}};
  absl::StatusOr<pid_t> pid = Spawn(options);
  ASSERT_FALSE(pid.ok());
  EXPECT_EQ(pid.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(pid.status().message(),
              HasSubstr("no such program on PATH (/nonexistent-a:"));
}

TEST_F(SpawnTest, AProgramThatCannotRunFailsWithExecsReason) {
  std::string file = dir_ + "/not-executable";
  ASSERT_TRUE(WriteFile(file, "plain text").ok());
  SpawnOptions options;
  options.argv = {file};
  absl::StatusOr<pid_t> pid = Spawn(options);
  ASSERT_FALSE(pid.ok());
  EXPECT_EQ(pid.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(pid.status().message(), HasSubstr("Permission denied"));
}

TEST(SpawnArgsTest, NothingToRunIsAnError) {
  EXPECT_EQ(Spawn(SpawnOptions{}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shoal
