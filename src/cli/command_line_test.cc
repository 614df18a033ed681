// The `shoal` command line as a whole: which command runs, and how a
// command line that cannot run ends (the message and the exit status).
#include "cli/command_line.h"

#include <string>

#include "cli/cli_fakes.h"
#include "cli/exit_status.h"
#include "cli/launch_command.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::cli::testing {
namespace {

using ::testing::HasSubstr;

class CommandLineTest : public CliTest {
 protected:
  Shoal shoal_;
};

TEST_F(CommandLineTest, ExitCodeSaysWhatFailed) {
  std::ostringstream err;
  EXPECT_EQ(ExitCode(7, err), 7);
  EXPECT_EQ(err.str(), "");
  EXPECT_EQ(ExitCode(UsageError("say more"), err), kUsageError);
  EXPECT_EQ(err.str(), "shoal: say more\n");
  err.str("");
  EXPECT_EQ(ExitCode(absl::InvalidArgumentError("bad file"), err), 1);
  EXPECT_EQ(err.str(), "shoal: bad file\n");
  EXPECT_TRUE(IsUsageError(UsageError("x")));
  EXPECT_FALSE(IsUsageError(absl::InvalidArgumentError("x")));
}

TEST_F(CommandLineTest, NoCommandListsThem) {
  Ran ran = shoal_.Run({});
  EXPECT_EQ(ran.code, 2);
  EXPECT_EQ(ran.err,
            "shoal: say a command: start, stop, status, job, list, summary, "
            "logs, launch, symmetric-run, config, dev (`shoal --help` says "
            "what each does)\n");
}

TEST_F(CommandLineTest, AMisspelledCommandNamesTheNearest) {
  Ran ran = shoal_.Run({"stauts"});
  EXPECT_EQ(ran.code, 2);
  EXPECT_EQ(ran.err,
            "shoal: unknown command \"stauts\"; did you mean \"status\"?\n");
  Ran job = shoal_.Run({"job", "sbumit"});
  EXPECT_EQ(job.err,
            "shoal: unknown command \"sbumit\"; did you mean \"submit\"?\n");
  Ran dev = shoal_.Run({"dev"});
  EXPECT_EQ(dev.err, "shoal: say a command after dev: fake-tpu, sim-nodes\n");
}

TEST_F(CommandLineTest, AMisspelledOptionNamesTheNearest) {
  Ran ran = shoal_.Run({"status", "--adress", "1.2.3.4:5"});
  EXPECT_EQ(ran.code, 2);
  EXPECT_EQ(ran.err,
            "shoal: unknown option --adress; did you mean --address?\nRun "
            "`shoal status --help` for the options.\n");
}

TEST_F(CommandLineTest, AProgramWithoutItsDashesSaysWhereTheyGo) {
  Ran ran = shoal_.Run({"launch", "--per-host", "echo", "hi"});
  EXPECT_EQ(ran.code, 2);
  EXPECT_EQ(ran.err,
            "shoal: put -- before the command: shoal launch --per-host -- "
            "echo hi\nRun `shoal launch --help` for the options.\n");
}

TEST_F(CommandLineTest, ABadValueIsAUsageError) {
  EXPECT_EQ(shoal_.Run({"status", "--format", "xml"}).code, 2);
  EXPECT_EQ(shoal_.Run({"start", "--head", "--port", "70000"}).code, 2);
  EXPECT_EQ(shoal_.Run({"list", "nodez"}).code, 2);
  EXPECT_TRUE(shoal_.host.started.empty());
}

TEST_F(CommandLineTest, TlsFilesThatCannotBeReadFailTheCommandAtOnce) {
  Ran ran = shoal_.Run({"status", "--address", "10.0.0.1:6379", "--tls-ca",
                        dir_ + "/missing.pem"});
  EXPECT_EQ(ran.code, 2);
  EXPECT_THAT(ran.err, HasSubstr("shoal: "));
  EXPECT_TRUE(ran.connections.empty());
  for (const char* name : {"SHOAL_TLS_CA", "SHOAL_TLS_CERT", "SHOAL_TLS_KEY"}) {
    unsetenv(name);
  }
}

TEST_F(CommandLineTest, LaunchNeedsOneModeAndExitCodes) {
  launch_command::Flags f;
  auto both = launch_command::Options(f);
  ASSERT_FALSE(both.ok());
  EXPECT_TRUE(IsUsageError(both.status()));
  EXPECT_EQ(both.status().message(),
            "say --per-device (one process per device) or --per-host (one "
            "process per host)");
  f.per_device = true;
  f.no_restart_on = "2,300";
  auto codes = launch_command::Options(f);
  ASSERT_FALSE(codes.ok());
  EXPECT_EQ(codes.status().message(),
            "--no-restart-on takes exit codes from 0 to 255, e.g. 2,3 (got "
            "\"2,300\")");
  f.no_restart_on = "2,3";
  f.options.argv = {"./step"};
  auto ok = launch_command::Options(f);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->no_restart_on, (std::set<int>{2, 3}));
  EXPECT_FALSE(ok->per_host);
  EXPECT_EQ(ok->argv, std::vector<std::string>{"./step"});

  Ran both_flags =
      shoal_.Run({"launch", "--per-device", "--per-host", "--", "./step"});
  EXPECT_EQ(both_flags.code, 2);
}

}  // namespace
}  // namespace shoal::cli::testing
