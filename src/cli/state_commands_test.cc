#include "cli/state_commands.h"

#include <string>

#include "cli/cli_fakes.h"
#include "cli/exit_status.h"
#include "cli/logs_command.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace shoal::cli::testing {
namespace {

using ::testing::HasSubstr;

class StateTest : public CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    proto::ClusterStatus status;
    for (const char* id : {"n1", "n2"}) {
      proto::NodeInfo* n = status.add_nodes();
      n->set_node_id(id);
      n->set_address(std::string(id) + ":1");
      n->set_alive(std::string(id) == "n1");
      n->set_is_head_node(std::string(id) == "n1");
    }
    proto::ActorInfo* a = status.add_actors();
    a->mutable_spec()->set_actor_id("a1");
    a->mutable_spec()->set_name("counter");
    a->set_state(proto::ActorInfo::ALIVE);
    a->set_worker_id("w7");
    a->set_node_id("n1");
    shoal_.cluster.status = status;
  }
  Ran Command(std::vector<std::string> args) {
    args.insert(args.end(), {"--address", "10.0.0.1:6379", "--token", "tok"});
    return shoal_.Run(args);
  }
  Shoal shoal_;
};

TEST_F(StateTest, ListsNodesAsATable) {
  Ran ran = Command({"list", "nodes"});
  EXPECT_EQ(ran.code, 0) << ran.err;
  EXPECT_THAT(ran.out, HasSubstr("NODE_ID  ADDRESS  STATE  HEAD"));
  EXPECT_THAT(ran.out, HasSubstr("n1       n1:1     ALIVE  yes"));
  EXPECT_THAT(ran.out, HasSubstr("n2       n2:1     DEAD   no"));
}

TEST_F(StateTest, FiltersAndLimitsRows) {
  Ran ran =
      Command({"list", "nodes", "--filter", "state=DEAD", "--format", "json"});
  ASSERT_EQ(ran.code, 0) << ran.err;
  nlohmann::json j = nlohmann::json::parse(ran.out);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["node_id"], "n2");

  Ran limited = Command({"list", "nodes", "--limit", "1"});
  EXPECT_THAT(limited.out, HasSubstr("(1 of 2; --limit N shows more)"));

  Ran none = Command({"list", "nodes", "--filter", "state=GONE"});
  EXPECT_EQ(none.out, "No nodes match.\n");
}

TEST_F(StateTest, AFilterOnAKeyTheRowsLackIsAUsageError) {
  Ran ran = Command({"list", "nodes", "--filter", "colour=red"});
  EXPECT_EQ(ran.code, 2);
  EXPECT_THAT(ran.err,
              HasSubstr("shoal: --filter: nodes have no key \"colour\" (they "
                        "have node_id, address"));
}

TEST_F(StateTest, AFilterTheHeadRefusesIsAUsageErrorOtherErrorsFail) {
  // (ListTasks is filtered by the head.)
  Ran ran = Command({"list", "tasks"});
  EXPECT_EQ(ran.code, 0);
  ASSERT_EQ(shoal_.cluster.task_requests.size(), 1u);
  EXPECT_EQ(shoal_.cluster.task_requests[0].limit(), 100);
  EXPECT_EQ(StateError("list tasks", absl::InvalidArgumentError("bad key")),
            UsageError("bad key"));
  absl::Status failed = StateError("list tasks", absl::UnavailableError("x"));
  EXPECT_EQ(failed.message(), "cannot list tasks: x");
  EXPECT_FALSE(IsUsageError(failed));
}

TEST_F(StateTest, SummarizesTasks) {
  proto::TaskSummary* s = shoal_.cluster.tasks.add_summary();
  s->set_name("train");
  s->set_type("NORMAL_TASK");
  (*s->mutable_state_counts())["FINISHED"] = 3;
  shoal_.cluster.tasks.set_total(3);
  Ran ran = Command({"summary", "tasks"});
  EXPECT_EQ(ran.code, 0);
  EXPECT_THAT(ran.out, HasSubstr("Tasks: 3\n"));
  EXPECT_THAT(ran.out, HasSubstr("train  NORMAL_TASK  FINISHED: 3"));
  EXPECT_TRUE(shoal_.cluster.task_requests[0].summary());
}

TEST_F(StateTest, LogsOfAnActorAreItsWorkersLog) {
  proto::LogFile* f = shoal_.cluster.logs.add_files();
  f->set_node_id("n1");
  f->set_name("worker-w7.log");
  shoal_.cluster.chunk.set_data("one\ntwo\nthree\n");
  shoal_.cluster.chunk.set_next_offset(14);
  shoal_.cluster.chunk.set_size(14);
  Ran ran = Command({"logs", "actor", "counter", "--tail", "2"});
  EXPECT_EQ(ran.code, 0) << ran.err;
  EXPECT_EQ(ran.out, "two\nthree\n");
  ASSERT_EQ(shoal_.cluster.read_requests.size(), 1u);
  EXPECT_EQ(shoal_.cluster.read_requests[0].node_id(), "n1");
  EXPECT_EQ(shoal_.cluster.read_requests[0].name(), "worker-w7.log");
}

TEST_F(StateTest, LogsSayWhatIsMissing) {
  Ran no_id = Command({"logs", "worker"});
  EXPECT_EQ(no_id.code, 2);
  EXPECT_EQ(no_id.err,
            "shoal: shoal logs worker needs the worker's id: shoal logs "
            "worker ID\n");
  Ran no_actor = Command({"logs", "actor", "nobody"});
  EXPECT_EQ(no_actor.code, 1);
  EXPECT_EQ(no_actor.err,
            "shoal: no actor nobody (`shoal list actors` shows them)\n");
  Ran no_log = Command({"logs", "mystery.log"});
  EXPECT_EQ(no_log.code, 1);
  EXPECT_THAT(no_log.err, HasSubstr("cannot find the log: no node has a log "
                                    "named mystery.log"));
  for (const char* node : {"n1", "n2"}) {
    proto::LogFile* f = shoal_.cluster.logs.add_files();
    f->set_node_id(node);
    f->set_name("shared.log");
  }
  Ran two = Command({"logs", "shared.log"});
  EXPECT_EQ(two.code, 2);
  EXPECT_THAT(two.err, HasSubstr("shared.log is on nodes n1, n2: say which "
                                 "with --node-id"));
}

TEST_F(StateTest, LogsOfAGangListItsRanks) {
  proto::GangInfo* g = shoal_.cluster.gangs.add_gangs();
  g->set_gang_id("g1");
  proto::GangRank* r = g->add_ranks();
  r->set_rank(0);
  r->set_node_id("n1");
  r->set_log_name("gang-g1-0.log");
  Ran ranks = Command({"logs", "gang", "g1"});
  EXPECT_EQ(ranks.code, 0);
  EXPECT_THAT(ranks.out, HasSubstr("gang-g1-0.log"));
  EXPECT_THAT(ranks.out, HasSubstr("(shoal logs gang g1 RANK prints one)"));
  Ran bad_rank = Command({"logs", "gang", "g1", "5"});
  EXPECT_EQ(bad_rank.code, 2);
  EXPECT_EQ(bad_rank.err, "shoal: gang g1 has no rank 5 (1 ranks)\n");
}

}  // namespace
}  // namespace shoal::cli::testing
