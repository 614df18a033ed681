#include "head/job_table.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "head/head_fakes_testing.h"

namespace shoal {
namespace {

using ::shoal::testing::Resources;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

proto::JobSpec Spec(const std::string& entrypoint, const std::string& id = "") {
  proto::JobSpec spec;
  spec.set_entrypoint(entrypoint);
  spec.set_submission_id(id);
  return spec;
}

proto::JobEvent Event(const std::string& id) {
  proto::JobEvent e;
  e.set_submission_id(id);
  return e;
}

TEST(JobTableTest, RefusesSubmissionsThatCannotRunAsTheySay) {
  JobTable jobs;
  struct Case {
    proto::JobSpec spec;
    absl::StatusCode code;
    std::string says;
  };
  proto::JobSpec nul_env = Spec("env");
  (*nul_env.mutable_env())["X"] = std::string("a\0b", 3);
  std::vector<Case> cases = {
      {Spec(""), absl::StatusCode::kInvalidArgument, "needs an entrypoint"},
      {Spec(std::string("echo\0rm", 7)), absl::StatusCode::kInvalidArgument,
       "NUL byte"},
      {nul_env, absl::StatusCode::kInvalidArgument, "env var X"},
      {Spec("echo", "../etc"), absl::StatusCode::kInvalidArgument,
       "is not allowed"},
      {Spec("echo", ".hidden"), absl::StatusCode::kInvalidArgument,
       "is not allowed"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<JobTable::Job*> got = jobs.Submit(c.spec, "h:1", 5);
    EXPECT_EQ(got.status().code(), c.code) << c.says;
    EXPECT_THAT(std::string(got.status().message()), HasSubstr(c.says));
  }
  EXPECT_EQ(jobs.size(), 0u);
  ASSERT_TRUE(jobs.Submit(Spec("echo", "mine"), "h:1", 5).ok());
  absl::Status again = jobs.Submit(Spec("echo", "mine"), "h:1", 5).status();
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(again.message()), HasSubstr("--submission-id"));
}

TEST(JobTableTest, ASubmittedJobIsPendingWithAnIdAndTheHeadsAddress) {
  JobTable jobs;
  absl::StatusOr<JobTable::Job*> job = jobs.Submit(Spec("echo hi"), "h:1", 42);
  ASSERT_TRUE(job.ok());
  const proto::JobInfo& info = (*job)->info;
  EXPECT_THAT(info.spec().submission_id(), StartsWith("job_"));
  EXPECT_EQ(info.spec().head_address(), "h:1");
  EXPECT_EQ(info.state(), proto::JobInfo::PENDING);
  EXPECT_EQ(info.start_time_ms(), 42);
  EXPECT_EQ(jobs.Find(info.spec().submission_id()), *job);
}

TEST(JobTableTest, EntrypointsGoToTheHeadNodeFirstThenWhereverTheyFit) {
  auto node = [](const std::string& id, double total, double free, bool head) {
    return JobNode{id, id + ":1", Resources({{"CPU", total}}), head,
                   Resources({{"CPU", free}})};
  };
  std::vector<JobNode> nodes = {node("w1", 8, 8, false), node("h", 8, 8, true)};
  JobNodeChoice choice = ChooseJobNode(Resources({{"CPU", 1}}), nodes);
  ASSERT_NE(choice.node, nullptr);
  EXPECT_EQ(choice.node->node_id, "h");

  nodes = {node("w1", 8, 8, false), node("h", 1, 0, true)};
  choice = ChooseJobNode(Resources({{"CPU", 1}}), nodes);
  ASSERT_NE(choice.node, nullptr);
  EXPECT_EQ(choice.node->node_id, "w1");

  nodes = {node("w1", 8, 1, false)};
  choice = ChooseJobNode(Resources({{"CPU", 4}}), nodes);
  EXPECT_TRUE(choice.fits);
  EXPECT_EQ(choice.node, nullptr);

  choice = ChooseJobNode(Resources({{"GPU", 1}}), nodes);
  EXPECT_FALSE(choice.fits);
}

TEST(JobTableTest, ReportsMoveAJobThroughItsStates) {
  struct Case {
    std::string what;
    bool stop_requested;
    proto::JobEvent exit;
    proto::JobInfo::State want;
    int exit_code;
    std::string says;
  };
  proto::JobEvent ok = Event("j");
  ok.set_exited(true);
  proto::JobEvent failed = Event("j");
  failed.set_exited(true);
  failed.set_exit_code(3);
  failed.set_description("exited with 3");
  proto::JobEvent error = Event("j");
  error.set_error("cannot exec");
  proto::JobEvent killed = Event("j");
  killed.set_exited(true);
  killed.set_exit_code(-15);
  killed.set_description("was killed by signal 15");
  std::vector<Case> cases = {
      {"exit 0", false, ok, proto::JobInfo::SUCCEEDED, 0, "exited with 0"},
      {"exit 3", false, failed, proto::JobInfo::FAILED, 3, "exited with 3"},
      {"error", false, error, proto::JobInfo::FAILED, -1, "cannot exec"},
      {"stopped", true, killed, proto::JobInfo::STOPPED, -15,
       "stopped by shoal job stop (the entrypoint was killed by signal 15)"},
  };
  for (const Case& c : cases) {
    JobTable jobs;
    JobTable::Job* job = *jobs.Submit(Spec("run", "j"), "h:1", 0);
    proto::JobEvent started = Event("j");
    started.set_started(true);
    started.set_pid(1234);
    jobs.Apply(*job, started, 10);
    EXPECT_EQ(job->info.state(), proto::JobInfo::RUNNING) << c.what;
    EXPECT_EQ(job->info.pid(), 1234);
    job->stop_requested = c.stop_requested;
    jobs.Apply(*job, c.exit, 20);
    EXPECT_EQ(job->info.state(), c.want) << c.what;
    EXPECT_EQ(job->info.exit_code(), c.exit_code) << c.what;
    EXPECT_THAT(job->info.message(), HasSubstr(c.says)) << c.what;
    EXPECT_EQ(job->info.end_time_ms(), 20);
    // A late exit report does not change how it ended.
    jobs.Apply(*job, ok, 30);
    EXPECT_EQ(job->info.state(), c.want) << c.what;
  }
}

TEST(JobTableTest, OutputSentAgainIsNotCountedTwice) {
  JobTable jobs;
  JobTable::Job* job = *jobs.Submit(Spec("run", "j"), "h:1", 0);
  job->info.set_log_bytes(5);
  proto::JobEvent e = Event("j");
  e.set_output_offset(3);
  e.set_output("defgh");
  EXPECT_EQ(JobTable::NewOutput(*job, e), "fgh");
  e.set_output_offset(5);
  EXPECT_EQ(JobTable::NewOutput(*job, e), "defgh");
  e.set_output_offset(0);
  e.set_output("abc");
  EXPECT_EQ(JobTable::NewOutput(*job, e), "");
}

TEST(JobTableTest, JobsOnADeadNodeFail) {
  JobTable jobs;
  JobTable::Job* a = *jobs.Submit(Spec("run", "a"), "h:1", 1);
  JobTable::Job* b = *jobs.Submit(Spec("run", "b"), "h:1", 2);
  JobTable::Job* c = *jobs.Submit(Spec("run", "c"), "h:1", 3);
  a->info.set_node_id("n1");
  b->info.set_node_id("n2");
  c->info.set_node_id("n1");
  jobs.Finish(*c, proto::JobInfo::SUCCEEDED, 0, "done", 4);
  EXPECT_THAT(jobs.NodeDied("n1", "host down", 5), ElementsAre("a"));
  EXPECT_EQ(a->info.state(), proto::JobInfo::FAILED);
  EXPECT_EQ(a->info.message(), "its node n1 died: host down");
  EXPECT_EQ(b->info.state(), proto::JobInfo::PENDING);
  EXPECT_EQ(c->info.state(), proto::JobInfo::SUCCEEDED);
  EXPECT_THAT(jobs.NodeDied("n1", "again", 6), IsEmpty());
}

TEST(JobTableTest, OnlyFinishedJobsMayBeDeletedAndListsAreOldestFirst) {
  JobTable jobs;
  JobTable::Job* later = *jobs.Submit(Spec("run", "a-later"), "h:1", 20);
  JobTable::Job* first = *jobs.Submit(Spec("run", "z-first"), "h:1", 10);
  EXPECT_EQ(jobs.CheckDeletable("nope").code(), absl::StatusCode::kNotFound);
  absl::Status running = jobs.CheckDeletable("z-first");
  EXPECT_EQ(running.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(running.message()), HasSubstr("shoal job stop"));
  jobs.Finish(*first, proto::JobInfo::STOPPED, -1, "stopped", 30);
  EXPECT_TRUE(jobs.CheckDeletable("z-first").ok());
  proto::JobList list = jobs.List();
  ASSERT_EQ(list.jobs_size(), 2);
  EXPECT_EQ(list.jobs(0).spec().submission_id(), "z-first");
  EXPECT_EQ(list.jobs(1).spec().submission_id(),
            later->info.spec().submission_id());
  // Messages are kept as valid UTF-8.
  jobs.Finish(*later, proto::JobInfo::FAILED, 1, "bad \xff byte", 40);
  EXPECT_EQ(later->info.message().find('\xff'), std::string::npos);
}

}  // namespace
}  // namespace shoal
