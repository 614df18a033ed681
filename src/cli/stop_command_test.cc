#include "cli/stop_command.h"

#include <signal.h>

#include <filesystem>
#include <string>

#include "cli/cli_fakes.h"
#include "cli/session_files.h"
#include "common/files.h"
#include "common/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::cli::testing {
namespace {

using ::testing::HasSubstr;

class StopTest : public CliTest {
 protected:
  // A session folder of the test's temp dir, made as `shoal start` makes
  // them.
  std::string Session() {
    auto made = CreateSessionDir(TempDir());
    EXPECT_TRUE(made.ok()) << made.status();
    return made.ok() ? *made : "";
  }
  std::string TempDir() const { return dir_ + "/t"; }
  Shoal shoal_;
};

TEST_F(StopTest, StopsTheAgentThenTheHeadOfEverySession) {
  const std::string one = Session();
  const std::string two = Session();
  shoal_.host.SetLive(one, "head", 10);
  shoal_.host.SetLive(one, "agent", 11);
  shoal_.host.SetLive(two, "agent", 21);
  Ran ran = shoal_.Run({"stop", "--temp-dir", TempDir()});
  EXPECT_EQ(ran.code, 0);
  ASSERT_EQ(shoal_.host.signals.size(), 3u);
  // Newest session first; in each, the agent before the head.
  EXPECT_EQ(shoal_.host.signals[0].pid, 21);
  EXPECT_EQ(shoal_.host.signals[1].pid, 11);
  EXPECT_EQ(shoal_.host.signals[2].pid, 10);
  for (const auto& s : shoal_.host.signals) EXPECT_EQ(s.signal, SIGTERM);
  EXPECT_THAT(ran.out,
              HasSubstr("Stopped node agent (pid 11, session " + one +
                        ")\nStopped head (pid 10, session " + one + ")\n"));
  EXPECT_EQ(shoal_.host.arena_sweeps, 1);
}

TEST_F(StopTest, ForceKillsAtOnce) {
  const std::string s = Session();
  shoal_.host.SetLive(s, "head", 10);
  Ran ran = shoal_.Run({"stop", "--temp-dir", TempDir(), "--force"});
  EXPECT_EQ(ran.code, 0);
  ASSERT_EQ(shoal_.host.signals.size(), 1u);
  EXPECT_EQ(shoal_.host.signals[0].signal, SIGKILL);
  EXPECT_THAT(ran.out, HasSubstr("Killed head (pid 10"));
}

TEST_F(StopTest, AProcessThatDoesNotEndIsKilled) {
  const std::string s = Session();
  shoal_.host.SetLive(s, "agent", 11);
  shoal_.host.stubborn.insert(11);
  EXPECT_EQ(shoal_.Run({"stop", "--temp-dir", TempDir()}).code, 0);
  ASSERT_EQ(shoal_.host.signals.size(), 2u);
  EXPECT_EQ(shoal_.host.signals[0].signal, SIGTERM);
  EXPECT_EQ(shoal_.host.signals[1].signal, SIGKILL);
  // 5 s of polls before the SIGKILL.
  EXPECT_EQ(shoal_.host.slept_ms, 5010);
  EXPECT_FALSE(shoal_.host.Alive(11));
}

TEST_F(StopTest, MarksASessionWithStateAsStopped) {
  const std::string with_state = Session();
  const std::string without = Session();
  WriteFile(with_state + "/head.db", "").IgnoreError();
  shoal_.host.SetLive(with_state, "head", 10);
  EXPECT_EQ(shoal_.Run({"stop", "--temp-dir", TempDir()}).code, 0);
  EXPECT_TRUE(std::filesystem::exists(with_state + "/" + kStoppedMarker));
  EXPECT_FALSE(std::filesystem::exists(without + "/" + kStoppedMarker));
}

TEST_F(StopTest, SaysWhenNothingRuns) {
  Session();
  Ran ran = shoal_.Run({"stop", "--temp-dir", TempDir()});
  EXPECT_EQ(ran.code, 0);
  EXPECT_EQ(ran.out, "No Shoal processes are running from " + TempDir() +
                         "; nothing to stop.\n");
  EXPECT_TRUE(shoal_.host.signals.empty());
}

TEST_F(StopTest, RefusesAProgram) {
  Ran ran = shoal_.Run({"stop", "--", "echo"});
  EXPECT_EQ(ran.code, 2);
  EXPECT_EQ(ran.err,
            "shoal: a command after -- is for shoal launch, shoal job "
            "submit and shoal symmetric-run only\n");
}

}  // namespace
}  // namespace shoal::cli::testing
