// What leases and actor specs name as the workers' program.
#include "api/worker_program.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "api/task_error.h"
#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::internal {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string WriteTemp(const std::string& bytes) {
  char path[] = "/tmp/shoal-worker-program-XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << bytes;
  return path;
}

TEST(WorkerProgramTest, ThisProgramIsNamedByItsFileAndContent) {
  std::string file = WriteTemp("program bytes");
  auto program =
      IdentifyWorkerProgram(true, WorkerCommand(), "", "/bin/prog", file);
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_EQ(program->binary_path, "/bin/prog");
  EXPECT_EQ(program->binary_hash, Sha256Hex("program bytes"));
  EXPECT_TRUE(program->cpp_binary_path.empty());
  remove(file.c_str());
}

TEST(WorkerProgramTest, ACommandIsNamedByAHashOfItsArgumentsAndEnvironment) {
  WorkerCommand python{{"python3", "-m", "shoal.worker"}, {{"A", "1"}}};
  auto a = IdentifyWorkerProgram(false, python, "", "/unused", "/unused");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->binary_path.empty());
  EXPECT_THAT(a->binary_hash, StartsWith("command-"));
  // Argument boundaries count: "ab" "c" is not "a" "bc".
  auto b = IdentifyWorkerProgram(false, {{"ab", "c"}, {}}, "", "", "");
  auto c = IdentifyWorkerProgram(false, {{"a", "bc"}, {}}, "", "", "");
  ASSERT_TRUE(b.ok() && c.ok());
  EXPECT_NE(b->binary_hash, c->binary_hash);
  WorkerCommand other_env = python;
  other_env.env["A"] = "2";
  auto d = IdentifyWorkerProgram(false, other_env, "", "", "");
  ASSERT_TRUE(d.ok());
  EXPECT_NE(a->binary_hash, d->binary_hash);
}

TEST(WorkerProgramTest, NoProgramAndNoCommandNamesNothing) {
  auto program = IdentifyWorkerProgram(false, WorkerCommand(), "", "", "");
  ASSERT_TRUE(program.ok());
  EXPECT_TRUE(program->binary_path.empty());
  EXPECT_TRUE(program->binary_hash.empty());
}

TEST(WorkerProgramTest, AnUnreadableProgramFails) {
  auto program = IdentifyWorkerProgram(true, WorkerCommand(), "", "/x",
                                       "/nonexistent/shoal-program");
  EXPECT_FALSE(program.ok());
}

TEST(WorkerProgramTest, TheCppProgramIsMadeAbsoluteAndHashedOrNamed) {
  auto program =
      IdentifyWorkerProgram(false, WorkerCommand(), "rel/prog", "", "");
  ASSERT_TRUE(program.ok());
  EXPECT_EQ(program->cpp_binary_path[0], '/');
  EXPECT_THAT(program->cpp_binary_path, HasSubstr("rel/prog"));
  std::string file = WriteTemp("cpp");
  auto hash = CppProgramHash(file);
  ASSERT_TRUE(hash.ok());
  EXPECT_EQ(*hash, Sha256Hex("cpp"));
  remove(file.c_str());
  auto missing = CppProgramHash("/nonexistent/cpp-prog");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(
      missing.status().message(),
      HasSubstr("the C++ program /nonexistent/cpp-prog cannot be read"));
}

}  // namespace
}  // namespace shoal::internal
