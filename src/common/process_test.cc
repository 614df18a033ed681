#include "common/process.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_split.h"
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

// A child (the title overwrites this test's own command line) titles
// itself; ps's view of it (cmdline and comm) is the title, cut to fit.
TEST(ProcessTitleTest, PsShowsTheTitleCutToTheCommandLinesLength) {
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(out[0]);
    SetProcessTitle("shoal::title-test");
    std::string seen = ReadFile("/proc/self/cmdline").value_or("?") + "|" +
                       ReadFile("/proc/self/comm").value_or("?");
    SetProcessTitle(std::string(100000, 'x'));
    seen += "|" + ReadFile("/proc/self/cmdline").value_or("?");
    ssize_t ignored = write(out[1], seen.data(), seen.size());
    (void)ignored;
    _exit(0);
  }
  close(out[1]);
  std::string seen;
  char buf[4096];
  for (ssize_t n; (n = read(out[0], buf, sizeof buf)) > 0;) seen.append(buf, n);
  close(out[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  std::vector<std::string> parts = absl::StrSplit(seen, '|');
  ASSERT_EQ(parts.size(), 3u) << seen;
  // NULs pad the rest of the command line's memory, as ps shows it.
  for (std::string* cmdline : {&parts[0], &parts[2]}) {
    cmdline->erase(cmdline->find_last_not_of('\0') + 1);
  }
  EXPECT_EQ(parts[0], "shoal::title-test");
  EXPECT_EQ(parts[1], "shoal::title-te\n");
  // A title longer than the command line is cut to it.
  EXPECT_THAT(parts[2], ::testing::MatchesRegex("x+"));
  EXPECT_LT(parts[2].size(), 100000u);
}

}  // namespace
}  // namespace shoal
