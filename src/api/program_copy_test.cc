#include "api/program_copy.h"

#include <sys/stat.h>
#include <unistd.h>

#include <iostream>

#include "common/files.h"
#include "common/net.h"
#include "gtest/gtest.h"

namespace shoal::internal {
namespace {

proto::ClusterStatus Nodes(
    std::initializer_list<std::pair<std::string, bool>> host_ids) {
  proto::ClusterStatus status;
  for (const auto& [host_id, alive] : host_ids) {
    proto::NodeInfo* node = status.add_nodes();
    node->set_host_id(host_id);
    node->set_alive(alive);
  }
  return status;
}

TEST(ProgramCopyTest, SentOnlyWhenANodeIsOnAnotherHost) {
  EXPECT_FALSE(NodesElsewhere(Nodes({}), "h1"));
  EXPECT_FALSE(NodesElsewhere(Nodes({{"h1", true}, {"h1", true}}), "h1"));
  EXPECT_TRUE(NodesElsewhere(Nodes({{"h1", true}, {"h2", true}}), "h1"));
  // A dead node needs nothing; one that does not say its host might.
  EXPECT_FALSE(NodesElsewhere(Nodes({{"h1", true}, {"h2", false}}), "h1"));
  EXPECT_TRUE(NodesElsewhere(Nodes({{"h1", true}, {"", true}}), "h1"));
  // Where this process is cannot be told: send it.
  EXPECT_TRUE(NodesElsewhere(Nodes({{"h1", true}}), ""));
}

TEST(ProgramCopyTest, ARemovedOrReplacedProgramIsNotAtItsPath) {
  EXPECT_TRUE(RunsTheFileAt(SelfExecutable()));
  EXPECT_FALSE(RunsTheFileAt("/bin/sh"));
  EXPECT_FALSE(RunsTheFileAt("/no/such/file"));
}

TEST(ProgramCopyTest, ThisHostHasAnId) {
  EXPECT_FALSE(HostId().empty());
  EXPECT_EQ(HostId(), HostId());
}

TEST(ProgramCopyTest, TheStrippedCopyIsSmallerAndStillRuns) {
  // As the driver names its own program: objcopy reads it by this pid.
  const std::string self = "/proc/" + std::to_string(getpid()) + "/exe";
  absl::StatusOr<std::string> stripped = StripDebugInfo(self);
  ASSERT_TRUE(stripped.ok()) << stripped.status();
  struct stat a, b;
  ASSERT_EQ(stat(self.c_str(), &a), 0);
  ASSERT_EQ(stat(stripped->c_str(), &b), 0);
  // A RelWithDebInfo binary is mostly debug info; a sanitizer build's
  // instrumented code is larger, its debug info less than half.
  EXPECT_LT(b.st_size, a.st_size);
  std::cout << "stripped " << a.st_size << " bytes to " << b.st_size << "\n";
  // The same bytes each time: the head keeps one copy of a program.
  absl::StatusOr<std::string> again = StripDebugInfo(self);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*Sha256File(*stripped), *Sha256File(*again));
  chmod(stripped->c_str(), 0755);
  std::string command = *stripped + " --gtest_list_tests > /dev/null";
  EXPECT_EQ(system(command.c_str()), 0);
  unlink(stripped->c_str());
  unlink(again->c_str());
}

TEST(ProgramCopyTest, StrippingWhatIsNotAProgramFails) {
  EXPECT_FALSE(StripDebugInfo("/etc/hostname").ok());
  EXPECT_FALSE(StripDebugInfo("/no/such/file").ok());
}

}  // namespace
}  // namespace shoal::internal
