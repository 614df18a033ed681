#include "agent/worker_pool.h"

#include <signal.h>
#include <sys/wait.h>

#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "agent/agent_testing.h"
#include "gtest/gtest.h"

namespace shoal::agent {
namespace {

using FakeLauncher = FakeProcessLauncher;

class WorkerPoolTest : public ::testing::Test {
 protected:
  WorkerPoolTest() {
    WorkerPoolOptions o;
    o.node_id = "n1";
    o.log_dir = "/logs";
    o.env = {{"SHOAL_NODE_ID", "n1"}, {"SHOAL_AGENT_ADDRESS", "h:1"}};
    o.idle_timeout_ms = 1000;
    o.max_remembered_exits = 3;
    auto launcher = std::make_unique<FakeLauncher>(&state_);
    launcher_ = launcher.get();
    pool_ = std::make_unique<WorkerPool>(o, std::move(launcher));
  }

  // A started, registered worker serving `lease`.
  std::string Running(const std::string& lease, const std::string& job = "j1",
                      const std::string& devices = "") {
    std::string id = pool_->Add(job, "hash1", devices, lease).id;
    EXPECT_TRUE(pool_->Launch(id, "/bin/worker", SpawnOptions()).ok());
    EXPECT_TRUE(pool_->Registered(id, "h:2", 0).ok());
    pool_->MarkLeased(id);
    return id;
  }

  FakeLauncher::State state_;
  FakeLauncher* launcher_ = nullptr;
  std::unique_ptr<WorkerPool> pool_;
};

TEST_F(WorkerPoolTest, LaunchGivesTheWorkerItsEnvironmentAndLog) {
  std::string id = pool_->Add("j1", "hash1", "", "lease1").id;
  EXPECT_EQ(pool_->Find(id)->state, Worker::State::kStarting);
  SpawnOptions devices;
  devices.env = {{"CUDA_VISIBLE_DEVICES", "1"}};
  devices.unset_env = {"TPU_VISIBLE_CHIPS"};
  ASSERT_TRUE(pool_->Launch(id, "/bin/worker", devices).ok());
  ASSERT_EQ(state_.started.size(), 1u);
  const SpawnOptions& s = state_.started[0];
  EXPECT_EQ(s.argv, std::vector<std::string>{"/bin/worker"});
  EXPECT_EQ(s.env.at("SHOAL_ROLE"), "worker");
  EXPECT_EQ(s.env.at("SHOAL_WORKER_ID"), id);
  EXPECT_EQ(s.env.at("SHOAL_JOB_ID"), "j1");
  EXPECT_EQ(s.env.at("SHOAL_NODE_ID"), "n1");
  EXPECT_EQ(s.env.at("CUDA_VISIBLE_DEVICES"), "1");
  EXPECT_EQ(s.unset_env, std::vector<std::string>{"TPU_VISIBLE_CHIPS"});
  EXPECT_EQ(s.log_path, "/logs/worker-" + id + ".log");
  EXPECT_EQ(pool_->Find(id)->pid, 100);
  EXPECT_EQ(pool_->Find(id)->log_path, s.log_path);
}

TEST_F(WorkerPoolTest, ACommandWorkerGetsTheJobsEnvironmentButNotItsIds) {
  std::string id = pool_->Add("j1", "command-abc", "", "lease1").id;
  SpawnOptions program;
  program.argv = {"/usr/bin/python3", "-m", "shoal.worker"};
  program.env = {{"PYTHONPATH", "/job/code"},
                 {"SHOAL_AGENT_ADDRESS", "elsewhere:9"},
                 {"SHOAL_WORKER_ID", "forged"}};
  SpawnOptions devices;
  devices.env = {{"TPU_VISIBLE_CHIPS", "2"}};
  ASSERT_TRUE(pool_->Launch(id, program, devices).ok());
  ASSERT_EQ(state_.started.size(), 1u);
  const SpawnOptions& s = state_.started[0];
  EXPECT_EQ(s.argv, program.argv);
  EXPECT_EQ(s.env.at("PYTHONPATH"), "/job/code");
  // The agent's own variables are not the job's to change.
  EXPECT_EQ(s.env.at("SHOAL_AGENT_ADDRESS"), "h:1");
  EXPECT_EQ(s.env.at("SHOAL_WORKER_ID"), id);
  EXPECT_EQ(s.env.at("TPU_VISIBLE_CHIPS"), "2");
  // Idle workers are reused by the same command only.
  pool_->MarkIdle(id, 0);
  EXPECT_EQ(pool_->TakeIdle("j1", "hash1", "", "lease2"), nullptr);
  EXPECT_NE(pool_->TakeIdle("j1", "command-abc", "", "lease2"), nullptr);
}

TEST_F(WorkerPoolTest, LaunchErrors) {
  EXPECT_EQ(pool_->Launch("nobody", "/bin/worker", SpawnOptions()).code(),
            absl::StatusCode::kNotFound);
  state_.start_error = absl::InternalError("exec failed");
  std::string id = pool_->Add("j1", "hash1", "", "lease1").id;
  EXPECT_EQ(pool_->Launch(id, "/bin/worker", SpawnOptions()).code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(pool_->Registered("nobody", "h:2", 7).code(),
            absl::StatusCode::kNotFound);
  // A command worker needs a command.
  std::string other = pool_->Add("j1", "command-abc", "", "lease2").id;
  EXPECT_EQ(pool_->Launch(other, SpawnOptions(), SpawnOptions()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(WorkerPoolTest, IdleWorkersAreReusedOnlyByTheSameJobBinaryAndDevices) {
  std::string id = Running("lease1", "j1", "GPU:0,;");
  EXPECT_EQ(pool_->TakeIdle("j1", "hash1", "GPU:0,;", "lease2"), nullptr)
      << "a leased worker is not idle";
  pool_->MarkIdle(id, 0);
  EXPECT_EQ(pool_->Find(id)->lease_id, "");
  EXPECT_EQ(pool_->TakeIdle("j2", "hash1", "GPU:0,;", "lease2"), nullptr);
  EXPECT_EQ(pool_->TakeIdle("j1", "hash2", "GPU:0,;", "lease2"), nullptr);
  EXPECT_EQ(pool_->TakeIdle("j1", "hash1", "GPU:1,;", "lease2"), nullptr);
  const Worker* w = pool_->TakeIdle("j1", "hash1", "GPU:0,;", "lease2");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->id, id);
  EXPECT_EQ(w->state, Worker::State::kLeased);
  EXPECT_EQ(w->lease_id, "lease2");
}

TEST_F(WorkerPoolTest, ReapDescribesAndForgetsExitedWorkers) {
  std::string crashed = Running("lease1");
  std::string killed = Running("lease2");
  std::string starting = pool_->Add("j1", "hash1", "", "lease3").id;
  ASSERT_TRUE(pool_->Launch(starting, "/bin/worker", SpawnOptions()).ok());
  pid_t crashed_pid = pool_->Find(crashed)->pid;
  launcher_->Exit(crashed_pid, 0, /*code=*/3);
  pool_->Kill(killed, "its driver disconnected");
  launcher_->Exit(pool_->Find(starting)->pid, SIGSEGV);
  launcher_->Exit(999, 0);  // not a worker

  std::vector<WorkerPool::Exited> exited = pool_->Reap();
  ASSERT_EQ(exited.size(), 3u);
  std::map<std::string, std::string> by_id;
  for (const auto& e : exited) by_id[e.worker.id] = e.description;
  EXPECT_EQ(by_id[crashed], "worker pid " + std::to_string(crashed_pid) +
                                " on node n1 exited with code 3");
  EXPECT_TRUE(absl::StrContains(by_id[killed], "killed by signal 9 (Killed)"))
      << by_id[killed];
  EXPECT_TRUE(absl::StrContains(by_id[starting],
                                "before it registered; see "
                                "/logs/worker-"))
      << by_id[starting];
  for (const auto& e : exited) {
    if (e.worker.id == killed) {
      EXPECT_EQ(e.worker.stopped_because, "its driver disconnected");
      EXPECT_EQ(e.worker.lease_id, "lease2");
    }
    if (e.worker.id == starting) {
      EXPECT_EQ(e.worker.state, Worker::State::kStarting);
    }
  }
  EXPECT_EQ(pool_->size(), 0u);
  EXPECT_EQ(pool_->ExitOf(crashed), by_id[crashed]);
  EXPECT_EQ(pool_->ExitOf("nobody"), std::nullopt);
  EXPECT_TRUE(pool_->Reap().empty());
}

TEST_F(WorkerPoolTest, KillWithoutAProcessDoesNothing) {
  std::string id = pool_->Add("j1", "hash1", "", "lease1").id;
  pool_->Kill(id, "why");
  EXPECT_TRUE(state_.signals.empty());
  EXPECT_EQ(pool_->Find(id)->stopped_because, "");
}

TEST_F(WorkerPoolTest, RemoveRemembersWhyAndForgetsTheOldest) {
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    ids.push_back(pool_->Add("j1", "hash1", "", "lease").id);
    pool_->Remove(ids.back(), "failed " + std::to_string(i));
  }
  EXPECT_EQ(pool_->size(), 0u);
  EXPECT_EQ(pool_->ExitOf(ids[0]), std::nullopt);  // only 3 are kept
  EXPECT_EQ(pool_->ExitOf(ids[3]), "failed 3");
}

TEST_F(WorkerPoolTest, EndIdleSignalsOnlyWorkersIdleTooLong) {
  std::string busy = Running("lease1");
  std::string idle = Running("lease2");
  std::string fresh = Running("lease3");
  pool_->MarkIdle(idle, /*now_us=*/0);
  pool_->MarkIdle(fresh, /*now_us=*/900'000);
  state_.exit_on_sigterm = false;
  pool_->EndIdle(/*now_us=*/1'000'001);
  ASSERT_EQ(state_.signals.size(), 1u);
  EXPECT_EQ(state_.signals[0], std::make_pair(pool_->Find(idle)->pid, SIGTERM));
  // Lingering: signalled again a period later, not before.
  pool_->EndIdle(1'500'000);
  EXPECT_EQ(state_.signals.size(), 1u);
  pool_->EndIdle(2'000'002);
  EXPECT_EQ(state_.signals.size(), 3u);  // and `fresh`, idle long enough now
  EXPECT_NE(pool_->Find(busy), nullptr);
}

TEST_F(WorkerPoolTest, AWorkerAskedToEndItselfIsKilledPastItsDeadline) {
  std::string slow = Running("lease1");
  std::string prompt = Running("lease2");
  pool_->EndSoon(slow, "its task was cancelled with force", 2'000'000);
  pool_->EndSoon(prompt, "its task was cancelled with force", 2'000'000);
  pool_->EndIdle(1'999'999);
  EXPECT_TRUE(state_.signals.empty());           // it has its grace
  launcher_->Exit(pool_->Find(prompt)->pid, 0);  // it ended itself
  std::vector<WorkerPool::Exited> exited = pool_->Reap();
  ASSERT_EQ(exited.size(), 1u);
  EXPECT_EQ(exited[0].worker.stopped_because,
            "its task was cancelled with force");  // expected, not a crash
  pool_->EndIdle(2'000'000);
  ASSERT_EQ(state_.signals.size(), 1u);
  EXPECT_EQ(state_.signals[0], std::make_pair(pool_->Find(slow)->pid, SIGKILL));
  pool_->EndIdle(3'000'000);
  EXPECT_EQ(state_.signals.size(), 1u);  // once
}

TEST_F(WorkerPoolTest, StopAllEndsEveryProcess) {
  Running("lease1");
  Running("lease2");
  pool_->Add("j1", "hash1", "", "lease3");  // no process yet
  state_.exit_on_sigterm = false;           // they ignore SIGTERM
  pool_->StopAll();
  EXPECT_EQ(pool_->size(), 0u);
  EXPECT_TRUE(state_.running.empty());
  int terms = 0, kills = 0;
  for (const auto& [pid, sig] : state_.signals) {
    terms += sig == SIGTERM;
    kills += sig == SIGKILL;
  }
  EXPECT_EQ(terms, 2);
  EXPECT_EQ(kills, 2);
}

TEST_F(WorkerPoolTest, StopAllDoesNotKillWorkersThatLeftOnSigterm) {
  Running("lease1");
  pool_->StopAll();
  ASSERT_EQ(state_.signals.size(), 1u);
  EXPECT_EQ(state_.signals[0].second, SIGTERM);
}

}  // namespace
}  // namespace shoal::agent
