#include "head/driver_job_table.h"

#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "head/table_storage.h"

namespace shoal {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

proto::RegisterJobRequest Driver(const std::string& resume = "") {
  proto::RegisterJobRequest r;
  r.set_driver_pid(42);
  r.set_driver_host("host");
  r.set_resume_job_id(resume);
  return r;
}

TEST(DriverJobTableTest, EachDriverGetsTheNextJobTiedToItsConnection) {
  std::unique_ptr<TableStorage> storage = NewInMemoryTableStorage();
  DriverJobTable jobs(storage.get());
  EXPECT_EQ(jobs.Register(Driver(), 7)->job_id(), "job1");
  EXPECT_EQ(jobs.Register(Driver(), 8)->job_id(), "job2");
  EXPECT_EQ(jobs.num_jobs(), 2);
  EXPECT_EQ(jobs.JobOf(7), "job1");
  EXPECT_EQ(jobs.JobOf(9), "");
  EXPECT_EQ(jobs.Disconnected(7), "job1");
  EXPECT_EQ(jobs.Disconnected(7), std::nullopt);
  EXPECT_EQ(jobs.JobOf(7), "");
  EXPECT_EQ(jobs.Disconnected(9), std::nullopt);
}

TEST(DriverJobTableTest, AfterARestartDriversResumeOrTheirJobsEnd) {
  std::unique_ptr<TableStorage> storage = NewInMemoryTableStorage();
  {
    DriverJobTable before(storage.get());
    ASSERT_TRUE(before.Register(Driver(), 1).ok());
    ASSERT_TRUE(before.Register(Driver(), 2).ok());
    ASSERT_TRUE(before.Register(Driver(), 3).ok());
    before.Ended("job3");
  }
  DriverJobTable after(storage.get());
  EXPECT_EQ(after.Restore(), 2u);
  // The counter goes on from where it was.
  EXPECT_EQ(after.Register(Driver(), 10)->job_id(), "job4");
  // job1's driver comes back on a new connection.
  EXPECT_EQ(after.Register(Driver("job1"), 11)->job_id(), "job1");
  EXPECT_EQ(after.JobOf(11), "job1");
  // job2's does not.
  EXPECT_THAT(after.TakeAwaiting(), ElementsAre("job2"));
  EXPECT_THAT(after.TakeAwaiting(), IsEmpty());
  after.Ended("job2");
  DriverJobTable again(storage.get());
  EXPECT_EQ(again.Restore(), 2u);  // job1 and job4 live on
  EXPECT_EQ(again.num_jobs(), 4);
}

}  // namespace
}  // namespace shoal
