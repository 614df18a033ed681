#include "launch/gang_record.h"

#include "gtest/gtest.h"
#include "launch/launch_supervisor.h"
#include "launch/launcher.h"

namespace shoal::launch {
namespace {

std::vector<proto::LaunchHost> TwoHosts() {
  std::vector<proto::LaunchHost> hosts(2);
  hosts[0].set_node_id("n1");
  hosts[0].set_address("10.0.0.1");
  hosts[1].set_node_id("n2");
  hosts[1].set_address("10.0.0.2");
  return hosts;
}

TEST(GangRecordTest, ANewRecordSaysWhatRunsAndWhere) {
  LaunchOptions options;
  options.argv = {"python", std::string("tr\xffin.py")};
  options.per_host = true;
  options.max_restarts = 3;
  proto::GangInfo g =
      NewGangRecord(options, "ab12", "pg-1", "", "hostA pid 7", 1234);
  EXPECT_EQ(g.gang_id(), "ab12");
  ASSERT_EQ(g.argv_size(), 2);
  EXPECT_EQ(g.argv(1), "tr\xEF\xBF\xBDin.py");  // valid UTF-8
  EXPECT_TRUE(g.per_host());
  EXPECT_EQ(g.placement_group_id(), "pg-1");
  EXPECT_EQ(g.max_restarts(), 3);
  EXPECT_EQ(g.start_time_ms(), 1234);
  EXPECT_EQ(g.job_id(), "");
  EXPECT_EQ(g.launcher(), "hostA pid 7");
  EXPECT_EQ(NewGangRecord(options, "x", "", "job-9", "", 0).job_id(), "job-9");
}

TEST(GangRecordTest, RanksNameTheirHostAndTheAttemptsLog) {
  proto::GangInfo g;
  SetGangRanks({{0, 0}, {1, 1}}, TwoHosts(), "ab12-1", &g);
  ASSERT_EQ(g.ranks_size(), 2);
  EXPECT_EQ(g.ranks(1).rank(), 1);
  EXPECT_EQ(g.ranks(1).host_index(), 1);
  EXPECT_EQ(g.ranks(1).node_id(), "n2");
  EXPECT_EQ(g.ranks(1).address(), "10.0.0.2");
  EXPECT_EQ(g.ranks(1).log_name(), "launch-ab12-1/rank-1.log");
  // A new attempt replaces the ranks.
  SetGangRanks({{0, 1}}, TwoHosts(), "ab12-2", &g);
  ASSERT_EQ(g.ranks_size(), 1);
  EXPECT_EQ(g.ranks(0).node_id(), "n2");
}

TEST(GangRecordTest, ExitsMarkTheirRanks) {
  proto::GangInfo g;
  SetGangRanks({{0, 0}, {1, 1}}, TwoHosts(), "a-0", &g);
  proto::LaunchExit e;
  e.set_rank(1);
  e.set_exit_code(3);
  e.set_description("exited 3");
  SetGangExits({{1, e}}, &g);
  EXPECT_FALSE(g.ranks(0).exited());
  EXPECT_TRUE(g.ranks(1).exited());
  EXPECT_EQ(g.ranks(1).exit_code(), 3);
  EXPECT_EQ(g.ranks(1).description(), "exited 3");
}

TEST(GangRecordTest, TheEndSaysHowTheGangEnded) {
  proto::GangInfo g;
  LaunchOutcome ok;
  ok.summary = "shoal launch: all 4 processes exited 0";
  FinishGangRecord(ok, 99, &g);
  EXPECT_EQ(g.state(), proto::GangInfo::SUCCEEDED);
  EXPECT_EQ(g.message(), "all 4 processes exited 0");
  EXPECT_EQ(g.end_time_ms(), 99);
  LaunchOutcome stopped;
  stopped.exit_code = 130;
  stopped.stopped_by_user = true;
  stopped.summary = "shoal launch: interrupted";
  FinishGangRecord(stopped, 100, &g);
  EXPECT_EQ(g.state(), proto::GangInfo::STOPPED);
  LaunchOutcome failed;
  failed.exit_code = 3;
  failed.summary = "shoal launch: rank 2 failed first";
  FinishGangRecord(failed, 101, &g);
  EXPECT_EQ(g.state(), proto::GangInfo::FAILED);
  EXPECT_EQ(g.message(), "rank 2 failed first");
}

}  // namespace
}  // namespace shoal::launch
