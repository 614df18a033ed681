#include "dashboard/formats.h"

#include <nlohmann/json.hpp>

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
