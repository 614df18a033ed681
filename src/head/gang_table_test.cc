#include "head/gang_table.h"

#include <memory>

#include "gtest/gtest.h"
#include "head/table_storage.h"

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

TEST(GangTableTest, AGangWhoseLaunchersJobEndsIsStopped) {
  GangTable table;
  proto::GangInfo g1 = Gang("g1", proto::GangInfo::RUNNING);
  g1.set_driver_job_id("job1");
  proto::GangInfo g2 = Gang("g2", proto::GangInfo::RUNNING);
  g2.set_driver_job_id("job2");
  table.Update(g1);
  table.Update(g2);
  table.JobEnded("job1");
  proto::GangList list = table.List();
  EXPECT_EQ(list.gangs(1).state(), proto::GangInfo::STOPPED);
  EXPECT_NE(list.gangs(1).message(), "");
  EXPECT_EQ(list.gangs(0).state(), proto::GangInfo::RUNNING);
}

TEST(GangTableTest, AHeadThatRestartsListsTheGangsKept) {
  std::unique_ptr<TableStorage> storage = NewInMemoryTableStorage();
  {
    GangTable table(/*max_gangs=*/2, storage.get());
    proto::GangInfo old = Gang("old", proto::GangInfo::SUCCEEDED);
    old.set_start_time_ms(1);
    proto::GangInfo running = Gang("running", proto::GangInfo::RUNNING, 1);
    running.set_start_time_ms(2);
    running.set_driver_job_id("job3");
    proto::GangInfo newer = Gang("newer", proto::GangInfo::FAILED);
    newer.set_start_time_ms(3);
    table.Update(old);
    table.Update(running);
    table.Update(newer);  // forgets "old", in storage too
  }
  GangTable table(/*max_gangs=*/2, storage.get());
  table.Restore();
  proto::GangList list = table.List();
  ASSERT_EQ(list.gangs_size(), 2);
  EXPECT_EQ(list.gangs(0).gang_id(), "newer");
  EXPECT_EQ(list.gangs(1).gang_id(), "running");
  EXPECT_EQ(list.gangs(1).restarts(), 1);
  // Its launcher's job still ends it after the restart, and that is kept.
  table.JobEnded("job3");
  GangTable again(/*max_gangs=*/2, storage.get());
  again.Restore();
  EXPECT_EQ(again.List().gangs(1).state(), proto::GangInfo::STOPPED);
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
