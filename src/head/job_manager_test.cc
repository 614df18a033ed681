#include "head/job_manager.h"

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "head/head_fakes_testing.h"
#include "head/table_storage.h"

namespace shoal {
namespace {

using ::shoal::testing::FakeAgents;
using ::shoal::testing::FakeTimers;
using ::shoal::testing::Resources;
using ::testing::HasSubstr;

class JobManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    log_dir_ = ::testing::TempDir() + "/jobsXXXXXX";
    ASSERT_NE(mkdtemp(log_dir_.data()), nullptr);
    nodes_ = {{"head", "head:1", Resources({{"CPU", 2}}), true,
               Resources({{"CPU", 2}})},
              {"w1", "w1:1", Resources({{"CPU", 8}}), false,
               Resources({{"CPU", 8}})}};
    jobs_ = Make();
  }
  void TearDown() override {
    jobs_.reset();
    std::filesystem::remove_all(log_dir_);
  }

  std::unique_ptr<JobManager> Make() {
    JobManagerOptions options;
    options.log_dir = log_dir_;
    options.head_address = "head:6379";
    options.call_agent = agents_.caller();
    options.run_after = time_.runner();
    options.alive_nodes = [this] { return nodes_; };
    options.storage = storage_.get();
    return std::make_unique<JobManager>(std::move(options));
  }

  proto::JobInfo Submit(const std::string& id, double cpus = 0) {
    proto::JobSpec spec;
    spec.set_entrypoint("echo hi");
    spec.set_submission_id(id);
    if (cpus > 0)
      *spec.mutable_entrypoint_resources() = Resources({{"CPU", cpus}});
    absl::StatusOr<proto::JobInfo> info = jobs_->Submit(spec);
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? *info : proto::JobInfo();
  }
  proto::JobInfo Get(const std::string& id) {
    absl::StatusOr<proto::JobInfo> info = jobs_->Get(id);
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? *info : proto::JobInfo();
  }
  absl::Status Report(const std::string& id, bool started, bool exited,
                      int code, const std::string& output, int64_t offset) {
    proto::JobEvent e;
    e.set_submission_id(id);
    e.set_started(started);
    e.set_exited(exited);
    e.set_exit_code(code);
    e.set_description(absl::StrCat("exited with ", code));
    e.set_output(output);
    e.set_output_offset(offset);
    return jobs_->Event(e);
  }
  std::string Log(const std::string& id) {
    absl::StatusOr<std::string> text =
        ReadFile(log_dir_ + "/job-" + id + ".log");
    return text.ok() ? *text : "<none>";
  }
  // Asks for the logs from `offset`; the answer, once there is one.
  std::shared_ptr<std::optional<absl::StatusOr<proto::JobLogs>>> Logs(
      const std::string& id, int64_t offset, int64_t wait_ms) {
    auto got =
        std::make_shared<std::optional<absl::StatusOr<proto::JobLogs>>>();
    proto::JobLogsRequest r;
    r.set_submission_id(id);
    r.set_offset(offset);
    r.set_wait_ms(wait_ms);
    jobs_->Logs(r, [got](absl::StatusOr<proto::JobLogs> logs) { *got = logs; });
    return got;
  }

  std::string log_dir_;
  FakeAgents agents_;
  FakeTimers time_;
  std::vector<JobNode> nodes_;
  std::unique_ptr<TableStorage> storage_ = NewInMemoryTableStorage();
  std::unique_ptr<JobManager> jobs_;
};

TEST_F(JobManagerTest, AJobRunsOnTheHeadNodeAndItsOutputIsKept) {
  proto::JobInfo info = Submit("j1");
  EXPECT_EQ(info.state(), proto::JobInfo::PENDING);
  EXPECT_EQ(info.node_id(), "head");
  std::vector<size_t> starts = agents_.Waiting(proto::START_JOB);
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(agents_.call(starts[0]).address, "head:1");
  proto::JobSpec sent = agents_.RequestOf<proto::JobSpec>(starts[0]);
  EXPECT_EQ(sent.head_address(), "head:6379");
  agents_.Answer(starts[0], proto::Empty());

  ASSERT_TRUE(Report("j1", true, false, 0, "hello ", 0).ok());
  EXPECT_EQ(Get("j1").state(), proto::JobInfo::RUNNING);
  ASSERT_TRUE(Report("j1", false, false, 0, "world\n", 6).ok());
  // Sent again after a head restart: not written twice.
  ASSERT_TRUE(Report("j1", false, false, 0, "world\n", 6).ok());
  ASSERT_TRUE(Report("j1", false, true, 0, "", 12).ok());
  info = Get("j1");
  EXPECT_EQ(info.state(), proto::JobInfo::SUCCEEDED);
  EXPECT_EQ(info.log_bytes(), 12);
  EXPECT_EQ(Log("j1"), "hello world\n");
  proto::JobInfo kept;
  ASSERT_TRUE(kept.ParseFromString(*storage_->Get("submitted_jobs", "j1")));
  EXPECT_EQ(kept.state(), proto::JobInfo::SUCCEEDED);

  auto logs = Logs("j1", 6, 0);
  ASSERT_TRUE(logs->has_value() && (*logs)->ok());
  EXPECT_EQ((**logs)->data(), "world\n");
  EXPECT_EQ((**logs)->next_offset(), 12);
  EXPECT_TRUE((**logs)->finished());
}

TEST_F(JobManagerTest, ALongPollIsAnsweredByNewOutputOrWhenItsWaitIsOver) {
  Submit("j1");
  agents_.AnswerAll(proto::START_JOB);
  auto waiting = Logs("j1", 0, 10000);
  EXPECT_FALSE(waiting->has_value());
  ASSERT_TRUE(Report("j1", true, false, 0, "out", 0).ok());
  ASSERT_TRUE(waiting->has_value());
  EXPECT_EQ((**waiting)->data(), "out");
  EXPECT_FALSE((**waiting)->finished());

  auto idle = Logs("j1", 3, 2000);
  time_.Advance(1999);
  EXPECT_FALSE(idle->has_value());
  time_.Advance(1);
  ASSERT_TRUE(idle->has_value());
  EXPECT_EQ((**idle)->data(), "");
  EXPECT_EQ((**idle)->next_offset(), 3);

  // The job's end answers a waiting reader too.
  auto until_end = Logs("j1", 3, 10000);
  ASSERT_TRUE(Report("j1", false, true, 1, "", 3).ok());
  ASSERT_TRUE(until_end->has_value());
  EXPECT_TRUE((**until_end)->finished());
  EXPECT_EQ(Get("j1").state(), proto::JobInfo::FAILED);
  EXPECT_EQ(Get("j1").message(), "the entrypoint exited with 1");

  EXPECT_EQ((*Logs("nope", 0, 0))->status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(JobManagerTest, AJobWaitsForResourcesAndFailsWhenNoNodeHasThem) {
  nodes_[1].available = Resources({{"CPU", 1}});
  proto::JobInfo waiting = Submit("big", 4);
  EXPECT_EQ(waiting.state(), proto::JobInfo::PENDING);
  EXPECT_THAT(waiting.message(), HasSubstr("waiting for the entrypoint's"));
  EXPECT_EQ(agents_.Count(proto::START_JOB), 0u);
  nodes_[1].available = Resources({{"CPU", 8}});
  time_.Advance(500);
  std::vector<size_t> starts = agents_.Waiting(proto::START_JOB);
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(agents_.call(starts[0]).address, "w1:1");
  EXPECT_EQ(Get("big").node_id(), "w1");
  EXPECT_EQ(Get("big").message(), "");

  proto::JobInfo never = Submit("huge", 64);
  EXPECT_EQ(never.state(), proto::JobInfo::FAILED);
  EXPECT_THAT(never.message(), HasSubstr("start a node that has them"));
}

TEST_F(JobManagerTest, ANodeThatCannotStartItRetriesOrFails) {
  Submit("busy");
  agents_.Fail(agents_.Waiting(proto::START_JOB)[0],
               absl::ResourceExhaustedError("its CPUs are taken"));
  EXPECT_EQ(Get("busy").state(), proto::JobInfo::PENDING);
  EXPECT_EQ(Get("busy").node_id(), "");
  EXPECT_EQ(Get("busy").message(), "its CPUs are taken");
  time_.Advance(500);
  ASSERT_EQ(agents_.Waiting(proto::START_JOB).size(), 1u);

  agents_.Fail(agents_.Waiting(proto::START_JOB)[0],
               absl::InternalError("no such file"));
  EXPECT_EQ(Get("busy").state(), proto::JobInfo::FAILED);
  EXPECT_EQ(Get("busy").message(),
            "node head could not start it: no such file");
}

TEST_F(JobManagerTest, StoppingAsksTheAgentOrKeepsAWaitingJobFromStarting) {
  Submit("run");
  agents_.AnswerAll(proto::START_JOB);
  ASSERT_TRUE(Report("run", true, false, 0, "", 0).ok());
  ASSERT_TRUE(jobs_->Stop("run").ok());
  std::vector<size_t> signals = agents_.Waiting(proto::SIGNAL_JOB);
  ASSERT_EQ(signals.size(), 1u);
  EXPECT_EQ(agents_.RequestOf<proto::JobRef>(signals[0]).submission_id(),
            "run");
  agents_.Answer(signals[0], proto::Empty());
  EXPECT_EQ(Get("run").state(), proto::JobInfo::RUNNING);
  ASSERT_TRUE(Report("run", false, true, -15, "", 0).ok());
  EXPECT_EQ(Get("run").state(), proto::JobInfo::STOPPED);

  Submit("lost");
  agents_.AnswerAll(proto::START_JOB);
  ASSERT_TRUE(jobs_->Stop("lost").ok());
  agents_.Fail(agents_.Waiting(proto::SIGNAL_JOB)[0],
               absl::UnavailableError("connection refused"));
  EXPECT_EQ(Get("lost").state(), proto::JobInfo::STOPPED);
  EXPECT_THAT(Get("lost").message(), HasSubstr("did not answer"));

  nodes_.clear();
  nodes_.push_back(
      {"w", "w:1", Resources({{"CPU", 8}}), false, Resources({{"CPU", 0}})});
  Submit("queued", 1);
  absl::StatusOr<proto::JobInfo> stopped = jobs_->Stop("queued");
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ(stopped->state(), proto::JobInfo::STOPPED);
  EXPECT_THAT(stopped->message(), HasSubstr("before it started"));
  EXPECT_EQ(jobs_->Stop("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(JobManagerTest, JobsFailWithTheirAgentsNode) {
  Submit("j1");
  agents_.AnswerAll(proto::START_JOB);
  ASSERT_TRUE(Report("j1", true, false, 0, "", 0).ok());
  auto waiting = Logs("j1", 0, 10000);
  jobs_->NodeDied("head", "no heartbeat for 5000 ms");
  EXPECT_EQ(Get("j1").state(), proto::JobInfo::FAILED);
  EXPECT_EQ(Get("j1").message(),
            "its node head died: no heartbeat for 5000 ms");
  ASSERT_TRUE(waiting->has_value());
  EXPECT_TRUE((**waiting)->finished());
  proto::JobInfo kept;
  ASSERT_TRUE(kept.ParseFromString(*storage_->Get("submitted_jobs", "j1")));
  EXPECT_EQ(kept.state(), proto::JobInfo::FAILED);
}

TEST_F(JobManagerTest, DeletingForgetsAFinishedJobAndItsLog) {
  Submit("j1");
  agents_.AnswerAll(proto::START_JOB);
  ASSERT_TRUE(Report("j1", true, false, 0, "x", 0).ok());
  EXPECT_EQ(jobs_->Delete("j1").code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(Report("j1", false, true, 0, "", 1).ok());
  ASSERT_TRUE(jobs_->Delete("j1").ok());
  EXPECT_EQ(jobs_->Get("j1").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Log("j1"), "<none>");
  EXPECT_FALSE(storage_->Get("submitted_jobs", "j1").has_value());
  EXPECT_EQ(jobs_->List().jobs_size(), 0);
}

TEST_F(JobManagerTest, ARestartedHeadTakesUpTheJobsKept) {
  Submit("done");
  agents_.AnswerAll(proto::START_JOB);
  ASSERT_TRUE(Report("done", true, true, 0, "out", 0).ok());
  nodes_[0].available = Resources({{"CPU", 0}});
  nodes_[1].available = Resources({{"CPU", 0}});
  Submit("waits", 1);
  jobs_ = Make();
  jobs_->Restore();
  EXPECT_EQ(jobs_->size(), 2u);
  EXPECT_EQ(Get("done").state(), proto::JobInfo::SUCCEEDED);
  EXPECT_EQ(Get("done").log_bytes(), 3);
  const size_t starts = agents_.Count(proto::START_JOB);
  nodes_[1].available = Resources({{"CPU", 8}});
  time_.Advance(500);
  EXPECT_EQ(agents_.Count(proto::START_JOB), starts + 1);
  EXPECT_EQ(Get("waits").node_id(), "w1");
}

TEST_F(JobManagerTest, AJobWhoseStartDiedWithTheHeadIsStartedAgain) {
  Submit("lost", 1);  // placed: START_JOB sent, never answered
  ASSERT_FALSE(Get("lost").node_id().empty());
  const std::string node = Get("lost").node_id();
  const size_t starts = agents_.Count(proto::START_JOB);
  jobs_ = Make();  // the head died before the agent heard of the job
  jobs_->Restore();
  EXPECT_EQ(Get("lost").state(), proto::JobInfo::PENDING);
  time_.Advance(500);
  ASSERT_EQ(agents_.Count(proto::START_JOB), starts + 1);
  std::vector<size_t> waiting = agents_.Waiting(proto::START_JOB);
  ASSERT_FALSE(waiting.empty());
  EXPECT_EQ(agents_.call(waiting.back()).address, node + ":1");
  // Not back yet: asked again later, and kept meanwhile.
  agents_.Fail(waiting.back(), absl::UnavailableError("connection refused"));
  EXPECT_EQ(Get("lost").state(), proto::JobInfo::PENDING);
  time_.Advance(500);
  ASSERT_EQ(agents_.Count(proto::START_JOB), starts + 2);
  // An agent that had it after all says so: the job is left running there.
  agents_.Fail(agents_.Waiting(proto::START_JOB).back(),
               absl::AlreadyExistsError("job lost already runs on this node"));
  EXPECT_EQ(Get("lost").state(), proto::JobInfo::PENDING);
  EXPECT_EQ(Get("lost").node_id(), node);
  ASSERT_TRUE(Report("lost", true, false, 0, "", 0).ok());
  EXPECT_EQ(Get("lost").state(), proto::JobInfo::RUNNING);
  time_.Advance(5000);
  EXPECT_EQ(agents_.Count(proto::START_JOB), starts + 2)
      << "once running, never again";
}

}  // namespace
}  // namespace shoal
