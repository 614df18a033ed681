#include "agent/process_workers.h"

#include <signal.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "agent/agent_testing.h"
#include "gtest/gtest.h"

namespace shoal::agent {
namespace {

using Outcome = proto::RequestLeaseReply;

ResourceSet R(const std::map<std::string, double>& amounts) {
  return *ResourceSet::FromDoubles(amounts);
}

// A node of 4 CPUs whose workers are fake processes; programs come from a
// head that has none (every fetch is NotFound).
class ProcessWorkersTest : public ::testing::Test {
 protected:
  ProcessWorkersTest()
      : binaries_(
            ::testing::TempDir(),
            [this](const std::string& hash, int64_t, int64_t,
                   std::function<void(absl::StatusOr<BinaryChunk>)> done) {
              fetched_.push_back(hash);
              done(absl::NotFoundError("the head has no blob " + hash));
            }) {
    ProcessWorkersOptions o;
    o.pool.node_id = "n1";
    o.pool.log_dir = "/logs";
    o.pool.env = {{"SHOAL_NODE_ID", "n1"}};
    o.node_ip = "10.0.0.1";
    o.end_leftovers = false;
    o.other_exited = [this](pid_t pid, int status) {
      others_.emplace_back(pid, status);
    };
    o.now_us = [this] { return clock_.NowUs(); };
    workers_ = std::make_unique<ProcessWorkers>(
        std::move(o), std::make_unique<FakeProcessLauncher>(&processes_),
        &binaries_);
    LeaseServiceOptions lo;
    lo.node_id = "n1";
    lo.resources = R({{"CPU", 4}});
    lo.log_events = false;
    leases_ =
        std::make_unique<LeaseService>(std::move(lo), &clock_, workers_.get());
    workers_->set_leases(leases_.get());
  }

  // A request of job1 whose workers are the command `python3 -m worker`.
  Inbox* RequestCommand(double cpus = 1) {
    proto::RequestLeaseRequest r;
    R({{"CPU", cpus}}).ToProto(r.mutable_shape());
    r.set_job_id("job1");
    r.set_binary_hash("command-1");
    r.mutable_worker_command()->add_argv("python3");
    r.mutable_worker_command()->add_argv("-m");
    r.mutable_worker_command()->add_argv("worker");
    (*r.mutable_worker_command()->mutable_env())["PYTHONPATH"] = "/code";
    return Send(r);
  }

  Inbox* Send(const proto::RequestLeaseRequest& r) {
    inboxes_.push_back(std::make_unique<Inbox>());
    Inbox* inbox = inboxes_.back().get();
    leases_->RequestLease(r, std::make_unique<FakeRequester>(1, inbox));
    return inbox;
  }

  // The newest started process registers (REGISTER_WORKER) at `port`.
  std::string Register(int port) {
    const SpawnOptions& s = processes_.started.back();
    std::string id = s.env.at("SHOAL_WORKER_ID");
    EXPECT_TRUE(workers_->Registered(id, port, 0).ok());
    workers_->Serve(id);
    return id;
  }

  FakeClock clock_;
  FakeProcessLauncher::State processes_;
  std::vector<std::string> fetched_;
  std::vector<std::pair<pid_t, int>> others_;
  BinaryCache binaries_;
  std::unique_ptr<ProcessWorkers> workers_;
  std::unique_ptr<LeaseService> leases_;
  std::vector<std::unique_ptr<Inbox>> inboxes_;
};

TEST_F(ProcessWorkersTest, StartsTheCommandAndGrantsOnceItRegisters) {
  Inbox* a = RequestCommand();
  ASSERT_EQ(processes_.started.size(), 1u);
  const SpawnOptions& s = processes_.started[0];
  EXPECT_EQ(s.argv, (std::vector<std::string>{"python3", "-m", "worker"}));
  EXPECT_EQ(s.env.at("PYTHONPATH"), "/code");
  EXPECT_EQ(s.env.at("SHOAL_JOB_ID"), "job1");
  EXPECT_EQ(s.env.at("SHOAL_NODE_ID"), "n1");
  EXPECT_TRUE(a->replies.empty());
  // Still starting, as the heartbeat tells.
  proto::HeartbeatRequest hb;
  leases_->FillHeartbeat(&hb);
  ASSERT_EQ(hb.leases_size(), 1);
  EXPECT_TRUE(hb.leases(0).starting());
  EXPECT_EQ(hb.leases(0).worker_pid(), 100);

  std::string id = Register(7001);
  ASSERT_EQ(a->replies.size(), 1u);
  EXPECT_EQ(a->replies[0].outcome(), Outcome::GRANTED);
  EXPECT_EQ(a->replies[0].worker_id(), id);
  EXPECT_EQ(a->replies[0].worker_address(), "10.0.0.1:7001");
  EXPECT_EQ(a->replies[0].worker_pid(), 100);
  EXPECT_EQ(workers_->LeaseOf(id), a->replies[0].lease_id());
}

TEST_F(ProcessWorkersTest, AReturnedWorkerServesTheNextLeaseOfItsKind) {
  Inbox* a = RequestCommand();
  std::string id = Register(7001);
  leases_->ReturnLease(a->replies[0].lease_id(), /*kill_worker=*/false);
  EXPECT_EQ(workers_->LeaseOf(id), "");
  Inbox* b = RequestCommand();
  ASSERT_EQ(b->replies.size(), 1u);  // at once: no new process
  EXPECT_EQ(b->replies[0].worker_id(), id);
  EXPECT_EQ(processes_.started.size(), 1u);
}

TEST_F(ProcessWorkersTest, AKilledWorkersExitIsRemembered) {
  Inbox* a = RequestCommand();
  std::string id = Register(7001);
  leases_->ReturnLease(a->replies[0].lease_id(), /*kill_worker=*/true,
                       "its driver returned the lease and asked so");
  ASSERT_EQ(processes_.signals.size(), 1u);
  EXPECT_EQ(processes_.signals[0], std::make_pair(pid_t{100}, SIGKILL));
  std::vector<proto::GetWorkerExitReply> got;
  leases_->GetWorkerExit(
      id, [&](const proto::GetWorkerExitReply& r) { got.push_back(r); });
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].exited());
  EXPECT_TRUE(absl::StrContains(got[0].description(), "pid 100"))
      << got[0].description();
  EXPECT_FALSE(workers_->Knows(id));
}

TEST_F(ProcessWorkersTest, AWorkerThatDiesMidLeaseEndsTheLease) {
  RequestCommand(4);
  Register(7001);
  Inbox* waiting = RequestCommand(4);
  EXPECT_TRUE(waiting->replies.empty());
  FakeProcessLauncher(&processes_).Exit(100, 0, /*code=*/3);
  workers_->Reap();
  // Its lease ended, and the waiting request got a new worker.
  EXPECT_EQ(processes_.started.size(), 2u);
  EXPECT_EQ(leases_->leases().size(), 1u);
  ASSERT_EQ(leases_->leases().leases().begin()->second.worker_id,
            processes_.started[1].env.at("SHOAL_WORKER_ID"));
}

TEST_F(ProcessWorkersTest, AProcessThatCannotStartFailsTheRequest) {
  processes_.start_error = absl::ResourceExhaustedError("fork: no memory");
  Inbox* a = RequestCommand();
  ASSERT_EQ(a->replies.size(), 1u);
  EXPECT_EQ(a->replies[0].outcome(), Outcome::FAILED);
  EXPECT_EQ(a->replies[0].error(), "fork: no memory");
  EXPECT_FALSE(a->replies[0].needs_program());
  EXPECT_EQ(leases_->leases().size(), 0u);
  EXPECT_EQ(workers_->size(), 0u);
}

TEST_F(ProcessWorkersTest, AProgramNobodyHasAsksTheRequesterForIt) {
  proto::RequestLeaseRequest r;
  R({{"CPU", 1}}).ToProto(r.mutable_shape());
  r.set_job_id("job1");
  r.set_binary_path("/nonexistent/driver");
  r.set_binary_hash("abc123");
  Inbox* a = Send(r);
  EXPECT_EQ(fetched_, std::vector<std::string>{"abc123"});
  ASSERT_EQ(a->replies.size(), 1u);
  EXPECT_EQ(a->replies[0].outcome(), Outcome::FAILED);
  EXPECT_TRUE(a->replies[0].needs_program());
  EXPECT_TRUE(processes_.started.empty());
  EXPECT_EQ(leases_->leases().size(), 0u);
}

TEST_F(ProcessWorkersTest, OtherChildrenGoToTheirOwner) {
  processes_.exited.push_back({555, 0});
  workers_->Reap();
  ASSERT_EQ(others_.size(), 1u);
  EXPECT_EQ(others_[0].first, 555);
}

TEST_F(ProcessWorkersTest, ARegistrationFromAStrangerIsRefused) {
  EXPECT_EQ(workers_->Registered("w-unknown", 1, 1).code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace shoal::agent
