// TaskSubmitter against a fake runtime (the delegate), fake node agents and
// fake workers: peers of an in-memory network (rpc/fake_channel.h) that
// answer REQUEST_LEASE, RETURN_LEASE, GET_WORKER_EXIT and PUSH_TASK as the
// real ones would. The NodeView is real, fed the fake agents' addresses.
// Everything runs on the test's thread; the test turns the executor and
// moves its clock.
#include "api/task_submitter.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/fake_worker_testing.h"
#include "api/node_view.h"
#include "api/task_error.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/fake_channel.h"
#include "rpc/rpc.h"
#include "scheduling/resource_set.h"

namespace shoal::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;
using ::testing::UnorderedElementsAreArray;

proto::RequestLeaseReply LeaseReply(proto::RequestLeaseReply::Outcome outcome,
                                    const std::string& error) {
  proto::RequestLeaseReply reply;
  reply.set_outcome(outcome);
  reply.set_error(error);
  return reply;
}

// A node agent: answers lease requests from `script` in order, then by
// granting a lease on `grant_to` (when set), else keeps them unanswered in
// `held` (withdrawn by a cancel when `honor_cancels`). Records what it was
// asked.
class FakeAgent {
 public:
  FakeAgent(rpc::FakeNetwork* network, std::string address, std::string node_id)
      : network_(network),
        address_(std::move(address)),
        node_id_(std::move(node_id)) {
    rpc::FakePeer* server = network_->Listen(address_);
    rpc::RegisterProto<proto::RequestLeaseRequest>(
        server, proto::REQUEST_LEASE,
        [this](const proto::RequestLeaseRequest& request, rpc::Responder r) {
          lease_requests.push_back(request);
          if (!script.empty()) {
            proto::RequestLeaseReply reply = std::move(script.front());
            script.pop_front();
            if (reply.outcome() == proto::RequestLeaseReply::GRANTED) {
              granted.push_back(reply.lease_id());
            }
            r.Reply(reply);
            return;
          }
          if (!grant_to.empty()) {
            r.Reply(Grant(grant_to));
            return;
          }
          held.push_back(r);
          held_ids.push_back(request.request_id());
        });
    rpc::RegisterProto<proto::CancelLease>(
        server, proto::CANCEL_LEASE_REQUEST,
        [this](const proto::CancelLease& request, rpc::Responder r) {
          cancels.push_back(request.request_id());
          proto::CancelLeaseReply reply;
          auto it =
              std::find(held_ids.begin(), held_ids.end(), request.request_id());
          if (honor_cancels && it != held_ids.end()) {
            size_t i = static_cast<size_t>(it - held_ids.begin());
            held[i].Reply(LeaseReply(proto::RequestLeaseReply::CANCELED, ""));
            held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
            held_ids.erase(it);
            reply.set_canceled(true);
          }
          r.Reply(reply);
        });
    rpc::RegisterProto<proto::ReturnLeaseRequest>(
        server, proto::RETURN_LEASE,
        [this](const proto::ReturnLeaseRequest& request, rpc::Responder r) {
          returned.push_back(request.lease_id());
          if (!hold_returns) r.Reply(proto::Empty());
        });
    rpc::RegisterProto<proto::GetWorkerExitRequest>(
        server, proto::GET_WORKER_EXIT,
        [this](const proto::GetWorkerExitRequest& request, rpc::Responder r) {
          exit_requests.push_back(request.worker_id());
          r.Reply(exit_reply);
        });
  }

  const std::string& address() const { return address_; }
  const std::string& node_id() const { return node_id_; }
  // A new lease on the worker at `worker_address` (recorded in `granted`).
  proto::RequestLeaseReply Grant(const std::string& worker_address) {
    int n = ++grants_;
    proto::RequestLeaseReply reply;
    reply.set_outcome(proto::RequestLeaseReply::GRANTED);
    reply.set_lease_id(absl::StrCat(node_id_, "-lease-", n));
    reply.set_worker_id(absl::StrCat(node_id_, "-worker-", n));
    reply.set_worker_address(worker_address);
    reply.set_worker_pid(1000 + n);
    reply.set_node_id(node_id_);
    granted.push_back(reply.lease_id());
    return reply;
  }
  ~FakeAgent() { Die(); }
  FakeAgent(const FakeAgent&) = delete;
  FakeAgent& operator=(const FakeAgent&) = delete;

  // Ends the process: its connections close, its port refuses.
  void Die() {
    if (network_->Find(address_) != nullptr) network_->Kill(address_);
  }

  std::deque<proto::RequestLeaseReply> script;
  std::string grant_to;
  bool hold_returns = false;
  proto::GetWorkerExitReply exit_reply;

  std::vector<proto::RequestLeaseRequest> lease_requests;
  std::vector<rpc::Responder> held;
  std::vector<std::string> held_ids;  // their request ids
  // Cancels answer held requests CANCELED; unset, a cancel finds nothing
  // (as when it crosses the grant).
  bool honor_cancels = false;
  std::vector<std::string> cancels;  // request ids
  std::vector<std::string> granted;  // lease ids
  std::vector<std::string> returned;
  std::vector<std::string> exit_requests;  // worker ids

 private:
  rpc::FakeNetwork* const network_;
  const std::string address_;
  const std::string node_id_;
  int grants_ = 0;
};

class FakeDelegate : public TaskSubmitter::Delegate {
 public:
  bool BuildSpec(const std::string& task_id, const std::string& node_id,
                 const std::string& /*worker_id*/,
                 proto::TaskSpec* spec) override {
    built.push_back(task_id);
    if (gone.count(task_id)) return false;
    spec->set_task_id(task_id);
    spec->set_function_name("f");
    return true;
  }
  void TaskReplied(const std::string& task_id, const std::string& node_id,
                   absl::StatusOr<proto::TaskResult> result) override {
    outcomes[task_id] =
        result.ok()
            ? absl::StrCat("ok:", node_id, ":", result->value())
            : absl::StrCat("error:", node_id, ":", result.status().ToString());
  }
  void WorkerDied(const std::string& task_id, const std::string& how) override {
    outcomes[task_id] = absl::StrCat("died:", how);
  }
  void TaskFailed(const std::string& task_id, absl::Status error) override {
    outcomes[task_id] = absl::StrCat("failed:", error.message());
    failures[task_id] = error;
  }
  void FetchNodes(
      std::function<void(absl::StatusOr<proto::ClusterStatus>)> done) override {
    ++fetches;
    done(status);
  }

  std::set<std::string> gone;                   // BuildSpec says these are gone
  absl::StatusOr<proto::ClusterStatus> status;  // what FetchNodes answers

  std::vector<std::string> built;  // BuildSpec calls, in order
  std::map<std::string, std::string> outcomes;
  std::map<std::string, absl::Status> failures;
  int fetches = 0;
};

proto::NodeInfo Node(const FakeAgent& agent, bool alive = true,
                     const std::string& ip = "127.0.0.1") {
  proto::NodeInfo node;
  node.set_node_id(agent.node_id());
  node.set_address(agent.address());
  node.set_node_ip(ip);
  node.set_alive(alive);
  node.set_object_transfer_address("127.0.0.1:1");
  return node;
}

class TaskSubmitterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    delegate_ = std::make_unique<FakeDelegate>();
    agent_ = NewAgent("node-a");
    worker_ = NewWorker();
    nodes_ = std::make_unique<NodeView>(
        /*loop=*/nullptr,
        NodeView::Options{
            .token = "unused",
            .peer_name = "task_submitter_test",
            .bad_agent_retry_us = 2000000,
            .channels = &network_,
            .now_us = [this] { return now_us_; },
            .is_local = [](const std::string& ip) { return ip == "127.0.0.1"; },
        });
    SetNodes({Node(*agent_)});
    Restart(/*lease_idle_ms=*/60000);
  }
  void TearDown() override {
    submitter_.reset();
    nodes_.reset();
    executor_.RunUntilIdle();
  }

  // Runs `fn`, then what it set going until nothing is left to run (timers
  // wait for the clock: executor_.AdvanceMs).
  void Run(const std::function<void()>& fn) {
    fn();
    executor_.RunUntilIdle();
  }
  // Whether `check` holds once what is under way has run.
  bool Settled(const std::function<bool()>& check) {
    executor_.RunUntilIdle();
    return check();
  }
  std::string NextAddress() { return absl::StrCat("127.0.0.1:", next_port_++); }
  std::unique_ptr<FakeAgent> NewAgent(const std::string& node_id) {
    return std::make_unique<FakeAgent>(&network_, NextAddress(), node_id);
  }
  std::unique_ptr<FakeWorker> NewWorker() {
    return std::make_unique<FakeWorker>(&network_, NextAddress());
  }

  // A new submitter (leases of the old one are dropped unreturned).
  // `blob_hash`: the head's copy it knows of at first; `program_wanted`:
  // counts the submitter's asks for one (in program_asks_) instead of
  // leaving Options::program_wanted unset.
  void Restart(int64_t lease_idle_ms, const std::string& blob_hash = "",
               bool program_wanted = false) {
    Run([&] {
      TaskSubmitter::Options options{.job_id = "job-7",
                                     .binary_path = "/opt/app/bin/app",
                                     .binary_hash = "hash-1",
                                     .blob_hash = blob_hash,
                                     .lease_idle_ms = lease_idle_ms};
      if (program_wanted) options.program_wanted = [this] { ++program_asks_; };
      submitter_ = std::make_unique<TaskSubmitter>(
          &executor_, nodes_.get(), delegate_.get(), std::move(options));
    });
  }
  // A node without the program, as a real agent answers.
  static proto::RequestLeaseReply NoProgram() {
    proto::RequestLeaseReply reply =
        LeaseReply(proto::RequestLeaseReply::FAILED,
                   "the driver's program is not on this host");
    reply.set_needs_program(true);
    return reply;
  }
  // The lease requests `agent` received for `cpus` CPUs.
  static std::vector<proto::RequestLeaseRequest> RequestsFor(
      const FakeAgent& agent, double cpus) {
    std::vector<proto::RequestLeaseRequest> found;
    for (const auto& r : agent.lease_requests) {
      if (ResourceSet::FromProto(r.shape()) == Shape(cpus)) found.push_back(r);
    }
    return found;
  }
  // The head's list of nodes: fed to the view now, and what FetchNodes
  // answers from now on. Loop thread only.
  void SetNodes(const std::vector<proto::NodeInfo>& nodes) {
    proto::ClusterStatus status;
    for (const auto& node : nodes) *status.add_nodes() = node;
    delegate_->status = status;
    nodes_->Update(status);
  }

  static ResourceSet Shape(double cpus) {
    auto shape = ResourceSet::FromDoubles({{"CPU", cpus}});
    EXPECT_TRUE(shape.ok()) << shape.status();
    return *shape;
  }
  // Enqueues on the loop thread; call inside Run().
  void Enqueue(const std::string& task, int depth = 0, bool front = false,
               double cpus = 1) {
    ResourceSet shape = Shape(cpus);
    submitter_->Enqueue(task, shape, LabelSelector(), shape.DebugString(),
                        depth, front);
  }
  void Submit(const std::string& task, int depth = 0, double cpus = 1) {
    Run([&] { Enqueue(task, depth, /*front=*/false, cpus); });
  }
  std::string Outcome(const std::string& task) {
    std::string out;
    Run([&] {
      auto it = delegate_->outcomes.find(task);
      if (it != delegate_->outcomes.end()) out = it->second;
    });
    return out;
  }

  rpc::ManualExecutor executor_;
  rpc::FakeNetwork network_{&executor_, "driver"};
  int next_port_ = 7000;
  int64_t now_us_ = 1000000000;  // the view's clock
  int program_asks_ = 0;
  std::unique_ptr<FakeDelegate> delegate_;
  std::unique_ptr<FakeAgent> agent_;
  std::unique_ptr<FakeAgent> second_agent_;
  std::unique_ptr<FakeWorker> worker_;
  std::unique_ptr<FakeWorker> second_worker_;
  std::unique_ptr<NodeView> nodes_;
  std::unique_ptr<TaskSubmitter> submitter_;
};

TEST_F(TaskSubmitterTest, TasksRunOnALeasedWorkerAndRepliesNameTheNode) {
  Run([&] { agent_->grant_to = worker_->address(); });
  Submit("t1");
  Submit("t2");
  Submit("t3");
  ASSERT_TRUE(Settled([&] { return delegate_->outcomes.size() == 3; }));
  EXPECT_EQ(Outcome("t1"), "ok:node-a:t1");
  EXPECT_EQ(Outcome("t2"), "ok:node-a:t2");
  EXPECT_EQ(Outcome("t3"), "ok:node-a:t3");
  Run([&] {
    EXPECT_THAT(worker_->seen, UnorderedElementsAre("t1", "t2", "t3"));
    EXPECT_EQ(submitter_->queued(), 0u);
    EXPECT_GE(submitter_->leased_workers(), 1u);
    // The lease named its node.
    EXPECT_EQ(nodes_->AgentOf("node-a"), agent_->address());
  });
}

TEST_F(TaskSubmitterTest, WorkerErrorReachesTaskReplied) {
  Run([&] { agent_->grant_to = worker_->address(); });
  Submit("err-1");
  ASSERT_TRUE(Settled([&] { return delegate_->outcomes.size() == 1; }));
  EXPECT_THAT(Outcome("err-1"), HasSubstr("error:node-a:"));
  EXPECT_THAT(Outcome("err-1"), HasSubstr("task err-1 failed"));
  EXPECT_THAT(Outcome("err-1"), HasSubstr("no function named nope"));
  // The worker stays leased and takes the next task.
  Submit("t2");
  ASSERT_TRUE(Settled([&] { return delegate_->outcomes.size() == 2; }));
  EXPECT_EQ(Outcome("t2"), "ok:node-a:t2");
}

TEST_F(TaskSubmitterTest, LeaseRequestCarriesJobShapeAndItsTasksDepth) {
  // The agent keeps every request unanswered. Each depth asks for its own
  // lease, even in front of another depth's queue.
  Run([&] { Enqueue("t1", /*depth=*/1); });
  ASSERT_TRUE(Settled([&] { return agent_->lease_requests.size() == 1; }));
  Run([&] { Enqueue("t2", /*depth=*/4, /*front=*/true); });
  ASSERT_TRUE(Settled([&] { return agent_->lease_requests.size() == 2; }));
  Run([&] { Enqueue("t3", /*depth=*/2); });
  ASSERT_TRUE(Settled([&] { return agent_->lease_requests.size() == 3; }));
  Run([&] {
    const auto& requests = agent_->lease_requests;
    for (const auto& request : requests) {
      EXPECT_EQ(request.job_id(), "job-7");
      EXPECT_EQ(request.binary_path(), "/opt/app/bin/app");
      EXPECT_EQ(request.binary_hash(), "hash-1");
      EXPECT_EQ(ResourceSet::FromProto(request.shape()), Shape(1));
      EXPECT_FALSE(request.no_spillback());
      EXPECT_TRUE(request.actor_id().empty());
    }
    EXPECT_EQ(requests[0].depth(), 1);
    EXPECT_EQ(requests[1].depth(), 4);
    EXPECT_EQ(requests[2].depth(), 2);
    EXPECT_EQ(submitter_->queued(), 3u);
  });
}

TEST_F(TaskSubmitterTest, ALabelSelectorTravelsWithItsLeaseRequests) {
  auto selector = LabelSelector::Parse({{"ray.io/node-id", "node-b"}});
  ASSERT_TRUE(selector.ok());
  Run([&] {
    ResourceSet shape = Shape(1);
    submitter_->Enqueue("pinned", shape, *selector,
                        shape.DebugString() + " on node-b", 0);
    Enqueue("free");
  });
  ASSERT_TRUE(Settled([&] { return agent_->lease_requests.size() == 2; }));
  Run([&] {
    int pinned = 0;
    for (const auto& r : agent_->lease_requests) {
      if (!r.has_label_selector()) continue;
      ++pinned;
      EXPECT_EQ(r.label_selector().labels().at("shoal.io/node-id"), "node-b");
      EXPECT_FALSE(r.label_selector().soft());
    }
    EXPECT_EQ(pinned, 1);
  });
}

TEST_F(TaskSubmitterTest, ShapesQueueAndLeaseSeparately) {
  Run([&] {
    Enqueue("small", 0, false, /*cpus=*/1);
    Enqueue("big", 0, false, /*cpus=*/4);
  });
  ASSERT_TRUE(Settled([&] { return agent_->lease_requests.size() == 2; }));
  Run([&] {
    std::vector<ResourceSet> shapes;
    for (const auto& r : agent_->lease_requests) {
      shapes.push_back(ResourceSet::FromProto(r.shape()));
    }
    EXPECT_THAT(shapes, UnorderedElementsAre(Shape(1), Shape(4)));
  });
}

TEST_F(TaskSubmitterTest, SpillbackIsFollowedWithNoSpillback) {
  Run([&] {
    second_agent_ = NewAgent("node-b");
    second_agent_->grant_to = worker_->address();
    proto::RequestLeaseReply spill =
        LeaseReply(proto::RequestLeaseReply::SPILLBACK, "");
    spill.set_spillback_address(second_agent_->address());
    spill.set_spillback_node_id("node-b");
    agent_->script.push_back(spill);
  });
  Submit("t1", /*depth=*/2);
  ASSERT_TRUE(Settled([&] { return !Outcome("t1").empty(); }));
  EXPECT_EQ(Outcome("t1"), "ok:node-b:t1");
  Run([&] {
    ASSERT_EQ(agent_->lease_requests.size(), 1u);
    EXPECT_FALSE(agent_->lease_requests[0].no_spillback());
    ASSERT_EQ(second_agent_->lease_requests.size(), 1u);
    const auto& spilled = second_agent_->lease_requests[0];
    EXPECT_TRUE(spilled.no_spillback());
    EXPECT_EQ(spilled.job_id(), "job-7");
    EXPECT_EQ(spilled.depth(), 2);
    EXPECT_EQ(ResourceSet::FromProto(spilled.shape()), Shape(1));
    // The lease's node is now known by its agent.
    EXPECT_EQ(nodes_->AgentOf("node-b"), second_agent_->address());
  });
}

TEST_F(TaskSubmitterTest, InfeasibleFailsEveryQueuedTask) {
  Run([&] {
    for (int i = 0; i < 3; ++i) {
      agent_->script.push_back(LeaseReply(proto::RequestLeaseReply::INFEASIBLE,
                                          "no node has 1 accel_x"));
    }
    Enqueue("t1");
    Enqueue("t2");
  });
  ASSERT_TRUE(Settled([&] { return delegate_->failures.size() == 2; }));
  Run([&] {
    for (const char* task : {"t1", "t2"}) {
      const absl::Status& error = delegate_->failures[task];
      EXPECT_EQ(KindOf(error), ErrorKind::kInfeasible) << error;
      EXPECT_THAT(error.message(), HasSubstr("no node has 1 accel_x"));
    }
    EXPECT_THAT(worker_->seen, IsEmpty());
    EXPECT_EQ(submitter_->queued(), 0u);
  });
  // A later task of the shape asks again and fails the same way.
  Submit("t3");
  ASSERT_TRUE(Settled([&] { return delegate_->failures.size() == 3; }));
  EXPECT_THAT(Outcome("t3"), HasSubstr("no node has 1 accel_x"));
}

TEST_F(TaskSubmitterTest, InvalidFailsTheQueue) {
  Run([&] {
    agent_->script.push_back(LeaseReply(proto::RequestLeaseReply::INVALID,
                                        "3 TPU chips cannot be allocated"));
  });
  Submit("t1");
  ASSERT_TRUE(Settled([&] { return delegate_->failures.size() == 1; }));
  Run([&] {
    const absl::Status& error = delegate_->failures["t1"];
    EXPECT_EQ(KindOf(error), ErrorKind::kOther) << error;
    EXPECT_THAT(error.message(), HasSubstr("3 TPU chips"));
  });
}

TEST_F(TaskSubmitterTest, RepeatedWorkerStartFailuresFailTheQueueAfterThree) {
  Run([&] {
    for (int i = 0; i < 3; ++i) {
      agent_->script.push_back(LeaseReply(proto::RequestLeaseReply::FAILED,
                                          "worker exited during startup"));
    }
  });
  Submit("t1");
  ASSERT_TRUE(Settled([&] { return delegate_->failures.size() == 1; }));
  Run([&] {
    const absl::Status& error = delegate_->failures["t1"];
    EXPECT_EQ(KindOf(error), ErrorKind::kOther) << error;
    EXPECT_THAT(error.message(), HasSubstr("cannot start a worker"));
    EXPECT_THAT(error.message(), HasSubstr("worker exited during startup"));
    EXPECT_EQ(agent_->lease_requests.size(), 3u);
    EXPECT_EQ(submitter_->queued(), 0u);
  });
  // The count starts over: two more failures, then a grant, run the task.
  Run([&] {
    for (int i = 0; i < 2; ++i) {
      agent_->script.push_back(LeaseReply(proto::RequestLeaseReply::FAILED,
                                          "worker exited during startup"));
    }
    agent_->grant_to = worker_->address();
  });
  Submit("t2");
  ASSERT_TRUE(Settled([&] { return !Outcome("t2").empty(); }));
  EXPECT_EQ(Outcome("t2"), "ok:node-a:t2");
  Run([&] { EXPECT_EQ(agent_->lease_requests.size(), 6u); });
}

TEST_F(TaskSubmitterTest, FailuresBelowTheLimitAreRetried) {
  Run([&] {
    for (int i = 0; i < 2; ++i) {
      agent_->script.push_back(
          LeaseReply(proto::RequestLeaseReply::FAILED, "worker timed out"));
    }
    agent_->grant_to = worker_->address();
  });
  Submit("t1");
  ASSERT_TRUE(Settled([&] { return !Outcome("t1").empty(); }));
  EXPECT_EQ(Outcome("t1"), "ok:node-a:t1");
  Run([&] { EXPECT_EQ(agent_->lease_requests.size(), 3u); });
  // A success resets the count: two more failures do not fail a task.
  Run([&] {
    agent_->grant_to.clear();
    for (int i = 0; i < 2; ++i) {
      agent_->script.push_back(
          LeaseReply(proto::RequestLeaseReply::FAILED, "worker timed out"));
    }
  });
  // The idle lease takes hold-2 and keeps it: t3 must lease.
  Submit("hold-2");
  ASSERT_TRUE(Settled([&] { return worker_->seen.size() == 2; }));
  Run([&] { agent_->grant_to = worker_->address(); });
  Submit("t3");
  ASSERT_TRUE(Settled([&] { return !Outcome("t3").empty(); }));
  EXPECT_EQ(Outcome("t3"), "ok:node-a:t3");
  Run([&] { EXPECT_TRUE(delegate_->failures.empty()); });
}

TEST_F(TaskSubmitterTest, IdleLeaseIsReturnedAfterLeaseIdleMs) {
  Restart(/*lease_idle_ms=*/50);
  Run([&] { agent_->grant_to = worker_->address(); });
  Submit("t1");
  ASSERT_TRUE(Settled([&] { return !Outcome("t1").empty(); }));
  Run([&] {
    EXPECT_EQ(submitter_->leased_workers(), 1u);
    ASSERT_EQ(agent_->granted.size(), 1u);
  });
  // Idle for 49 ms on the loop's clock: kept.
  executor_.AdvanceMs(49);
  Run([&] { submitter_->Tick(); });
  EXPECT_THAT(agent_->returned, IsEmpty());
  executor_.AdvanceMs(1);
  Run([&] { submitter_->Tick(); });
  Run([&] {
    EXPECT_THAT(agent_->returned, ElementsAre(agent_->granted[0]));
    EXPECT_EQ(submitter_->leased_workers(), 0u);
  });
  // The next task leases anew.
  Submit("t2");
  ASSERT_TRUE(Settled([&] { return !Outcome("t2").empty(); }));
  Run([&] { EXPECT_EQ(agent_->lease_requests.size(), 2u); });
}

// An owner that runs one task after another keeps reusing its lease; once
// the lease is lease_reuse_ms old it goes back when idle, so that its next
// task asks the agent again, behind other owners waiting there.
TEST_F(TaskSubmitterTest, AnIdleLeaseIsReturnedOnceItIsLeaseReuseMsOld) {
  Restart(/*lease_idle_ms=*/60000);
  Run([&] { agent_->grant_to = worker_->address(); });
  Submit("t1");
  ASSERT_TRUE(Settled([&] { return !Outcome("t1").empty(); }));
  executor_.AdvanceMs(999);
  Submit("t2");  // reuses it, and it is idle again
  ASSERT_TRUE(Settled([&] { return !Outcome("t2").empty(); }));
  Run([&] { submitter_->Tick(); });
  Run([&] {
    EXPECT_THAT(agent_->returned, IsEmpty());
    EXPECT_EQ(agent_->lease_requests.size(), 1u);
  });
  executor_.AdvanceMs(1);
  Run([&] { submitter_->Tick(); });
  Run([&] { EXPECT_THAT(agent_->returned, ElementsAre(agent_->granted[0])); });
  Submit("t3");
  ASSERT_TRUE(Settled([&] { return !Outcome("t3").empty(); }));
  Run([&] { EXPECT_EQ(agent_->lease_requests.size(), 2u); });
}

TEST_F(TaskSubmitterTest, RecentlyUsedLeaseIsKeptAndReused) {
  Run([&] { agent_->grant_to = worker_->address(); });
  Submit("t1");
  ASSERT_TRUE(Settled([&] { return !Outcome("t1").empty(); }));
  for (int i = 0; i < 5; ++i) Run([&] { submitter_->Tick(); });
  Run([&] {
    EXPECT_THAT(agent_->returned, IsEmpty());
    EXPECT_EQ(submitter_->leased_workers(), 1u);
  });
  Submit("t2");
  ASSERT_TRUE(Settled([&] { return !Outcome("t2").empty(); }));
  Run([&] {
    EXPECT_EQ(agent_->lease_requests.size(), 1u);
    EXPECT_THAT(worker_->seen, ElementsAre("t1", "t2"));
  });
}

TEST_F(TaskSubmitterTest, BusyLeaseIsNotReturned) {
  Restart(/*lease_idle_ms=*/0);
  Run([&] { agent_->grant_to = worker_->address(); });
  Submit("hold-1");
  ASSERT_TRUE(Settled([&] { return worker_->held.size() == 1; }));
  for (int i = 0; i < 3; ++i) Run([&] { submitter_->Tick(); });
  Run([&] {
    EXPECT_THAT(agent_->returned, IsEmpty());
    proto::TaskResult result;
    result.set_ok(true);
    result.set_value("done");
    worker_->held[0].Reply(result);
  });
  ASSERT_TRUE(Settled([&] { return !Outcome("hold-1").empty(); }));
  EXPECT_EQ(Outcome("hold-1"), "ok:node-a:done");
  Run([&] { submitter_->Tick(); });
  EXPECT_EQ(agent_->returned.size(), 1u);
}

TEST_F(TaskSubmitterTest, IdleLeaseIsReturnedAtOnceWhenAnotherShapeWaits) {
  Run([&] { agent_->grant_to = worker_->address(); });
  Submit("t1");
  ASSERT_TRUE(Settled([&] { return !Outcome("t1").empty(); }));
  // Another shape waits for a lease (the agent keeps its request).
  Run([&] { agent_->grant_to.clear(); });
  Submit("big", 0, /*cpus=*/4);
  ASSERT_TRUE(Settled([&] { return agent_->lease_requests.size() == 2; }));
  // The idle lease may hold what it needs: returned despite 60 s idle time.
  Run([&] { submitter_->Tick(); });
  ASSERT_TRUE(Settled([&] { return agent_->returned.size() == 1; }));
  Run([&] {
    EXPECT_EQ(agent_->returned[0], agent_->granted[0]);
    EXPECT_EQ(submitter_->leased_workers(), 0u);
    EXPECT_EQ(submitter_->queued(), 1u);
  });
}

TEST_F(TaskSubmitterTest, LeaseGrantedAfterTheQueueEmptiedIsReturned) {
  // Two requests for two tasks; the first lease runs both.
  Run([&] {
    Enqueue("t1");
    Enqueue("t2");
  });
  ASSERT_TRUE(Settled([&] { return agent_->held.size() == 2; }));
  Run([&] { agent_->held[0].Reply(agent_->Grant(worker_->address())); });
  ASSERT_TRUE(Settled([&] { return delegate_->outcomes.size() == 2; }));
  Run([&] { agent_->held[1].Reply(agent_->Grant(worker_->address())); });
  ASSERT_TRUE(Settled([&] { return agent_->returned.size() == 1; }));
  Run([&] {
    EXPECT_EQ(agent_->returned[0], agent_->granted[1]);
    EXPECT_EQ(submitter_->leased_workers(), 1u);
  });
}

TEST_F(TaskSubmitterTest, AQueueThatRunsDryWithdrawsItsLeaseRequests) {
  Run([&] {
    agent_->honor_cancels = true;
    Enqueue("t1");
    Enqueue("t2");
  });
  ASSERT_TRUE(Settled([&] { return agent_->held.size() == 2; }));
  // The first lease runs both; the second request has nothing left to run.
  Run([&] { agent_->held[0].Reply(agent_->Grant(worker_->address())); });
  ASSERT_TRUE(Settled([&] { return delegate_->outcomes.size() == 2; }));
  ASSERT_TRUE(Settled([&] { return agent_->held_ids.size() == 1; }));
  Run([&] {
    ASSERT_EQ(agent_->lease_requests.size(), 2u);
    EXPECT_NE(agent_->lease_requests[0].request_id(),
              agent_->lease_requests[1].request_id());
    EXPECT_THAT(agent_->cancels,
                ElementsAre(agent_->lease_requests[1].request_id()));
    EXPECT_EQ(agent_->granted.size(), 1u);
  });
  // The next task runs on the kept lease; a later shortage asks anew.
  Submit("t3");
  ASSERT_TRUE(Settled([&] { return !Outcome("t3").empty(); }));
  Run([&] {
    Enqueue("t4");
    Enqueue("t5");
    Enqueue("t6");
  });
  ASSERT_TRUE(Settled([&] { return agent_->lease_requests.size() == 4; }));
  EXPECT_TRUE(Settled([&] { return delegate_->outcomes.size() == 6; }));
}

TEST_F(TaskSubmitterTest, WorkerDeathFailsTheRunningTaskAndRequeuesTheRest) {
  Run([&] {
    agent_->grant_to = worker_->address();
    agent_->exit_reply.set_exited(true);
    agent_->exit_reply.set_description("killed by signal 9 (Killed)");
  });
  // A first task measures the shape's run time (100 us): short enough to
  // pipeline.
  Submit("warm");
  ASSERT_TRUE(Settled([&] { return !Outcome("warm").empty(); }));
  // No agent is usable for more leases: the tasks pipeline on the worker.
  Run([&] {
    nodes_->MarkBad(agent_->address());
    ASSERT_EQ(nodes_->lease_agent(), "");
    Enqueue("hold-1");
    Enqueue("hold-2");
    Enqueue("hold-3");
  });
  ASSERT_TRUE(Settled([&] { return worker_->seen.size() == 4; }));
  Run([&] {
    EXPECT_THAT(worker_->seen,
                ElementsAre("warm", "hold-1", "hold-2", "hold-3"));
    EXPECT_EQ(agent_->lease_requests.size(), 1u);
    second_worker_ = NewWorker();
    agent_->grant_to = second_worker_->address();
    delegate_->built.clear();
    worker_->Die();
  });
  ASSERT_TRUE(Settled([&] { return !Outcome("hold-1").empty(); }));
  EXPECT_EQ(Outcome("hold-1"), "died:killed by signal 9 (Killed)");
  Run([&] {
    EXPECT_THAT(agent_->exit_requests, ElementsAre("node-a-worker-1"));
    EXPECT_EQ(delegate_->outcomes.count("hold-2"), 0u);
    EXPECT_EQ(delegate_->outcomes.count("hold-3"), 0u);
    EXPECT_EQ(submitter_->queued(), 2u);
    EXPECT_EQ(submitter_->leased_workers(), 0u);
  });
  // The agent is usable again: the others go to a new worker, in order.
  Run([&] {
    now_us_ += 3000000;
    submitter_->RefreshNodes();
  });
  ASSERT_TRUE(Settled([&] { return second_worker_->seen.size() == 2; }));
  Run([&] {
    EXPECT_THAT(delegate_->built, ElementsAre("hold-2", "hold-3"));
    EXPECT_THAT(second_worker_->seen, UnorderedElementsAre("hold-2", "hold-3"));
    EXPECT_EQ(delegate_->outcomes.count("hold-2"), 0u);
    EXPECT_EQ(submitter_->queued(), 0u);
  });
}

TEST_F(TaskSubmitterTest, WorkerDeathTheAgentCannotExplain) {
  Run([&] {
    agent_->grant_to = worker_->address();
    agent_->exit_reply.set_exited(false);
    agent_->exit_reply.set_description("still running");
  });
  Submit("hold-1");
  ASSERT_TRUE(Settled([&] { return worker_->seen.size() == 1; }));
  Run([&] { worker_->Die(); });
  ASSERT_TRUE(Settled([&] { return !Outcome("hold-1").empty(); }));
  EXPECT_THAT(Outcome("hold-1"), HasSubstr("died:connection lost ("));
  EXPECT_THAT(Outcome("hold-1"), HasSubstr("agent says: still running"));
}

TEST_F(TaskSubmitterTest, WorkerAndAgentBothGoneMeansTheNodeDied) {
  Run([&] { agent_->grant_to = worker_->address(); });
  Submit("hold-1");
  ASSERT_TRUE(Settled([&] { return worker_->seen.size() == 1; }));
  std::string agent_address;
  Run([&] {
    agent_address = agent_->address();
    agent_->Die();
    worker_->Die();
  });
  ASSERT_TRUE(Settled([&] { return !Outcome("hold-1").empty(); }));
  EXPECT_THAT(Outcome("hold-1"),
              HasSubstr("is unreachable too: the node died"));
  EXPECT_THAT(Outcome("hold-1"), HasSubstr(agent_address));
  Run([&] { EXPECT_EQ(nodes_->lease_agent(), ""); });
}

TEST_F(TaskSubmitterTest, WorkersOnANodeDeclaredDeadAreLost) {
  Run([&] {
    agent_->grant_to = worker_->address();
    agent_->exit_reply.set_exited(true);
    agent_->exit_reply.set_description("node lost");
    second_agent_ = NewAgent("node-b");
    second_worker_ = NewWorker();
    second_agent_->grant_to = second_worker_->address();
    SetNodes({Node(*agent_), Node(*second_agent_, true, "127.0.0.2")});
  });
  Submit("hold-1");
  ASSERT_TRUE(Settled([&] { return worker_->seen.size() == 1; }));
  // The head stops hearing from node-a, though its connections stay open.
  Run([&] {
    proto::ClusterStatus status;
    *status.add_nodes() = Node(*agent_, /*alive=*/false);
    *status.add_nodes() = Node(*second_agent_, true, "127.0.0.2");
    delegate_->status = status;
    submitter_->RefreshNodes();
  });
  ASSERT_TRUE(Settled([&] { return !Outcome("hold-1").empty(); }));
  EXPECT_EQ(Outcome("hold-1"), "died:node lost");
  Run([&] {
    EXPECT_EQ(delegate_->fetches, 1);
    EXPECT_EQ(submitter_->leased_workers(), 0u);
    EXPECT_EQ(nodes_->lease_agent(), second_agent_->address());
  });
  Submit("t2");
  ASSERT_TRUE(Settled([&] { return !Outcome("t2").empty(); }));
  EXPECT_EQ(Outcome("t2"), "ok:node-b:t2");
}

TEST_F(TaskSubmitterTest, UnreachableAgentIsMarkedBadAndLeasingMovesOn) {
  std::string gone;
  Run([&] {
    // An agent whose port refuses.
    auto dead = NewAgent("node-gone");
    gone = dead->address();
    proto::NodeInfo gone_node = Node(*dead);
    dead.reset();
    second_agent_ = NewAgent("node-b");
    second_agent_->grant_to = worker_->address();
    SetNodes({gone_node, Node(*second_agent_, true, "127.0.0.2")});
    ASSERT_EQ(nodes_->lease_agent(), gone);
  });
  Submit("t1");
  // Refused: the queue waits 200 ms, asks the head for the nodes and leases
  // elsewhere.
  executor_.AdvanceMs(199);
  EXPECT_TRUE(Outcome("t1").empty());
  EXPECT_EQ(delegate_->fetches, 0);
  executor_.AdvanceMs(1);
  ASSERT_TRUE(Settled([&] { return !Outcome("t1").empty(); }));
  EXPECT_EQ(Outcome("t1"), "ok:node-b:t1");
  Run([&] {
    EXPECT_EQ(nodes_->lease_agent(), second_agent_->address());
    // It asked the head for the nodes again before retrying.
    EXPECT_GE(delegate_->fetches, 1);
    EXPECT_EQ(second_agent_->lease_requests.size(), 1u);
  });
}

TEST_F(TaskSubmitterTest, ReturnAllReturnsEveryLeaseAndCallsDone) {
  Run([&] { agent_->grant_to = worker_->address(); });
  Submit("t1", 0, /*cpus=*/1);
  Submit("t2", 0, /*cpus=*/2);
  ASSERT_TRUE(Settled([&] { return delegate_->outcomes.size() == 2; }));
  Submit("hold-3", 0, /*cpus=*/1);
  ASSERT_TRUE(Settled([&] { return worker_->held.size() == 1; }));
  bool done = false;
  Run([&] {
    ASSERT_EQ(submitter_->leased_workers(), 2u);
    submitter_->ReturnAll([&] { done = true; });
    EXPECT_EQ(submitter_->leased_workers(), 0u);
  });
  ASSERT_TRUE(Settled([&] { return done; }));
  Run([&] {
    EXPECT_THAT(agent_->returned, UnorderedElementsAreArray(agent_->granted));
    EXPECT_EQ(agent_->returned.size(), 2u);
  });
}

TEST_F(TaskSubmitterTest, ReturnAllWithNoLeasesIsDoneAtOnce) {
  bool done = false;
  Run([&] { submitter_->ReturnAll([&] { done = true; }); });
  EXPECT_TRUE(done);
}

TEST_F(TaskSubmitterTest, ReturnAllIsDoneEvenWhenTheAgentIsSilent) {
  Run([&] { agent_->grant_to = worker_->address(); });
  Submit("t1");
  ASSERT_TRUE(Settled([&] { return !Outcome("t1").empty(); }));
  bool done = false;
  Run([&] {
    agent_->hold_returns = true;
    submitter_->ReturnAll([&] { done = true; });
  });
  // At its 1 s deadline.
  executor_.AdvanceMs(999);
  EXPECT_FALSE(done);
  executor_.AdvanceMs(1);
  EXPECT_TRUE(done);
  Run([&] { EXPECT_EQ(agent_->returned.size(), 1u); });
}

TEST_F(TaskSubmitterTest, TaskGoneBeforeItsPushIsSkipped) {
  Run([&] {
    agent_->grant_to = worker_->address();
    delegate_->gone.insert("gone");
    Enqueue("gone");
    Enqueue("t2");
  });
  ASSERT_TRUE(Settled([&] { return !Outcome("t2").empty(); }));
  EXPECT_EQ(Outcome("t2"), "ok:node-a:t2");
  Run([&] {
    EXPECT_THAT(worker_->seen, ElementsAre("t2"));
    EXPECT_EQ(delegate_->outcomes.count("gone"), 0u);
    EXPECT_EQ(submitter_->queued(), 0u);
    // It was asked for, once.
    EXPECT_EQ(
        std::count(delegate_->built.begin(), delegate_->built.end(), "gone"),
        1);
  });
}

TEST_F(TaskSubmitterTest, PushNeverSentIsNoWorkerDeath) {
  // The lease names a worker that is already gone: the push is never
  // written, so the task ran nowhere and goes to the next worker for free.
  std::string dead_worker;
  Run([&] {
    auto w = NewWorker();
    dead_worker = w->address();
    w.reset();
    agent_->script.push_back(agent_->Grant(dead_worker));
    agent_->grant_to = worker_->address();
    agent_->exit_reply.set_exited(true);
    agent_->exit_reply.set_description("exited with code 1");
  });
  Submit("t1");
  ASSERT_TRUE(Settled([&] { return !Outcome("t1").empty(); }));
  EXPECT_EQ(Outcome("t1"), "ok:node-a:t1");
}

TEST_F(TaskSubmitterTest, SkippedTaskLeavesNoWorkerIdleWhileTasksWait) {
  Run([&] { agent_->grant_to = worker_->address(); });
  Submit("hold-1");
  ASSERT_TRUE(Settled([&] { return worker_->held.size() == 1; }));
  Run([&] {
    agent_->grant_to.clear();  // further lease requests wait
    delegate_->gone.insert("gone");
    Enqueue("gone");
    Enqueue("t2");
  });
  ASSERT_TRUE(Settled([&] { return agent_->held.size() == 2; }));
  Run([&] {
    proto::TaskResult r;
    r.set_ok(true);
    worker_->held[0].Reply(r);
  });
  ASSERT_TRUE(Settled([&] { return !Outcome("hold-1").empty(); }));
  // The worker skips the gone task and takes t2.
  EXPECT_TRUE(Settled([&] { return !Outcome("t2").empty(); }));
}

TEST_F(TaskSubmitterTest, GrantAfterClearIsReturnedAndLeavesNoTrace) {
  Run([&] { Enqueue("t1"); });
  ASSERT_TRUE(Settled([&] { return agent_->held.size() == 1; }));
  Run([&] {
    submitter_->Clear();
    agent_->held[0].Reply(agent_->Grant(worker_->address()));
  });
  ASSERT_TRUE(Settled([&] { return agent_->returned.size() == 1; }));
  Run([&] { Enqueue("t2"); });
  executor_.AdvanceMs(300);
  Run([&] { EXPECT_EQ(agent_->lease_requests.size(), 2u); });
}

// The agent dies while a lease request waits there: the request fails, the
// agent is out of use, and the queue leases from another node.
TEST_F(TaskSubmitterTest, AnAgentThatDiesMidRequestIsLeftForAnother) {
  second_agent_ = NewAgent("node-b");
  second_agent_->grant_to = worker_->address();
  SetNodes({Node(*agent_), Node(*second_agent_, true, "127.0.0.2")});
  Submit("t1");
  ASSERT_EQ(agent_->held.size(), 1u);
  agent_->Die();
  EXPECT_FALSE(agent_->held[0].connected());
  // Its node is still alive to the head, but the agent stays out of use.
  executor_.AdvanceMs(200);
  EXPECT_EQ(Outcome("t1"), "ok:node-b:t1");
  EXPECT_EQ(nodes_->lease_agent(), second_agent_->address());
  EXPECT_EQ(second_agent_->lease_requests.size(), 1u);
  EXPECT_TRUE(delegate_->failures.empty());
}

// A worker whose node the head declared dead is lost at once; its answer,
// if it comes after all, changes nothing.
TEST_F(TaskSubmitterTest, AReplyFromAWorkerAlreadyLostIsIgnored) {
  agent_->grant_to = worker_->address();
  agent_->exit_reply.set_exited(true);
  agent_->exit_reply.set_description("node lost");
  Submit("hold-1");
  ASSERT_EQ(worker_->held.size(), 1u);
  SetNodes({Node(*agent_, /*alive=*/false)});
  Run([&] { submitter_->RefreshNodes(); });
  EXPECT_EQ(Outcome("hold-1"), "died:node lost");
  proto::TaskResult late;
  late.set_ok(true);
  late.set_value("late");
  Run([&] { worker_->held[0].Reply(late); });
  EXPECT_EQ(Outcome("hold-1"), "died:node lost");
  EXPECT_EQ(submitter_->leased_workers(), 0u);
}

// A node of a host that joined after the program started has no copy of
// it: its answers are no failures while the runtime sends one; the queue
// asks once, waits without leasing, then leases again naming the copy.
TEST_F(TaskSubmitterTest, ANodeWithoutTheProgramWaitsForACopyThenRunsTasks) {
  Restart(/*lease_idle_ms=*/60000, /*blob_hash=*/"", /*program_wanted=*/true);
  Run([&] {
    // More than kMaxLeaseFailures: none of them counts.
    for (int i = 0; i < 4; ++i) agent_->script.push_back(NoProgram());
  });
  // Four requests go out before the first answer comes.
  Run([&] {
    for (int i = 0; i < 4; ++i) Enqueue(absl::StrCat("t", i));
  });
  ASSERT_TRUE(Settled([&] { return agent_->lease_requests.size() == 4; }));
  ASSERT_TRUE(Settled([&] { return program_asks_ == 1; }));
  // While the copy is on its way the queue asks for no lease: a request of
  // another shape, sent after a refresh of the nodes, comes alone.
  Run([&] { submitter_->RefreshNodes(); });
  Submit("other-shape", /*depth=*/0, /*cpus=*/2);
  ASSERT_TRUE(Settled([&] { return RequestsFor(*agent_, 2).size() == 1; }));
  Run([&] {
    EXPECT_EQ(RequestsFor(*agent_, 1).size(), 4u);
    EXPECT_EQ(program_asks_, 1);
    EXPECT_TRUE(delegate_->failures.empty());
    for (const auto& r : agent_->lease_requests) EXPECT_EQ(r.blob_hash(), "");
    agent_->grant_to = worker_->address();
    submitter_->SetProgramCopy(std::string("copy-hash"));
  });
  for (int i = 0; i < 4; ++i) {
    std::string task = absl::StrCat("t", i);
    ASSERT_TRUE(Settled([&] { return !Outcome(task).empty(); }));
    EXPECT_EQ(Outcome(task), absl::StrCat("ok:node-a:", task));
  }
  Run([&] {
    std::vector<proto::RequestLeaseRequest> requests = RequestsFor(*agent_, 1);
    ASSERT_GT(requests.size(), 4u);
    for (size_t i = 4; i < requests.size(); ++i) {
      EXPECT_EQ(requests[i].blob_hash(), "copy-hash");
    }
    EXPECT_EQ(program_asks_, 1);
  });
}

// The copy named in the request is not there either (the head lost it):
// a real failure, counted as any other.
TEST_F(TaskSubmitterTest, ANodeWithoutTheCopyNamedIsAFailure) {
  Restart(/*lease_idle_ms=*/60000, /*blob_hash=*/"copy-hash",
          /*program_wanted=*/true);
  Run([&] {
    for (int i = 0; i < 3; ++i) agent_->script.push_back(NoProgram());
  });
  Submit("t1");
  ASSERT_TRUE(Settled([&] { return delegate_->failures.size() == 1; }));
  Run([&] {
    EXPECT_THAT(delegate_->failures["t1"].message(),
                HasSubstr("cannot start a worker: the driver's program"));
    EXPECT_EQ(agent_->lease_requests.size(), 3u);
    for (const auto& r : agent_->lease_requests) {
      EXPECT_EQ(r.blob_hash(), "copy-hash");
    }
    EXPECT_EQ(program_asks_, 0);
  });
}

// Without a runtime to send copies, a node without the program is a
// failure as before.
TEST_F(TaskSubmitterTest, WithNoOneToSendACopyANodeWithoutItIsAFailure) {
  Run([&] {
    for (int i = 0; i < 3; ++i) agent_->script.push_back(NoProgram());
  });
  Submit("t1");
  ASSERT_TRUE(Settled([&] { return delegate_->failures.size() == 1; }));
  Run([&] { EXPECT_EQ(agent_->lease_requests.size(), 3u); });
}

TEST_F(TaskSubmitterTest, ACopyThatCannotBeSentFailsTheWaitingTasks) {
  Restart(/*lease_idle_ms=*/60000, /*blob_hash=*/"", /*program_wanted=*/true);
  Run([&] { agent_->script.push_back(NoProgram()); });
  Submit("t1");
  ASSERT_TRUE(Settled([&] { return program_asks_ == 1; }));
  Run([&] {
    submitter_->SetProgramCopy(
        absl::UnavailableError("the head is unreachable"));
  });
  ASSERT_TRUE(Settled([&] { return delegate_->failures.size() == 1; }));
  Run([&] {
    const absl::Status& error = delegate_->failures["t1"];
    EXPECT_EQ(KindOf(error), ErrorKind::kOther) << error;
    EXPECT_THAT(error.message(),
                HasSubstr("the driver's program is not on this host"));
    EXPECT_THAT(error.message(), HasSubstr("the head is unreachable"));
  });
  // A later node without the program asks again.
  Run([&] { agent_->script.push_back(NoProgram()); });
  Submit("t2");
  ASSERT_TRUE(Settled([&] { return program_asks_ == 2; }));
}

}  // namespace
}  // namespace shoal::internal
