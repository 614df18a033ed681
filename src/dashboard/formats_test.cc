#include "dashboard/formats.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduling/resource_set.h"
#include "shoal/shoal.pb.h"

namespace shoal::dashboard {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

proto::JobInfo Job(const std::string& id, proto::JobInfo::State state,
                   int exit_code) {
  proto::JobInfo job;
  job.mutable_spec()->set_submission_id(id);
  job.mutable_spec()->set_entrypoint("python3 train.py");
  (*job.mutable_spec()->mutable_env())["STEPS"] = "10";
  job.set_state(state);
  job.set_exit_code(exit_code);
  job.set_start_time_ms(1000);
  if (state != proto::JobInfo::RUNNING) job.set_end_time_ms(2500);
  job.set_node_id("n1");
  return job;
}

TEST(JobJsonTest, HasRaysShape) {
  nlohmann::json running =
      nlohmann::json::parse(JobJson(Job("a", proto::JobInfo::RUNNING, 0)));
  EXPECT_EQ(running["type"], "SUBMISSION");
  EXPECT_EQ(running["submission_id"], "a");
  EXPECT_EQ(running["status"], "RUNNING");
  EXPECT_TRUE(running["end_time"].is_null());
  EXPECT_TRUE(running["driver_exit_code"].is_null());
  EXPECT_EQ(running["runtime_env"]["env_vars"]["STEPS"], "10");
  nlohmann::json failed =
      nlohmann::json::parse(JobJson(Job("b", proto::JobInfo::FAILED, 3)));
  EXPECT_EQ(failed["driver_exit_code"], 3);
  EXPECT_EQ(failed["end_time"], 2500);
  EXPECT_EQ(failed["error_type"], "JOB_ENTRYPOINT_COMMAND_ERROR");
  nlohmann::json stopped =
      nlohmann::json::parse(JobJson(Job("c", proto::JobInfo::STOPPED, 143)));
  EXPECT_TRUE(stopped["driver_exit_code"].is_null());
  proto::JobList list;
  *list.add_jobs() = Job("a", proto::JobInfo::RUNNING, 0);
  *list.add_jobs() = Job("b", proto::JobInfo::FAILED, 3);
  EXPECT_EQ(nlohmann::json::parse(JobListJson(list)).size(), 2u);
}

// A job as POST /api/jobs/ keeps it: everything the submitter said comes
// back in Ray's fields, and entrypoint_resources holds only the resources
// beyond entrypoint_num_cpus / _gpus / _memory.
TEST(JobJsonTest, ReturnsWhatTheSubmitterGave) {
  proto::JobSpec spec;
  std::string working_dir;
  ASSERT_TRUE(ParseJobSubmission(R"({
      "entrypoint": "python3 train.py", "submission_id": "s1",
      "metadata": {"owner": "ana", "team": "infra"},
      "runtime_env": {"env_vars": {"STEPS": "10"}, "working_dir": "/src"},
      "entrypoint_num_cpus": 1.5, "entrypoint_num_gpus": 0.5,
      "entrypoint_memory": 1000000, "entrypoint_resources": {"accel_x": 4}})",
                                 &spec, &working_dir)
                  .ok());
  EXPECT_EQ(working_dir, "/src");
  // The node must have the whole shape.
  EXPECT_EQ(
      ResourceSet::FromProto(spec.entrypoint_resources()).ToDoubles(),
      (std::map<std::string, double>{
          {"CPU", 1.5}, {"GPU", 0.5}, {"accel_x", 4}, {"memory", 1000000}}));
  proto::JobInfo job;
  *job.mutable_spec() = spec;
  job.set_state(proto::JobInfo::PENDING);
  nlohmann::json j = nlohmann::json::parse(JobJson(job));
  EXPECT_EQ(j["submission_id"], "s1");
  EXPECT_EQ(j["metadata"],
            (nlohmann::json{{"owner", "ana"}, {"team", "infra"}}));
  EXPECT_EQ(j["runtime_env"]["env_vars"]["STEPS"], "10");
  EXPECT_EQ(j["runtime_env"]["working_dir"], "/src");
  EXPECT_EQ(j["entrypoint_num_cpus"], 1.5);
  EXPECT_EQ(j["entrypoint_num_gpus"], 0.5);
  EXPECT_EQ(j["entrypoint_memory"], 1000000);
  EXPECT_EQ(j["entrypoint_resources"], (nlohmann::json{{"accel_x", 4.0}}));
  EXPECT_EQ(j["message"], "Job has not started yet.");
  EXPECT_TRUE(j["driver_node_id"].is_null());
  for (const char* field :
       {"job_id", "driver_info", "driver_agent_http_address", "error_type",
        "end_time", "driver_exit_code"}) {
    EXPECT_TRUE(j.contains(field) && j[field].is_null()) << field;
  }
  // Not given: null, as Ray answers.
  spec.Clear();
  ASSERT_TRUE(
      ParseJobSubmission(R"({"entrypoint": "true"})", &spec, &working_dir)
          .ok());
  *job.mutable_spec() = spec;
  j = nlohmann::json::parse(JobJson(job));
  for (const char* field : {"entrypoint_num_cpus", "entrypoint_num_gpus",
                            "entrypoint_memory", "entrypoint_resources"}) {
    EXPECT_TRUE(j[field].is_null()) << field << ": " << j[field];
  }
  EXPECT_EQ(j["metadata"], nlohmann::json::object());
}

// An entrypoint, message or environment value may hold any bytes.
TEST(JobJsonTest, AnyBytesMakeValidJson) {
  proto::JobInfo job = Job("bytes", proto::JobInfo::FAILED, 1);
  job.mutable_spec()->set_entrypoint("printf 'caf\xe9'");
  job.set_message("exit \xff");
  (*job.mutable_spec()->mutable_env())["NAME"] = "\xc3";
  nlohmann::json j = nlohmann::json::parse(JobJson(job));
  EXPECT_EQ(j["entrypoint"], "printf 'caf\xef\xbf\xbd'");
  EXPECT_EQ(j["message"], "exit \xef\xbf\xbd");
  EXPECT_EQ(j["runtime_env"]["env_vars"]["NAME"], "\xef\xbf\xbd");
  proto::JobList list;
  *list.add_jobs() = job;
  EXPECT_EQ(nlohmann::json::parse(JobListJson(list))[0]["entrypoint"],
            "printf 'caf\xef\xbf\xbd'");
}

TEST(ParseJobSubmissionTest, RefusesWhatRaysApiRefusesSayingWhy) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "\"entrypoint\" is required"},
      {"  \n", "\"entrypoint\" is required"},
      {"{}", "\"entrypoint\" is required"},
      {R"({"entrypoint": null})", "\"entrypoint\" is required"},
      {"not json", "must be a JSON object"},
      {"[1]", "must be a JSON object"},
      {R"({"entrypoint": 5})", "\"entrypoint\" must be a command line"},
      {R"({"entrypoint": ""})", "\"entrypoint\" must be a command line"},
      {R"({"entrypoint": "x", "submission_id": 7})",
       "\"submission_id\" must be a string"},
      {R"({"entrypoint": "x", "entrypoint_num_cpu": 1})",
       "unknown field \"entrypoint_num_cpu\""},
      {R"({"entrypoint": "x", "metadata": ["a"]})",
       "\"metadata\" must be an object of strings"},
      {R"({"entrypoint": "x", "metadata": {"n": 1}})",
       "\"metadata.n\" must be a string"},
      {R"({"entrypoint": "x", "runtime_env": "y"})",
       "\"runtime_env\" must be an object"},
      {R"({"entrypoint": "x", "runtime_env": {"pip": ["numpy"]}})",
       "runtime_env field \"pip\" is not supported"},
      {R"({"entrypoint": "x", "runtime_env": {"env_vars": {"A": 1}}})",
       "\"runtime_env.env_vars.A\" must be a string"},
      {R"({"entrypoint": "x", "runtime_env": {"working_dir": 3}})",
       "\"runtime_env.working_dir\" must be a folder"},
      {R"({"entrypoint": "x", "entrypoint_num_cpus": "2"})",
       "\"entrypoint_num_cpus\" must be a number of 0 or more"},
      {R"({"entrypoint": "x", "entrypoint_num_gpus": -1})",
       "\"entrypoint_num_gpus\" must be a number of 0 or more"},
      {R"({"entrypoint": "x", "entrypoint_memory": 1.5})",
       "\"entrypoint_memory\" must be a whole number of bytes"},
      {R"({"entrypoint": "x", "entrypoint_memory": -4})",
       "\"entrypoint_memory\" must be a whole number of bytes"},
      {R"({"entrypoint": "x", "entrypoint_resources": {"CPU": 1}})",
       "use entrypoint_num_cpus"},
      {R"({"entrypoint": "x", "entrypoint_resources": {"a": "4"}})",
       "\"entrypoint_resources.a\" must be a number"},
      {R"({"entrypoint": "x", "entrypoint_resources": {"a": 1.5}})",
       "resource \"a\" must be a whole number"},
  };
  for (const auto& [body, says] : cases) {
    proto::JobSpec spec;
    std::string working_dir;
    absl::Status status = ParseJobSubmission(body, &spec, &working_dir);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << body;
    EXPECT_THAT(status.message(), HasSubstr(says)) << body;
  }
  // Ray's deprecated job_id names the submission too; submission_id wins.
  proto::JobSpec spec;
  std::string working_dir;
  ASSERT_TRUE(ParseJobSubmission(R"({"entrypoint": "x", "job_id": "old"})",
                                 &spec, &working_dir)
                  .ok());
  EXPECT_EQ(spec.submission_id(), "old");
  ASSERT_TRUE(
      ParseJobSubmission(
          R"({"entrypoint": "x", "job_id": "old", "submission_id": "new",
                      "metadata": null, "runtime_env": null})",
          &spec, &working_dir)
          .ok());
  EXPECT_EQ(spec.submission_id(), "new");
}

TEST(JobLogQueryTest, IsBoundedWhateverItAsks) {
  using Params = std::multimap<std::string, std::string>;
  auto query = ParseJobLogQuery({}, "");
  ASSERT_TRUE(query.ok());
  EXPECT_EQ(query->offset, -1);
  EXPECT_EQ(query->limit, kDefaultJobLogBytes);
  EXPECT_FALSE(query->text);
  EXPECT_EQ(JobLogStart(*query, 100), 0);
  EXPECT_EQ(JobLogStart(*query, kDefaultJobLogBytes + 100), 100);

  query = ParseJobLogQuery(Params{{"offset", "7"}, {"limit", "3"}}, "");
  ASSERT_TRUE(query.ok());
  EXPECT_EQ(JobLogStart(*query, 100), 7);
  EXPECT_EQ(query->limit, 3);
  query = ParseJobLogQuery(Params{{"offset", "7"}}, "");
  EXPECT_EQ(query->limit, kDefaultJobLogBytes);
  query = ParseJobLogQuery(Params{{"tail", "10"}}, "");
  ASSERT_TRUE(query.ok());
  EXPECT_EQ(JobLogStart(*query, 100), 90);
  EXPECT_EQ(JobLogStart(*query, 4), 0);
  EXPECT_TRUE(ParseJobLogQuery(Params{{"format", "text"}}, "")->text);
  EXPECT_TRUE(ParseJobLogQuery({}, "text/plain")->text);
  EXPECT_FALSE(
      ParseJobLogQuery(Params{{"format", "json"}}, "text/plain")->text);

  const std::vector<std::pair<Params, std::string>> refused = {
      {{{"offset", "1"}, {"tail", "2"}}, "not both"},
      {{{"tail", "2"}, {"limit", "2"}}, "leave out &limit"},
      {{{"offset", "-1"}}, "?offset=-1 must be a whole number"},
      {{{"offset", "abc"}}, "?offset=abc must be a whole number"},
      {{{"limit", "99999999999"}}, "?limit=99999999999 must be"},
      {{{"tail", "1.5"}}, "?tail=1.5 must be"},
      {{{"format", "xml"}}, "?format=xml is not a format"},
  };
  for (const auto& [params, says] : refused) {
    auto refusal = ParseJobLogQuery(params, "");
    ASSERT_FALSE(refusal.ok()) << says;
    EXPECT_EQ(refusal.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(refusal.status().message(), HasSubstr(says));
  }
}

TEST(JobLogsJsonTest, AnyBytesAreJson) {
  const std::string bytes("caf\xe9 ok\n\0end", 12);
  nlohmann::json j = nlohmann::json::parse(JobLogsJson(bytes, 0, 12));
  EXPECT_EQ(j["logs"], std::string("caf\xef\xbf\xbd ok\n\0end", 14));
  EXPECT_EQ(j["offset"], 0);
  EXPECT_EQ(j["next_offset"], 12);
  EXPECT_EQ(j["size"], 12);
  EXPECT_EQ(j["truncated"], false);
  j = nlohmann::json::parse(JobLogsJson("ok", 5, 20));
  EXPECT_EQ(j["next_offset"], 7);
  EXPECT_EQ(j["truncated"], true);
}

TEST(ClusterMetricsTest, CountsEveryStateAndEscapesLabels) {
  proto::ClusterStatus status;
  proto::NodeInfo* node = status.add_nodes();
  node->set_node_id("node \"one\"\\x");
  node->set_alive(true);
  ResourceSet total = *ResourceSet::FromDoubles(
      {{"CPU", 4}, {"memory", 17081100288.0}, {"CPU_group_0_abc", 1}});
  ResourceSet free = *ResourceSet::FromDoubles({{"CPU", 1}});
  total.ToProto(node->mutable_total());
  free.ToProto(node->mutable_available());
  status.add_nodes()->set_node_id("gone");  // dead
  proto::ActorInfo* actor = status.add_actors();
  actor->set_state(proto::ActorInfo::ALIVE);
  status.add_leases()->set_node_id("node \"one\"\\x");
  proto::ResourceDemand* demand = status.add_demands();
  demand->set_count(5);
  demand->set_infeasible(true);
  proto::JobList jobs;
  *jobs.add_jobs() = Job("a", proto::JobInfo::SUCCEEDED, 0);

  std::string text = ClusterMetrics(status, jobs);
  EXPECT_THAT(text, HasSubstr("# TYPE shoal_nodes gauge\n"));
  EXPECT_THAT(text, HasSubstr("shoal_nodes{state=\"ALIVE\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("shoal_nodes{state=\"DEAD\"} 1\n"));
  const std::string node_label = R"(node_id="node \"one\"\\x")";
  EXPECT_THAT(text, HasSubstr("shoal_node_resource_capacity{" + node_label +
                              ",resource=\"CPU\"} 4\n"));
  EXPECT_THAT(text, HasSubstr("shoal_node_resource_used{" + node_label +
                              ",resource=\"CPU\"} 3\n"));
  // Byte counts in full, not rounded to 6 digits.
  EXPECT_THAT(text, HasSubstr("resource=\"memory\"} 17081100288\n"));
  // Bundle resources are the group's, not the node's.
  EXPECT_THAT(text, Not(HasSubstr("_group_")));
  EXPECT_THAT(text, HasSubstr("shoal_node_leases{" + node_label + "} 1\n"));
  EXPECT_THAT(text, HasSubstr("shoal_actors{state=\"ALIVE\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("shoal_actors{state=\"RESTARTING\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("shoal_placement_groups{state=\"PENDING\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("shoal_jobs{status=\"SUCCEEDED\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("shoal_jobs{status=\"FAILED\"} 0\n"));
  EXPECT_THAT(text,
              HasSubstr("shoal_pending_demands{infeasible=\"true\"} 5\n"));
}

TEST(ClusterMetricsTest, FamiliesComeInAFixedOrderWithTasksAndGangs) {
  proto::ClusterStatus status;
  proto::NodeInfo* node = status.add_nodes();
  node->set_node_id("n1");
  node->set_alive(true);
  proto::JobList jobs;
  proto::TaskList tasks;
  (*tasks.mutable_state_counts())["RUNNING"] = 2;
  (*tasks.mutable_state_counts())["FINISHED"] = 7;
  tasks.set_reporter_dropped(3);
  proto::GangList gangs;
  gangs.add_gangs()->set_state(proto::GangInfo::State(1));
  gangs.set_started_total(4);
  std::string text = ClusterMetrics(
      {.status = &status, .jobs = &jobs, .tasks = &tasks, .gangs = &gangs});
  std::vector<size_t> at;
  for (const char* family :
       {"shoal_nodes", "shoal_node_heartbeat_age_seconds",
        "shoal_node_resource_capacity", "shoal_node_resource_used",
        "shoal_node_leases", "shoal_actors", "shoal_placement_groups",
        "shoal_jobs", "shoal_pending_demands", "shoal_tasks",
        "shoal_tasks_ended_total", "shoal_task_records_dropped_total",
        "shoal_launch_gangs", "shoal_launch_gangs_started_total",
        "shoal_launch_gang_restarts_total"}) {
    size_t pos = text.find(absl::StrCat("# TYPE ", family, " "));
    ASSERT_NE(pos, std::string::npos) << family;
    at.push_back(pos);
  }
  EXPECT_TRUE(std::is_sorted(at.begin(), at.end()));
  EXPECT_THAT(text, HasSubstr("shoal_tasks{state=\"RUNNING\"} 2\n"));
  EXPECT_THAT(text,
              HasSubstr("shoal_tasks_ended_total{state=\"FINISHED\"} 7\n"));
  EXPECT_THAT(
      text,
      HasSubstr("shoal_task_records_dropped_total{where=\"reporter\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("shoal_launch_gangs_started_total 4\n"));
}

TEST(AgentMetricsTest, NamesTheNodeAndCountsEvictionsAsACounter) {
  proto::AgentInfo info;
  info.mutable_node()->set_node_id("n7");
  info.set_num_workers(3);
  info.mutable_object_store()->set_capacity(1 << 30);
  info.mutable_object_store()->set_evictions(12);
  std::string text = AgentMetrics(info);
  EXPECT_THAT(text,
              HasSubstr("shoal_agent_worker_processes{node_id=\"n7\"} 3"));
  EXPECT_THAT(text,
              HasSubstr("shoal_object_store_capacity_bytes{node_id=\"n7\"} "
                        "1073741824"));
  EXPECT_THAT(text, HasSubstr("# TYPE shoal_object_store_evictions_total "
                              "counter\n"));
}

}  // namespace
}  // namespace shoal::dashboard
