#include "launch/report_inbox.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::launch {
namespace {

proto::LaunchReport Report(const std::string& launch_id) {
  proto::LaunchReport r;
  r.set_launch_id(launch_id);
  return r;
}

void AddLine(proto::LaunchReport* r, int rank, const std::string& text) {
  proto::LaunchLine* line = r->add_lines();
  line->set_rank(rank);
  line->set_prefix("[rank " + std::to_string(rank) + "]");
  line->set_text(text);
}

void AddExit(proto::LaunchReport* r, int rank, int code, bool stopped) {
  proto::LaunchExit* e = r->add_exits();
  e->set_rank(rank);
  e->set_exit_code(code);
  e->set_stopped(stopped);
  e->set_time_us(100 + rank);
}

class ReportInboxTest : public ::testing::Test {
 protected:
  std::string printed_;
  ReportInbox inbox_{[this](std::string_view out) { printed_.append(out); }};
};

TEST_F(ReportInboxTest, PrintsTheLinesOfTheRunningAttempt) {
  inbox_.BeginAttempt("g-0");
  proto::LaunchReport r = Report("g-0");
  AddLine(&r, 0, "hello");
  AddLine(&r, 1, std::string("bin\0ary", 7));
  EXPECT_FALSE(inbox_.Receive(r, false));
  EXPECT_EQ(printed_, std::string("[rank 0] hello\n[rank 1] bin\0ary\n", 32));
}

TEST_F(ReportInboxTest, AFailingRankStopsTheGangAtOnce) {
  inbox_.BeginAttempt("g-0");
  proto::LaunchReport ok = Report("g-0");
  AddExit(&ok, 0, 0, false);
  EXPECT_FALSE(inbox_.Receive(ok, false));
  proto::LaunchReport failed = Report("g-0");
  AddExit(&failed, 2, 1, false);
  EXPECT_TRUE(inbox_.Receive(failed, false));
  // Every other runner hears it in its next reply.
  EXPECT_TRUE(inbox_.Receive(Report("g-0"), false));
  std::vector<proto::LaunchExit> exits = inbox_.TakeNewExits();
  ASSERT_EQ(exits.size(), 2u);
  EXPECT_EQ(exits[0].rank(), 0);
  EXPECT_EQ(exits[1].rank(), 2);
  EXPECT_TRUE(inbox_.TakeNewExits().empty());
}

TEST_F(ReportInboxTest, RanksStoppedWithTheGangDoNotStopIt) {
  inbox_.BeginAttempt("g-0");
  proto::LaunchReport r = Report("g-0");
  AddExit(&r, 1, 143, true);
  EXPECT_FALSE(inbox_.Receive(r, false));
}

TEST_F(ReportInboxTest, TheUsersStopAndTheSupervisorsReachEveryRunner) {
  inbox_.BeginAttempt("g-0");
  EXPECT_TRUE(inbox_.Receive(Report("g-0"), /*stop_requested=*/true));
  inbox_.BeginAttempt("g-1");
  EXPECT_FALSE(inbox_.Receive(Report("g-1"), false));
  inbox_.RequestStop();
  EXPECT_TRUE(inbox_.Receive(Report("g-1"), false));
}

TEST_F(ReportInboxTest, AnEarlierAttemptsStragglerIsStoppedAndNotPrinted) {
  inbox_.BeginAttempt("g-0");
  proto::LaunchReport old = Report("g-0");
  AddExit(&old, 3, 1, false);
  inbox_.Receive(old, false);
  inbox_.BeginAttempt("g-1");
  EXPECT_TRUE(inbox_.TakeNewExits().empty());  // forgotten with its attempt
  proto::LaunchReport straggler = Report("g-0");
  AddLine(&straggler, 3, "late");
  AddExit(&straggler, 3, 1, false);
  EXPECT_TRUE(inbox_.Receive(straggler, false));
  EXPECT_EQ(printed_, "");
  EXPECT_TRUE(inbox_.TakeNewExits().empty());
  // The new attempt is not stopped by it.
  EXPECT_FALSE(inbox_.Receive(Report("g-1"), false));
}

TEST(RankExitOfTest, CarriesEveryField) {
  proto::LaunchExit e;
  e.set_rank(4);
  e.set_exit_code(137);
  e.set_description("killed by signal 9");
  e.set_time_us(77);
  e.set_stopped(true);
  RankExit r = RankExitOf(e);
  EXPECT_EQ(r.rank, 4);
  EXPECT_EQ(r.exit_code, 137);
  EXPECT_EQ(r.description, "killed by signal 9");
  EXPECT_EQ(r.time_us, 77);
  EXPECT_TRUE(r.stopped);
}

}  // namespace
}  // namespace shoal::launch
