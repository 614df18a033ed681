#include "cli/job_commands.h"

#include <map>
#include <string>

#include "cli/cli_fakes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "scheduling/resource_set.h"

namespace shoal::cli::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

proto::JobInfo MakeJob(const std::string& id, proto::JobInfo::State state,
                       int exit_code = 0) {
  proto::JobInfo info;
  info.mutable_spec()->set_submission_id(id);
  info.mutable_spec()->set_entrypoint("python3 train.py");
  info.set_state(state);
  info.set_exit_code(exit_code);
  info.set_node_id("n1");
  info.set_start_time_ms(1000);
  info.set_end_time_ms(3500);
  info.set_message("it ended");
  return info;
}

proto::JobLogs Logs(const std::string& data, bool finished) {
  proto::JobLogs logs;
  logs.set_data(data);
  logs.set_next_offset(static_cast<int64_t>(data.size()));
  logs.set_finished(finished);
  return logs;
}

class JobTest : public CliTest {
 protected:
  Ran Job(std::vector<std::string> args) {
    args.insert(args.begin(), {"job"});
    args.insert(args.begin() + 2,
                {"--address", "10.0.0.1:6379", "--token", "tok"});
    return shoal_.Run(args);
  }
  Shoal shoal_;
};

TEST_F(JobTest, SubmitSendsTheEntrypointQuotedWithItsEnvAndResources) {
  shoal_.cluster.submit_reply = MakeJob("job-1", proto::JobInfo::PENDING);
  Ran ran =
      Job({"submit", "--env", "A=1", "--env", "B=x=y", "--entrypoint-num-cpus",
           "2", "--entrypoint-resources", "{\"disk\": 1}", "--submission-id",
           "job-1", "--no-wait", "--", "python3", "-c", "print('hi there')"});
  ASSERT_EQ(ran.code, 0) << ran.err;
  ASSERT_EQ(shoal_.cluster.submitted.size(), 1u);
  const proto::JobSpec& spec = shoal_.cluster.submitted[0];
  EXPECT_EQ(spec.entrypoint(), "python3 -c 'print('\\''hi there'\\'')'");
  EXPECT_EQ(spec.env().at("A"), "1");
  EXPECT_EQ(spec.env().at("B"), "x=y");
  EXPECT_EQ(spec.submission_id(), "job-1");
  EXPECT_EQ(spec.entrypoint_num_cpus(), 2);
  std::map<std::string, double> need =
      ResourceSet::FromProto(spec.entrypoint_resources()).ToDoubles();
  EXPECT_EQ(need["CPU"], 2);
  EXPECT_EQ(need["disk"], 1);
  // --no-wait: the id on stdout, the rest for a person.
  EXPECT_EQ(ran.out, "job-1\n");
  EXPECT_THAT(ran.err, HasSubstr("Job job-1 submitted (node n1)."));
  EXPECT_THAT(ran.err, HasSubstr("logs:   shoal job logs -f job-1"));
  EXPECT_TRUE(shoal_.cluster.log_requests.empty());
}

TEST_F(JobTest, SubmitFollowsTheLogsAndEndsAsTheJobDid) {
  shoal_.cluster.submit_reply = MakeJob("j", proto::JobInfo::RUNNING);
  shoal_.cluster.job_logs = {Logs("hello\n", false), Logs("bye\n", true)};
  shoal_.cluster.job_states = {MakeJob("j", proto::JobInfo::FAILED, 7)};
  Ran ran = Job({"submit", "--working-dir", "/src", "--", "./run"});
  EXPECT_EQ(ran.code, 7);
  EXPECT_EQ(ran.out, "hello\nbye\n");
  EXPECT_THAT(ran.err, HasSubstr("Job j FAILED: it ended (2.5s)\n"));
  EXPECT_THAT(shoal_.cluster.attached, ElementsAre("/src"));
  ASSERT_EQ(shoal_.cluster.log_requests.size(), 2u);
  EXPECT_EQ(shoal_.cluster.log_requests[0].wait_ms(), 5000);
  EXPECT_EQ(shoal_.cluster.log_requests[1].offset(), 6);
  // A Ctrl-C while following says the job goes on, and how to reach it.
  EXPECT_THAT(ran.interrupt_note,
              HasSubstr("stop it:          shoal job stop --address "
                        "10.0.0.1:6379 j\n"));
}

TEST_F(JobTest, ASubmissionTheHeadFailsIsAFailure) {
  shoal_.cluster.submit_reply = MakeJob("j", proto::JobInfo::FAILED);
  Ran ran = Job({"submit", "--", "./run"});
  EXPECT_EQ(ran.code, 1);
  EXPECT_EQ(ran.err, "shoal: job j failed: it ended\n");
}

TEST_F(JobTest, SubmitChecksItsFlagsBeforeConnecting) {
  Ran no_entrypoint = Job({"submit"});
  EXPECT_EQ(no_entrypoint.code, 2);
  EXPECT_THAT(no_entrypoint.err,
              HasSubstr("say the entrypoint after --, e.g. shoal job submit "
                        "-- python3 train.py"));
  Ran bad_env = Job({"submit", "--env", "=1", "--", "x"});
  EXPECT_EQ(bad_env.code, 2);
  EXPECT_EQ(bad_env.err, "shoal: --env takes NAME=VALUE, not \"=1\"\n");
  Ran bad_resources =
      Job({"submit", "--entrypoint-resources", "[1]", "--", "x"});
  EXPECT_EQ(bad_resources.code, 2);
  EXPECT_THAT(bad_resources.err, HasSubstr("--entrypoint-resources: "));
  EXPECT_TRUE(no_entrypoint.connections.empty());
  EXPECT_TRUE(bad_env.connections.empty());
  EXPECT_TRUE(shoal_.cluster.submitted.empty());
}

TEST_F(JobTest, StatusPrintsTheJobAsTextOrJson) {
  shoal_.cluster.job_states = {MakeJob("j", proto::JobInfo::SUCCEEDED)};
  Ran text = Job({"status", "j"});
  EXPECT_EQ(text.code, 0);
  EXPECT_EQ(text.out,
            "j: SUCCEEDED on node n1, 2.5s\n  entrypoint: python3 train.py\n"
            "  it ended\n");
  Ran json = Job({"status", "j", "--format", "json"});
  ASSERT_EQ(json.code, 0);
  nlohmann::json j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["status"], "SUCCEEDED");
  EXPECT_EQ(j["submission_id"], "j");
  EXPECT_EQ(j["end_time"], 3500);
}

TEST_F(JobTest, StatusOfAnUnknownJobFails) {
  Ran ran = Job({"status", "nope"});
  EXPECT_EQ(ran.code, 1);
  EXPECT_EQ(ran.err, "shoal: cannot get the job: no such job\n");
}

TEST_F(JobTest, StopWaitsForTheJobToEnd) {
  shoal_.cluster.stop_reply = MakeJob("j", proto::JobInfo::RUNNING);
  shoal_.cluster.job_states = {MakeJob("j", proto::JobInfo::RUNNING),
                               MakeJob("j", proto::JobInfo::STOPPED)};
  Ran ran = Job({"stop", "j"});
  EXPECT_EQ(ran.code, 0);
  EXPECT_EQ(ran.out,
            "Stopping job j (SIGTERM, then SIGKILL)...\nJob j STOPPED: it "
            "ended\n");
  EXPECT_EQ(shoal_.host.slept_ms, 200);
  EXPECT_THAT(shoal_.cluster.stopped, ElementsAre("j"));
}

TEST_F(JobTest, StopGivesUpAfterTwentySeconds) {
  shoal_.cluster.stop_reply = MakeJob("j", proto::JobInfo::RUNNING);
  shoal_.cluster.job_states = {MakeJob("j", proto::JobInfo::RUNNING)};
  Ran ran = Job({"stop", "j"});
  EXPECT_EQ(ran.code, 1);
  EXPECT_EQ(ran.err, "shoal: the job did not end within 20 s\n");
  EXPECT_EQ(shoal_.host.slept_ms, 20000);
}

TEST_F(JobTest, StoppingAnEndedJobSaysSo) {
  shoal_.cluster.stop_reply = MakeJob("j", proto::JobInfo::SUCCEEDED);
  Ran ran = Job({"stop", "j"});
  EXPECT_EQ(ran.code, 0);
  EXPECT_EQ(ran.out, "Job j already ended (SUCCEEDED).\n");
}

TEST_F(JobTest, LogsPrintWhatThereIsWithoutFollowing) {
  shoal_.cluster.job_logs = {Logs("line\n", false), Logs("", false)};
  Ran ran = Job({"logs", "j"});
  EXPECT_EQ(ran.code, 0);
  EXPECT_EQ(ran.out, "line\n");
  EXPECT_EQ(shoal_.cluster.log_requests[0].wait_ms(), 0);
  EXPECT_THAT(shoal_.cluster.job_refs, IsEmpty());
}

TEST_F(JobTest, ListPrintsATable) {
  *shoal_.cluster.jobs.add_jobs() = MakeJob("job-1", proto::JobInfo::SUCCEEDED);
  Ran ran = Job({"list"});
  EXPECT_EQ(ran.code, 0);
  EXPECT_EQ(ran.out,
            "SUBMISSION ID            STATUS     NODE            DURATION  "
            "ENTRYPOINT\n"
            "job-1                    SUCCEEDED  n1                  2.5s  "
            "python3 train.py\n");
  shoal_.cluster.jobs.clear_jobs();
  EXPECT_EQ(Job({"list"}).out,
            "No jobs (shoal job submit -- CMD starts one).\n");
  *shoal_.cluster.jobs.add_jobs() = MakeJob("job-1", proto::JobInfo::SUCCEEDED);
  nlohmann::json j =
      nlohmann::json::parse(Job({"list", "--format", "json"}).out);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["driver_pid"], 0);
}

}  // namespace
}  // namespace shoal::cli::testing
