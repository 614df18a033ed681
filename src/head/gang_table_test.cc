#include "head/gang_table.h"

#include "gtest/gtest.h"

namespace shoal {
namespace {

proto::GangInfo Gang(const std::string& id, proto::GangInfo::State state,
                     int restarts = 0) {
  proto::GangInfo g;
  g.set_gang_id(id);
  g.set_state(state);
  g.set_restarts(restarts);
  return g;
}

TEST(GangTableTest, KeepsTheLatestReportAndCountsRestarts) {
  GangTable table;
  table.Update(Gang("g1", proto::GangInfo::RUNNING));
  table.Update(Gang("g1", proto::GangInfo::RUNNING, 1));
  table.Update(Gang("g1", proto::GangInfo::RUNNING, 2));
  table.Update(Gang("g1", proto::GangInfo::FAILED, 2));
  // A straggling report does not revive an ended gang.
  table.Update(Gang("g1", proto::GangInfo::RUNNING, 2));
  table.Update(Gang("g2", proto::GangInfo::RUNNING));
  proto::GangList list = table.List();
  ASSERT_EQ(list.gangs_size(), 2);
  EXPECT_EQ(list.gangs(0).gang_id(), "g2");
  EXPECT_EQ(list.gangs(1).state(), proto::GangInfo::FAILED);
  EXPECT_EQ(table.started(), 2);
  EXPECT_EQ(table.restarts(), 2);
}

TEST(GangTableTest, AGangWhoseLauncherIsGoneEndsStopped) {
  GangTable table;
  table.Update(Gang("g1", proto::GangInfo::RUNNING));
  table.SetConnection("g1", 7);
  table.Update(Gang("g2", proto::GangInfo::RUNNING));
  table.SetConnection("g2", 8);
  table.LauncherLost(7);
  proto::GangList list = table.List();
  EXPECT_EQ(list.gangs(1).state(), proto::GangInfo::STOPPED);
  EXPECT_NE(list.gangs(1).message(), "");
  EXPECT_EQ(list.gangs(0).state(), proto::GangInfo::RUNNING);
}

TEST(GangTableTest, ForgetsEndedGangsFirst) {
  GangTable table(/*max_gangs=*/2);
  table.Update(Gang("running", proto::GangInfo::RUNNING));
  table.Update(Gang("done", proto::GangInfo::SUCCEEDED));
  table.Update(Gang("new", proto::GangInfo::RUNNING));
  proto::GangList list = table.List();
  ASSERT_EQ(list.gangs_size(), 2);
  EXPECT_EQ(list.gangs(0).gang_id(), "new");
  EXPECT_EQ(list.gangs(1).gang_id(), "running");
}

}  // namespace
}  // namespace shoal
