#include "presentation/status_format.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "scheduling/resource_set.h"
#include "shoal/shoal.pb.h"

namespace shoal::internal {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kGiB = int64_t{1} << 30;

void SetResources(const std::map<std::string, double>& amounts,
                  proto::ResourceMap* out) {
  absl::StatusOr<ResourceSet> set = ResourceSet::FromDoubles(amounts);
  ASSERT_TRUE(set.ok()) << set.status();
  set->ToProto(out);
}

proto::NodeInfo* AddNode(proto::ClusterStatus* status, const std::string& id,
                         const std::string& address, bool alive, bool is_head) {
  proto::NodeInfo* node = status->add_nodes();
  node->set_node_id(id);
  node->set_address(address);
  node->set_hostname("host-" + id);
  node->set_alive(alive);
  node->set_is_head_node(is_head);
  return node;
}

// Head n1 and worker n2 alive, n3 dead; 4 CPUs of which 1 is in use, 4 idle
// accel_x, memory and object store memory, one pending and one infeasible
// demand. The dead node's resources are large enough to show if they leaked
// into the totals.
proto::ClusterStatus MakeStatus() {
  proto::ClusterStatus status;
  status.set_head_address("10.0.0.1:6379");

  proto::NodeInfo* head = AddNode(&status, "n1", "10.0.0.1:40001",
                                  /*alive=*/true, /*is_head=*/true);
  SetResources(
      {{"CPU", 2}, {"memory", 8.0 * kGiB}, {"object_store_memory", 2.0 * kGiB}},
      head->mutable_total());
  SetResources(
      {{"CPU", 1}, {"memory", 8.0 * kGiB}, {"object_store_memory", 2.0 * kGiB}},
      head->mutable_available());
  (*head->mutable_labels())["zone"] = "us-east-1a";

  proto::NodeInfo* worker = AddNode(&status, "n2", "10.0.0.2:40002",
                                    /*alive=*/true, /*is_head=*/false);
  SetResources({{"CPU", 2},
                {"accel_x", 4},
                {"memory", 8.0 * kGiB},
                {"object_store_memory", 2.0 * kGiB}},
               worker->mutable_total());
  SetResources({{"CPU", 2},
                {"accel_x", 4},
                {"memory", 8.0 * kGiB},
                {"object_store_memory", 2.0 * kGiB}},
               worker->mutable_available());
  (*worker->mutable_labels())["accelerator"] = "accel_x-v1";

  proto::NodeInfo* dead = AddNode(&status, "n3", "10.0.0.3:40003",
                                  /*alive=*/false, /*is_head=*/false);
  dead->set_death_reason("missed 5 heartbeats");
  SetResources({{"CPU", 64}, {"accel_x", 8}}, dead->mutable_total());
  SetResources({{"CPU", 32}}, dead->mutable_available());

  proto::ResourceDemand* pending = status.add_demands();
  SetResources({{"CPU", 1}}, pending->mutable_shape());
  pending->set_count(3);
  proto::ResourceDemand* infeasible = status.add_demands();
  SetResources({{"accel_x", 8}}, infeasible->mutable_shape());
  infeasible->set_count(1);
  infeasible->set_infeasible(true);
  return status;
}

// The lines of `text` from `start` to the next blank line, each with its
// newline.
std::string Section(const std::string& text, const std::string& start) {
  size_t begin = text.find(start);
  if (begin == std::string::npos) return "";
  size_t end = text.find("\n\n", begin);
  return text.substr(
      begin, end == std::string::npos ? std::string::npos : end + 1 - begin);
}

TEST(FormatStatusTextTest, ListsNodesByState) {
  const std::string text = FormatStatusText(MakeStatus(), /*verbose=*/false);
  EXPECT_THAT(text, HasSubstr("Head: 10.0.0.1:6379"));
  EXPECT_THAT(text, HasSubstr("Node status"));

  const std::string nodes = Section(text, "Node status");
  size_t active = nodes.find("Active:");
  size_t dead = nodes.find("Dead:");
  ASSERT_NE(active, std::string::npos) << text;
  ASSERT_NE(dead, std::string::npos) << text;
  ASSERT_LT(active, dead);
  const std::string active_part = nodes.substr(active, dead - active);
  const std::string dead_part = nodes.substr(dead);

  EXPECT_THAT(active_part, HasSubstr(" n1  10.0.0.1:40001  ALIVE  (head)\n"));
  EXPECT_THAT(active_part, HasSubstr(" n2  10.0.0.2:40002  ALIVE\n"));
  EXPECT_THAT(active_part, Not(HasSubstr("n3")));
  EXPECT_THAT(dead_part,
              HasSubstr(" n3  10.0.0.3:40003  DEAD  missed 5 heartbeats\n"));
  EXPECT_THAT(dead_part, Not(HasSubstr("n1")));
}

TEST(FormatStatusTextTest, ALargeClusterIsSummarizedUnlessVerbose) {
  proto::ClusterStatus status;
  status.set_head_address("10.0.0.1:6379");
  for (int i = 0; i < 120; ++i) {
    proto::NodeInfo* n = AddNode(&status, absl::StrCat("n", i),
                                 absl::StrCat("10.0.0.", i, ":4000"),
                                 /*alive=*/i < 110, /*is_head=*/i == 0);
    if (i >= 110) n->set_death_reason("missed 5 heartbeats");
    // Memory differs from host to host: it is no part of a shape.
    if (i < 100) {
      SetResources({{"CPU", 8}, {"TPU", 4}, {"memory", 1e9 + i}},
                   n->mutable_total());
    } else {
      SetResources({{"CPU", 2}, {"memory", 1e9 + i}}, n->mutable_total());
    }
  }
  const std::string nodes =
      Section(FormatStatusText(status, /*verbose=*/false), "Node status");
  EXPECT_THAT(nodes, HasSubstr("Active: 110 nodes\n"));
  EXPECT_THAT(nodes, HasSubstr(" head node: n0  10.0.0.0:4000\n"));
  EXPECT_THAT(nodes, HasSubstr("  100 x {CPU: 8.0, TPU: 4.0}\n")) << nodes;
  EXPECT_THAT(nodes, HasSubstr("  10 x {CPU: 2.0}\n")) << nodes;
  EXPECT_THAT(nodes, HasSubstr("Dead: 10 nodes\n"));
  EXPECT_THAT(nodes, HasSubstr(" n119  10.0.0.119:4000  DEAD  missed 5 "
                               "heartbeats\n"));
  EXPECT_THAT(nodes, Not(HasSubstr(" n114 ")));
  EXPECT_THAT(nodes, HasSubstr(" (and 5 more)\n"));
  EXPECT_THAT(nodes, HasSubstr("--verbose"));
  EXPECT_THAT(nodes, Not(HasSubstr(" n57 ")));
  // --verbose lists every one.
  const std::string all =
      Section(FormatStatusText(status, /*verbose=*/true), "Node status");
  EXPECT_THAT(all, HasSubstr(" n57  10.0.0.57:4000  ALIVE\n"));
}

TEST(FormatStatusTextTest, UsageCountsAliveNodesOnlyWithMemoryLast) {
  const std::string text = FormatStatusText(MakeStatus(), /*verbose=*/false);
  const std::string usage = Section(text, "Usage:");
  ASSERT_FALSE(usage.empty()) << text;

  // The dead node's 64 CPUs and 8 accel_x do not count.
  const std::vector<std::string> lines = {
      " 1.0/4.0 CPU\n",
      " 0.0/4.0 accel_x\n",
      " 0B/16.00GiB memory\n",
      " 0B/4.00GiB object_store_memory\n",
  };
  size_t previous = 0;
  for (const std::string& line : lines) {
    size_t at = usage.find(line);
    ASSERT_NE(at, std::string::npos) << "no line \"" << line << "\" in\n"
                                     << usage;
    EXPECT_GE(at, previous) << "\"" << line << "\" out of order in\n" << usage;
    previous = at;
  }
  EXPECT_THAT(usage, Not(HasSubstr("64")));
  EXPECT_THAT(usage, Not(HasSubstr("/12.0 accel_x")));
}

TEST(FormatStatusTextTest, ListsPendingAndInfeasibleDemands) {
  const std::string text = FormatStatusText(MakeStatus(), /*verbose=*/false);
  const std::string demands = Section(text, "Demands:");
  ASSERT_FALSE(demands.empty()) << text;
  EXPECT_THAT(demands, HasSubstr(" {CPU: 1.0}: 3+ pending tasks\n"));
  EXPECT_THAT(demands, HasSubstr(" {accel_x: 8.0}: 1+ infeasible"));
  EXPECT_THAT(demands, Not(HasSubstr("{CPU: 1.0}: 3+ infeasible")));
}

TEST(FormatStatusTextTest, SaysSoWhenThereIsNothingToList) {
  proto::ClusterStatus status;
  status.set_head_address("10.0.0.1:6379");
  const std::string text = FormatStatusText(status, /*verbose=*/false);
  EXPECT_THAT(text, HasSubstr("Active:\n (no active nodes)\n"));
  EXPECT_THAT(text, HasSubstr("Dead:\n (no dead nodes)\n"));
  EXPECT_THAT(text, HasSubstr("Demands:\n (no resource demands)\n"));
}

TEST(FormatStatusTextTest, VerboseAddsPerNodeResourcesAndLabels) {
  const proto::ClusterStatus status = MakeStatus();
  const std::string terse = FormatStatusText(status, /*verbose=*/false);
  const std::string verbose = FormatStatusText(status, /*verbose=*/true);

  for (const std::string& extra : {
           std::string("    host: host-n1\n"),
           std::string("    host: host-n2\n"),
           std::string("    label zone=us-east-1a\n"),
           std::string("    label accelerator=accel_x-v1\n"),
           std::string("    1.0/2.0 CPU\n"),  // n1
           std::string("    0.0/2.0 CPU\n"),  // n2
           std::string("    0.0/4.0 accel_x\n"),
           std::string("    0B/8.00GiB memory\n"),
           std::string("    32.0/64.0 CPU\n"),  // n3, listed under Dead:
       }) {
    EXPECT_THAT(verbose, HasSubstr(extra));
    EXPECT_THAT(terse, Not(HasSubstr(extra)));
  }
  // The per-node lines sit under their node.
  const std::string verbose_nodes = Section(verbose, "Node status");
  EXPECT_LT(verbose_nodes.find(" n1 "), verbose_nodes.find("label zone="));
  EXPECT_LT(verbose_nodes.find("label zone="), verbose_nodes.find(" n2 "));
  // Totals are unchanged by --verbose.
  EXPECT_THAT(Section(verbose, "Usage:"), HasSubstr(" 1.0/4.0 CPU\n"));
}

// A group of two bundles on n1 and n2 (one task running in bundle 0), and
// the bundle resources its reservation adds to the nodes.
proto::ClusterStatus StatusWithGroup() {
  proto::ClusterStatus status = MakeStatus();
  SetResources({{"CPU", 2}, {"CPU_group_0_pg1", 1}, {"CPU_group_pg1", 1}},
               status.mutable_nodes(0)->mutable_total());
  SetResources({{"CPU", 0.5}, {"CPU_group_pg1", 1}},
               status.mutable_nodes(0)->mutable_available());
  proto::PlacementGroupInfo* pg = status.add_placement_groups();
  pg->set_pg_id("pg1");
  pg->mutable_spec()->set_name("trainers");
  SetResources({{"CPU", 1}}, pg->mutable_spec()->add_bundles());
  SetResources({{"CPU", 1}}, pg->mutable_spec()->add_bundles());
  pg->set_state(proto::PlacementGroupInfo::CREATED);
  pg->add_bundle_nodes("n1");
  pg->add_bundle_nodes("n2");
  pg->set_job_id("job3");
  proto::ResourceDemand* queued = status.add_demands();
  SetResources({{"CPU_group_1_pg1", 1}}, queued->mutable_shape());
  queued->set_count(2);
  return status;
}

TEST(FormatStatusTextTest, PlacementGroupsAreListedNotTheirResources) {
  const proto::ClusterStatus status = StatusWithGroup();
  const std::string text = FormatStatusText(status, /*verbose=*/false);
  EXPECT_THAT(text, Not(HasSubstr("_group_")));
  EXPECT_THAT(Section(text, "Placement groups:"),
              HasSubstr(" pg1 \"trainers\"  CREATED  2 bundles  job3\n"));
  EXPECT_THAT(Section(text, "Demands:"),
              HasSubstr("{CPU: 1.0} in bundle 1 of placement group pg1: 2+"));
  const std::string verbose = FormatStatusText(status, /*verbose=*/true);
  EXPECT_THAT(verbose, Not(HasSubstr("_group_")));
  EXPECT_THAT(verbose,
              HasSubstr("    bundle 0: {CPU: 1.0} on n1, 1.0/1.0 CPU used\n"));
  const std::string json = FormatStatusJson(status);
  nlohmann::json j = nlohmann::json::parse(json);
  EXPECT_EQ(j["usage"].count("CPU_group_pg1"), 0u);
  EXPECT_EQ(j["placement_groups"][0]["id"], "pg1");
  EXPECT_EQ(j["placement_groups"][0]["job_id"], "job3");
  EXPECT_EQ(j["placement_groups"][0]["state"], "CREATED");
}

TEST(FormatStatusTextTest, AGroupThatWaitsIsADemandWithItsAge) {
  proto::ClusterStatus status;
  proto::PlacementGroupInfo* pg = status.add_placement_groups();
  pg->set_pg_id("pg2");
  SetResources({{"CPU", 1}, {"TPU", 4}}, pg->mutable_spec()->add_bundles());
  SetResources({{"CPU", 1}, {"TPU", 4}}, pg->mutable_spec()->add_bundles());
  pg->set_state(proto::PlacementGroupInfo::PENDING);
  pg->set_job_id("job7");
  pg->set_age_ms(3200);
  EXPECT_EQ(Section(FormatStatusText(status, /*verbose=*/false), "Demands:"),
            "Demands:\n {CPU: 1.0, TPU: 4.0}, {CPU: 1.0, TPU: 4.0} (placement "
            "group pg2 of job7): waiting for 3.2 s\n");
}

TEST(FormatStatusTextTest, LeasesAreCountedAndListedWhenVerbose) {
  proto::ClusterStatus status = StatusWithGroup();
  proto::LeaseInfo* lease = status.add_leases();
  lease->set_lease_id("l1");
  lease->set_node_id("n1");
  lease->set_job_id("job3");
  lease->set_worker_id("w1");
  lease->set_worker_pid(4242);
  SetResources({{"CPU_group_0_pg1", 1}}, lease->mutable_shape());
  lease->set_age_ms(12300);
  lease->set_owner("10.0.0.9:5000");
  EXPECT_THAT(Section(FormatStatusText(status, /*verbose=*/false), "Leases:"),
              HasSubstr(" 1 held by job3 (`shoal status --verbose`"));
  EXPECT_THAT(
      Section(FormatStatusText(status, /*verbose=*/true), "Leases:"),
      HasSubstr(" l1 on n1  job3  worker w1 (pid 4242)  {CPU: 1.0} in bundle 0 "
                "of placement group pg1  for 12.3 s  from 10.0.0.9:5000\n"));
  nlohmann::json j = nlohmann::json::parse(FormatStatusJson(status));
  EXPECT_EQ(j["leases"][0]["worker_pid"], 4242);
  EXPECT_EQ(j["leases"][0]["job_id"], "job3");
  EXPECT_EQ(DescribeHolders(status),
            "placement group pg1 \"trainers\" of job3; 1 lease of job3 on n1 "
            "({CPU: 1.0} in bundle 0 of placement group pg1, the oldest for "
            "12.3 s)");
  EXPECT_EQ(DescribeHolders(proto::ClusterStatus()), "");
}

proto::ActorInfo* AddActor(proto::ClusterStatus* status, const std::string& id,
                           const std::string& name,
                           proto::ActorInfo::State state) {
  proto::ActorInfo* a = status->add_actors();
  a->mutable_spec()->set_actor_id(id);
  a->mutable_spec()->set_name(name);
  a->mutable_spec()->set_class_name("Counter");
  a->mutable_spec()->set_job_id("job1");
  a->mutable_spec()->set_max_restarts(2);
  a->set_state(state);
  return a;
}

// Two alive actors (one named, one detached), one pending, one restarting,
// one dead; a lease holding the named one and a blocked lease.
proto::ClusterStatus StatusWithActors() {
  proto::ClusterStatus status = MakeStatus();
  proto::ActorInfo* counter =
      AddActor(&status, "a1", "counter", proto::ActorInfo::ALIVE);
  counter->set_node_id("n1");
  counter->set_pid(77);
  proto::ActorInfo* service =
      AddActor(&status, "a2", "service", proto::ActorInfo::ALIVE);
  service->mutable_spec()->set_detached(true);
  service->mutable_spec()->set_max_restarts(-1);
  service->set_num_restarts(4);
  service->set_node_id("n2");
  AddActor(&status, "a3", "", proto::ActorInfo::PENDING);
  proto::ActorInfo* restarting =
      AddActor(&status, "a4", "", proto::ActorInfo::RESTARTING);
  restarting->set_num_restarts(1);
  restarting->set_death_cause("killed by signal 9 (Killed)");
  proto::ActorInfo* dead = AddActor(&status, "a5", "", proto::ActorInfo::DEAD);
  dead->set_num_restarts(2);
  dead->set_node_id("n2");
  dead->set_death_cause(
      "its process died (killed by signal 9 (Killed)) and its restarts are "
      "used up (max_restarts=2)");

  proto::LeaseInfo* held = status.add_leases();
  held->set_lease_id("l1");
  held->set_node_id("n1");
  held->set_job_id("job1");
  held->set_worker_id("w1");
  held->set_actor_id("a1");
  proto::LeaseInfo* blocked = status.add_leases();
  blocked->set_lease_id("l2");
  blocked->set_node_id("n2");
  blocked->set_job_id("job1");
  blocked->set_worker_id("w2");
  blocked->set_blocked(true);
  SetResources({{"CPU", 1}}, blocked->mutable_shape());
  return status;
}

TEST(FormatStatusTextTest, ActorsAreCountedByState) {
  const std::string text =
      FormatStatusText(StatusWithActors(), /*verbose=*/false);
  EXPECT_THAT(
      text,
      HasSubstr("\nActors: 2 alive, 1 pending, 1 restarting, 1 dead\n\n"));
  EXPECT_THAT(text, Not(HasSubstr("\"counter\"")));
  // No actors: no line.
  EXPECT_THAT(FormatStatusText(MakeStatus(), /*verbose=*/false),
              Not(HasSubstr("Actors")));
  proto::ClusterStatus one_dead;
  AddActor(&one_dead, "a1", "", proto::ActorInfo::DEAD);
  EXPECT_THAT(FormatStatusText(one_dead, /*verbose=*/false),
              HasSubstr("\nActors: 1 dead\n"));
}

TEST(FormatStatusTextTest, VerboseListsActorsLiveOnesFirst) {
  const std::string actors = Section(
      FormatStatusText(StatusWithActors(), /*verbose=*/true), "Actors:");
  EXPECT_EQ(
      actors,
      "Actors: 2 alive, 1 pending, 1 restarting, 1 dead\n"
      " \"counter\" (a1)  Counter  ALIVE  on n1 (pid 77)  restarts 0/2  job1\n"
      " \"service\" (a2)  Counter  ALIVE  on n2  restarts 4 (no limit)  job1 "
      "(detached)\n"
      " a3  Counter  PENDING  restarts 0/2  job1\n"
      " a4  Counter  RESTARTING  restarts 1/2  job1: killed by signal 9 "
      "(Killed)\n"
      " a5  Counter  DEAD  on n2  restarts 2/2  job1: its process died (killed "
      "by signal 9 (Killed)) and its restarts are used up (max_restarts=2)\n");
}

TEST(FormatStatusTextTest, VerboseListsOnlyTheYoungestDeadActors) {
  proto::ClusterStatus status;
  for (int i = 0; i < 25; ++i) {
    AddActor(&status, "d" + std::to_string(i), "", proto::ActorInfo::DEAD)
        ->set_age_ms(i * 1000);
  }
  const std::string actors =
      Section(FormatStatusText(status, /*verbose=*/true), "Actors:");
  EXPECT_THAT(actors, HasSubstr(" d19  Counter  DEAD"));
  EXPECT_THAT(actors, Not(HasSubstr(" d20  ")));
  EXPECT_THAT(actors, HasSubstr(" ... and 5 older dead actors"));
}

TEST(FormatStatusTextTest, LeasesSayWhichActorTheyHoldAndWhetherBlocked) {
  const proto::ClusterStatus status = StatusWithActors();
  const std::string verbose =
      Section(FormatStatusText(status, /*verbose=*/true), "Leases:");
  EXPECT_THAT(verbose,
              HasSubstr(" l1 on n1  job1  worker w1  actor \"counter\"  {}"));
  EXPECT_THAT(verbose, HasSubstr(" l2 on n2  job1  worker w2  {CPU: 1.0}  for "
                                 "0.0 s  blocked in Get (CPU lent back)\n"));
  const std::string terse =
      Section(FormatStatusText(status, /*verbose=*/false), "Leases:");
  EXPECT_THAT(terse, HasSubstr(" 2 held by job1 (`shoal status --verbose`"));
  EXPECT_THAT(terse, HasSubstr(" of which 1 holds an actor, 1 blocked in Get "
                               "(CPU lent back)\n"));
  EXPECT_THAT(
      Section(FormatStatusText(MakeStatus(), /*verbose=*/false), "Leases:"),
      Not(HasSubstr("of which")));
}

TEST(FormatStatusJsonTest, ListsActorsAndWhatLeasesHold) {
  nlohmann::json j =
      nlohmann::json::parse(FormatStatusJson(StatusWithActors()));
  ASSERT_EQ(j["actors"].size(), 5u);
  EXPECT_EQ(j["actors"][0]["id"], "a1");
  EXPECT_EQ(j["actors"][0]["name"], "counter");
  EXPECT_EQ(j["actors"][0]["state"], "ALIVE");
  EXPECT_EQ(j["actors"][0]["pid"], 77);
  EXPECT_EQ(j["actors"][1]["detached"], true);
  EXPECT_EQ(j["actors"][4]["state"], "DEAD");
  EXPECT_THAT(j["actors"][4]["death_cause"].get<std::string>(),
              HasSubstr("restarts are used up"));
  EXPECT_EQ(j["leases"][0]["actor_id"], "a1");
  EXPECT_EQ(j["leases"][1]["blocked"], true);
  EXPECT_TRUE(
      nlohmann::json::parse(FormatStatusJson(proto::ClusterStatus()))["actors"]
          .empty());
}

TEST(FormatStatusJsonTest, HasNodesUsageAndDemands) {
  const std::string text = FormatStatusJson(MakeStatus());
  nlohmann::json j = nlohmann::json::parse(text, nullptr,
                                           /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << text;

  EXPECT_EQ(j["head_address"], "10.0.0.1:6379");
  ASSERT_TRUE(j["nodes"].is_array());
  ASSERT_EQ(j["nodes"].size(), 3u);
  std::map<std::string, std::string> states;
  for (const auto& node : j["nodes"]) {
    states[node["node_id"].get<std::string>()] =
        node["state"].get<std::string>();
  }
  EXPECT_EQ(states, (std::map<std::string, std::string>{
                        {"n1", "ALIVE"}, {"n2", "ALIVE"}, {"n3", "DEAD"}}));
  EXPECT_EQ(j["nodes"][0]["is_head_node"], true);
  EXPECT_EQ(j["nodes"][0]["labels"]["zone"], "us-east-1a");
  EXPECT_EQ(j["nodes"][1]["total"]["accel_x"], 4.0);
  EXPECT_EQ(j["nodes"][2]["death_reason"], "missed 5 heartbeats");
  EXPECT_FALSE(j["nodes"][0].contains("death_reason"));

  // Alive nodes only.
  const nlohmann::json& usage = j["usage"];
  EXPECT_EQ(usage["CPU"]["used"], 1.0);
  EXPECT_EQ(usage["CPU"]["total"], 4.0);
  EXPECT_EQ(usage["accel_x"]["used"], 0.0);
  EXPECT_EQ(usage["accel_x"]["total"], 4.0);
  EXPECT_EQ(usage["memory"]["total"], 16.0 * kGiB);
  EXPECT_EQ(usage["object_store_memory"]["used"], 0.0);

  ASSERT_TRUE(j["demands"].is_array());
  ASSERT_EQ(j["demands"].size(), 2u);
  EXPECT_EQ(j["demands"][0]["shape"]["CPU"], 1.0);
  EXPECT_EQ(j["demands"][0]["count"], 3);
  EXPECT_EQ(j["demands"][0]["infeasible"], false);
  EXPECT_EQ(j["demands"][1]["shape"]["accel_x"], 8.0);
  EXPECT_EQ(j["demands"][1]["infeasible"], true);
}

TEST(FormatStatusJsonTest, FullyUsedResourcesShowAsZeroAvailable) {
  proto::ClusterStatus status;
  proto::NodeInfo* node = AddNode(&status, "n1", "10.0.0.1:40001",
                                  /*alive=*/true, /*is_head=*/true);
  SetResources({{"CPU", 2}, {"accel_x", 4}, {"memory", 8.0 * kGiB}},
               node->mutable_total());
  // Every CPU and accel_x in use: the node reports no entry for them.
  SetResources({{"memory", 8.0 * kGiB}}, node->mutable_available());

  nlohmann::json j = nlohmann::json::parse(FormatStatusJson(status), nullptr,
                                           /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded());
  const nlohmann::json& available = j["nodes"][0]["available"];
  ASSERT_TRUE(available.contains("CPU")) << available.dump();
  EXPECT_EQ(available["CPU"], 0.0);
  ASSERT_TRUE(available.contains("accel_x")) << available.dump();
  EXPECT_EQ(available["accel_x"], 0.0);
  EXPECT_EQ(available["memory"], 8.0 * kGiB);
  for (const auto& [name, amount] : j["nodes"][0]["total"].items()) {
    EXPECT_TRUE(available.contains(name)) << name;
  }
  EXPECT_EQ(j["usage"]["CPU"]["used"], 2.0);
  EXPECT_EQ(j["usage"]["accel_x"]["used"], 4.0);
}

TEST(FormatStatusJsonTest, EmptyClusterHasEmptyCollections) {
  nlohmann::json j =
      nlohmann::json::parse(FormatStatusJson(proto::ClusterStatus()), nullptr,
                            /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_TRUE(j["nodes"].is_array());
  EXPECT_TRUE(j["nodes"].empty());
  EXPECT_TRUE(j["usage"].is_object());
  EXPECT_TRUE(j["usage"].empty());
  EXPECT_TRUE(j["demands"].is_array());
  EXPECT_TRUE(j["demands"].empty());
}

}  // namespace
}  // namespace shoal::internal
