// The cluster's state from the CLI on a real two-node cluster: task records
// that drivers and workers report (states, errors, a long task seen
// RUNNING by its worker, filters, limits, the summary), objects in the
// nodes' stores, every kind of log by id (and followed), and launch gangs
// with their ranks, restarts and per-rank logs.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shoal/api.h"
#include "shoal/init.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::testing::ClusterSpec;
using ::shoal::testing::FinishCli;
using ::shoal::testing::RunCli;
using ::shoal::testing::StartCli;
using ::shoal::testing::StartSuiteCluster;
using ::shoal::testing::StopSuiteCluster;
using ::shoal::testing::TestCluster;
using ::testing::HasSubstr;
using ::testing::Not;

int64_t Square(int64_t x) { return x * x; }
int64_t Fails(int64_t x) {
  throw std::runtime_error(absl::StrCat("no square for ", x));
}
int64_t Sleeps(int64_t ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
// Prints `lines` lines to its worker's log, one every 200 ms.
int64_t Talks(int64_t lines) {
  for (int64_t i = 0; i < lines; ++i) {
    printf("talking line %ld\n", static_cast<long>(i));
    fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return lines;
}
// One function per way a driver ends, so that each test finds its own.
int64_t OutlivedByShutdown(int64_t ms) { return Sleeps(ms); }
int64_t OutlivedByExit(int64_t ms) { return Sleeps(ms); }
int64_t OutlivedByKill(int64_t ms) { return Sleeps(ms); }
SHOAL_REMOTE(Square, Fails, Sleeps, Talks, OutlivedByShutdown, OutlivedByExit,
             OutlivedByKill);

enum class DriverEnd { kShutdown, kExit, kKill };

class StateTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterSpec spec;
    spec.nodes = {{"state-head", 2, ""}, {"state-node", 2, ""}};
    StartSuiteCluster(spec, &cluster_);
  }
  static void TearDownTestSuite() { StopSuiteCluster(&cluster_); }
  void TearDown() override { shoal::Shutdown(); }

  std::vector<std::string> Env() const {
    return {"SHOAL_ADDRESS=" + cluster_->address(),
            "SHOAL_TOKEN=" + cluster_->token()};
  }
  int Cli(const std::vector<std::string>& args, std::string* out) {
    return RunCli(args, out, Env());
  }
  nlohmann::json Json(const std::vector<std::string>& args) {
    std::string out;
    std::vector<std::string> full = args;
    full.insert(full.end(), {"--format", "json"});
    EXPECT_EQ(Cli(full, &out), 0) << out;
    return nlohmann::json::parse(out, nullptr, false);
  }
  // `shoal list tasks` with `filters`, polled until `done` holds (10 s).
  nlohmann::json TasksUntil(
      const std::vector<std::string>& filters,
      const std::function<bool(const nlohmann::json&)>& done) {
    std::vector<std::string> args = {"list", "tasks", "--limit", "1000"};
    for (const auto& f : filters) args.insert(args.end(), {"--filter", f});
    nlohmann::json tasks;
    for (int i = 0; i < 100; ++i) {
      tasks = Json(args);
      if (tasks.is_array() && done(tasks)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return tasks;
  }

  static std::unique_ptr<TestCluster> cluster_;
};

std::unique_ptr<TestCluster> StateTest::cluster_;

TEST_F(StateTest, TasksAreListedWithTheirStatesAndSummarised) {
  cluster_->Connect();
  std::vector<shoal::ObjectRef<int64_t>> refs;
  for (int64_t i = 0; i < 20; ++i)
    refs.push_back(shoal::Task(Square).Remote(i));
  for (auto& r : refs) shoal::Get(r);
  auto failing = shoal::Task(Fails).SetMaxRetries(0).Remote(int64_t{7});
  EXPECT_THROW(shoal::Get(failing), shoal::RemoteError);
  // A long task: its worker says it runs while it does.
  auto sleeping = shoal::Task(Sleeps).Remote(int64_t{4000});
  nlohmann::json running =
      TasksUntil({"name=Sleeps", "state=RUNNING"},
                 [](const nlohmann::json& t) { return t.size() == 1; });
  ASSERT_EQ(running.size(), 1u) << running.dump();
  EXPECT_THAT(running[0]["node_id"].get<std::string>(),
              ::testing::StartsWith("state-"));
  EXPECT_NE(running[0]["worker_id"], "");
  EXPECT_EQ(running[0]["type"], "NORMAL_TASK");
  EXPECT_EQ(shoal::Get(sleeping), 4000);
  shoal::Shutdown();  // sends what the driver has not yet

  nlohmann::json squares =
      TasksUntil({"name=Square", "state=FINISHED"},
                 [](const nlohmann::json& t) { return t.size() == 20; });
  EXPECT_EQ(squares.size(), 20u) << squares.dump();
  for (const auto& t : squares) {
    EXPECT_NE(t["worker_id"], "") << t.dump();
    EXPECT_NE(t["start_time_ms"], "0") << t.dump();
    EXPECT_GE(std::stoll(t["end_time_ms"].get<std::string>()),
              std::stoll(t["start_time_ms"].get<std::string>()));
  }
  nlohmann::json failed = TasksUntil(
      {"state=FAILED"}, [](const nlohmann::json& t) { return t.size() == 1; });
  ASSERT_EQ(failed.size(), 1u) << failed.dump();
  EXPECT_EQ(failed[0]["name"], "Fails");
  EXPECT_EQ(failed[0]["error_type"], "TASK_EXECUTION_EXCEPTION");
  EXPECT_THAT(failed[0]["error"].get<std::string>(),
              HasSubstr("no square for 7"));
  nlohmann::json slept =
      TasksUntil({"name=Sleeps", "state=FINISHED"},
                 [](const nlohmann::json& t) { return t.size() == 1; });
  EXPECT_EQ(slept.size(), 1u) << slept.dump();

  std::string out;
  ASSERT_EQ(
      Cli({"list", "tasks", "--filter", "name=Square", "--limit", "5"}, &out),
      0)
      << out;
  EXPECT_THAT(out, HasSubstr("TASK_ID"));
  EXPECT_THAT(out, HasSubstr("(5 of 20; --limit N shows more)"));
  ASSERT_EQ(Cli({"summary", "tasks"}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("Square"));
  EXPECT_THAT(out, HasSubstr("FINISHED: 20"));
  EXPECT_THAT(out, HasSubstr("FAILED: 1"));
  nlohmann::json summary = Json({"summary", "tasks"});
  EXPECT_GE(summary["total"].get<int64_t>(), 22);

  // A key the records do not have is a usage error that names the keys.
  EXPECT_EQ(Cli({"list", "tasks", "--filter", "colour=red"}, &out), 2);
  EXPECT_THAT(out, HasSubstr("state"));
}

// However a driver ends, its tasks end with it: none is left RUNNING or
// waiting in the records once the driver is gone, and the CPUs they held
// are free.
TEST_F(StateTest, TasksEndWithTheirDriverHoweverItEnds) {
  struct Case {
    DriverEnd end;
    int64_t (*function)(int64_t);
    std::string name;
  };
  const Case cases[] = {
      {DriverEnd::kShutdown, OutlivedByShutdown, "OutlivedByShutdown"},
      {DriverEnd::kExit, OutlivedByExit, "OutlivedByExit"},
      {DriverEnd::kKill, OutlivedByKill, "OutlivedByKill"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    shoal::Shutdown();  // the driver below is a process of its own
    int go[2];
    ASSERT_EQ(pipe(go), 0);
    pid_t driver = fork();
    ASSERT_GE(driver, 0);
    if (driver == 0) {
      close(go[1]);
      // The cluster is the parent's: this process's exit must not stop it
      // (the suite's cluster is stopped by its owner's destructor).
      cluster_.release()->Connect();
      // 4 run on the cluster's 4 CPUs, 2 wait for one.
      std::vector<shoal::ObjectRef<int64_t>> refs;
      for (int i = 0; i < 6; ++i) {
        refs.push_back(shoal::Task(c.function).Remote(int64_t{120000}));
      }
      char byte;
      if (read(go[0], &byte, 1) != 1) _exit(3);
      if (c.end == DriverEnd::kShutdown) {
        shoal::Shutdown();
        _exit(0);
      }
      std::exit(0);  // kExit (kKill is killed before it reads)
    }
    close(go[0]);
    nlohmann::json tasks =
        TasksUntil({"name=" + c.name}, [](const nlohmann::json& t) {
          return t.size() == 6 &&
                 std::count_if(t.begin(), t.end(), [](const auto& x) {
                   return x["state"] == "RUNNING";
                 }) == 4;
        });
    ASSERT_EQ(tasks.size(), 6u) << tasks.dump();
    if (c.end == DriverEnd::kKill) {
      kill(driver, SIGKILL);
    } else {
      ASSERT_EQ(write(go[1], "x", 1), 1);
    }
    close(go[1]);
    int status = 0;
    waitpid(driver, &status, 0);
    tasks = TasksUntil({"name=" + c.name}, [](const nlohmann::json& t) {
      return std::all_of(t.begin(), t.end(), [](const auto& x) {
        return x["state"] == "FAILED" || x["state"] == "FINISHED";
      });
    });
    ASSERT_EQ(tasks.size(), 6u) << tasks.dump();
    for (const auto& t : tasks) {
      EXPECT_EQ(t["state"], "FAILED") << t.dump();
      EXPECT_EQ(t["error_type"], "WORKER_DIED") << t.dump();
      EXPECT_THAT(t["error"].get<std::string>(), HasSubstr("driver ended"));
    }
    // `summary` agrees, and so does status: the CPUs are free.
    nlohmann::json summary = Json({"summary", "tasks"});
    int seen = 0;
    for (const auto& s : summary["summary"]) {
      if (s["name"] != c.name) continue;
      ++seen;
      EXPECT_EQ(s["state_counts"].size(), 1u) << s.dump();
      EXPECT_EQ(s["state_counts"]["FAILED"], 6) << s.dump();
    }
    EXPECT_EQ(seen, 1) << summary.dump();
    cluster_->Connect();
    double free = 0;
    for (int i = 0; i < 100; ++i) {
      free = shoal::AvailableResources()["CPU"];
      if (free == 4) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_EQ(free, 4);
  }
}

TEST_F(StateTest, ObjectsInTheNodesStoresAreListed) {
  cluster_->Connect();
  std::vector<uint8_t> big(2 << 20, 7);
  auto ref = shoal::Put(big);
  nlohmann::json objects = Json({"list", "objects"});
  ASSERT_TRUE(objects.is_array()) << objects.dump();
  bool found = false;
  for (const auto& o : objects) {
    if (std::stoll(o["size"].get<std::string>()) >=
        static_cast<int64_t>(big.size())) {
      found = true;
      EXPECT_EQ(o["state"], "SEALED") << o.dump();
      EXPECT_EQ(o["copy"], "PRIMARY") << o.dump();
      EXPECT_THAT(o["node_id"].get<std::string>(),
                  ::testing::StartsWith("state-"));
    }
  }
  EXPECT_TRUE(found) << objects.dump();
  std::string out;
  ASSERT_EQ(Cli({"list", "objects", "--filter", "state=SEALED"}, &out), 0);
  EXPECT_THAT(out, HasSubstr("OBJECT_ID"));
}

TEST_F(StateTest, LogsOfEveryKindById) {
  std::string out;
  ASSERT_EQ(Cli({"logs"}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("head.log"));
  EXPECT_THAT(out, HasSubstr("state-node"));
  ASSERT_EQ(Cli({"logs", "head", "--tail", "2"}, &out), 0) << out;
  EXPECT_FALSE(out.empty());
  EXPECT_LE(std::count(out.begin(), out.end(), '\n'), 2) << out;
  ASSERT_EQ(Cli({"logs", "agent", "state-node"}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("state-node"));
  EXPECT_NE(Cli({"logs", "agent", "no-such-node"}, &out), 0);
  EXPECT_THAT(out, HasSubstr("not alive"));
  EXPECT_NE(Cli({"logs", "../../etc/passwd"}, &out), 0);
  EXPECT_NE(Cli({"logs", "no-such.log"}, &out), 0);
  EXPECT_THAT(out, HasSubstr("no node has a log named no-such.log"));

  // A task's log, by the task's id, followed while it runs.
  cluster_->Connect();
  auto talking = shoal::Task(Talks).Remote(int64_t{15});
  nlohmann::json task = TasksUntil({"name=Talks"}, [](const nlohmann::json& t) {
    return t.size() == 1 && t[0]["worker_id"] != "";
  });
  ASSERT_EQ(task.size(), 1u) << task.dump();
  int fd = -1;
  pid_t follower =
      StartCli({"logs", "--follow", "task", task[0]["task_id"]}, &fd, Env());
  ASSERT_GT(follower, 0);
  EXPECT_EQ(shoal::Get(talking), 15);
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  kill(follower, SIGTERM);
  std::string followed;
  FinishCli(follower, fd, &followed);
  EXPECT_THAT(followed, HasSubstr("talking line 0"));
  EXPECT_THAT(followed, HasSubstr("talking line 14"));
  // ...and the same log by its worker's id.
  ASSERT_EQ(Cli({"logs", "worker", task[0]["worker_id"]}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("talking line 14"));
}

TEST_F(StateTest, TheTokenCanComeFromAFile) {
  std::string file = cluster_->root() + "/token-file";
  std::ofstream(file) << cluster_->token() << "\n";
  std::string out;
  // SHOAL_ADDRESS alone: the token comes from the file, not the arguments.
  EXPECT_EQ(RunCli({"list", "nodes", "--token-file", file}, &out,
                   {"SHOAL_ADDRESS=" + cluster_->address()}),
            0)
      << out;
  EXPECT_THAT(out, HasSubstr("state-node"));
  EXPECT_NE(RunCli({"status", "--token-file", cluster_->root() + "/absent"},
                   &out, {"SHOAL_ADDRESS=" + cluster_->address()}),
            0);
  EXPECT_THAT(out, HasSubstr("cannot read"));
  std::ofstream(file) << "not-the-token";
  EXPECT_NE(RunCli({"status", "--token-file", file}, &out,
                   {"SHOAL_ADDRESS=" + cluster_->address()}),
            0);
  EXPECT_THAT(out, HasSubstr("token"));
}

TEST_F(StateTest, GangsAreReportedWithRanksRestartsAndRankLogs) {
  std::string out;
  ASSERT_EQ(Cli({"launch", "--per-device", "--nproc-per-node", "2", "--", "sh",
                 "-c", "echo hello from rank $RANK"},
                &out),
            0)
      << out;
  nlohmann::json gangs = Json({"list", "gangs"});
  ASSERT_TRUE(gangs.is_array() && !gangs.empty()) << gangs.dump();
  const nlohmann::json& gang = gangs[0];
  EXPECT_EQ(gang["state"], "SUCCEEDED") << gang.dump();
  EXPECT_EQ(gang["ranks"], "4");
  EXPECT_EQ(gang["hosts"], "2");
  EXPECT_EQ(gang["restarts"], "0/0");
  std::string id = gang["gang_id"];
  ASSERT_EQ(Cli({"logs", "gang", id}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("rank-3.log"));
  ASSERT_EQ(Cli({"logs", "gang", id, "3"}, &out), 0) << out;
  EXPECT_EQ(out, "hello from rank 3\n");
  EXPECT_EQ(Cli({"logs", "gang", id, "9"}, &out), 2) << out;

  // A gang that fails and is restarted once.
  EXPECT_EQ(Cli({"launch", "--per-device", "--max-restarts", "1", "--", "sh",
                 "-c", "exit 3"},
                &out),
            3)
      << out;
  gangs = Json({"list", "gangs"});
  ASSERT_GE(gangs.size(), 2u) << gangs.dump();
  EXPECT_EQ(gangs[0]["state"], "FAILED") << gangs[0].dump();
  EXPECT_EQ(gangs[0]["restarts"], "1/1");
  EXPECT_THAT(gangs[0]["message"].get<std::string>(),
              HasSubstr("exited with code 3"));
}

}  // namespace
