#include "agent/lease_service.h"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "accel/tpu.h"
#include "agent/agent_testing.h"
#include "agent/cluster_view.h"
#include "gtest/gtest.h"

namespace shoal::agent {
namespace {

using Outcome = proto::RequestLeaseReply;

ResourceSet R(const std::map<std::string, double>& amounts) {
  return *ResourceSet::FromDoubles(amounts);
}

// Workers in memory: Add names them w1, w2...; Start records the start and
// leaves answering to the test (WorkerStarted, StartFailed).
class FakeLauncher : public WorkerLauncher {
 public:
  absl::Status ClaimDevices(const DeviceIds& devices) override {
    claimed.push_back(devices);
    return claim_error;
  }
  std::optional<WorkerAddress> Reuse(
      const Lease& lease, const proto::RequestLeaseRequest&) override {
    auto it = idle.find(DeviceKey(lease.devices));
    if (it == idle.end()) return std::nullopt;
    WorkerAddress w = it->second;
    idle.erase(it);
    return w;
  }
  std::string Add(const Lease& lease,
                  const proto::RequestLeaseRequest&) override {
    std::string id = "w" + std::to_string(++added);
    devices_of[id] = lease.devices;
    return id;
  }
  void Start(const std::string& worker_id,
             const proto::RequestLeaseRequest&) override {
    started.push_back(worker_id);
  }
  void LeaseEnded(const std::string& worker_id, bool kill,
                  const std::string& why) override {
    ended.emplace_back(worker_id, kill, why);
  }
  bool Knows(const std::string& worker_id) override {
    return running.count(worker_id) > 0;
  }
  std::optional<std::string> ExitOf(const std::string& worker_id) override {
    auto it = exits.find(worker_id);
    if (it == exits.end()) return std::nullopt;
    return it->second;
  }
  absl::Status CancelTask(const std::string& worker_id, int32_t, bool,
                          bool) override {
    return absl::NotFoundError(worker_id);
  }
  void Describe(const std::string& worker_id,
                proto::LeaseInfo* info) const override {
    info->set_worker_pid(42);
    info->set_starting(running.count(worker_id) == 0);
  }

  absl::Status claim_error = absl::OkStatus();
  std::vector<DeviceIds> claimed;
  std::map<std::string, WorkerAddress> idle;  // by device key
  int added = 0;
  std::map<std::string, DeviceIds> devices_of;
  std::vector<std::string> started;
  std::vector<std::tuple<std::string, bool, std::string>> ended;
  std::set<std::string> running;
  std::map<std::string, std::string> exits;
};

// Placement group `pg` of one bundle (index 0) of `shape`.
proto::BundleReservation OneBundle(const std::string& pg,
                                   const ResourceSet& shape) {
  proto::BundleReservation r;
  r.set_pg_id(pg);
  r.add_indices(0);
  shape.ToProto(r.add_bundles());
  return r;
}

class LeaseServiceTest : public ::testing::Test {
 protected:
  // A node n1 with `resources`; TPU chips among them get device ids and are
  // validated as a 4-chip host's.
  void MakeService(const ResourceSet& resources, ClusterView* view = nullptr) {
    LeaseServiceOptions o;
    o.node_id = "n1";
    o.address = "10.0.0.1:7000";
    o.resources = resources;
    if (int gpus = static_cast<int>(resources.GetDouble("GPU")); gpus > 0) {
      o.devices["GPU"] = gpus;
    }
    int chips = static_cast<int>(resources.GetDouble("TPU"));
    if (chips > 0) {
      o.devices["TPU"] = chips;
      o.accelerators.push_back(std::make_shared<accel::TpuAcceleratorManager>(
          chips, chips, std::nullopt, std::vector<std::string>{}, "test"));
    }
    o.infeasible_grace_ms = 5000;
    o.log_events = false;
    o.view = view;
    o.report_soon = [this] { ++reports_; };
    o.can_ask_head = [this] { return head_answers_ != nullptr; };
    o.ask_group = [this](const std::string& pg, auto done) {
      asked_groups_.push_back(pg);
      head_calls_.push_back(std::move(done));
    };
    service_ = std::make_unique<LeaseService>(std::move(o), &clock_, &workers_);
  }

  // Sends a request for `shape` from connection `conn`; its replies go to
  // the returned inbox.
  Inbox* Request(const ResourceSet& shape, uint64_t conn = 1,
                 const std::string& request_id = "", int depth = 0,
                 const std::string& actor_id = "") {
    proto::RequestLeaseRequest r;
    shape.ToProto(r.mutable_shape());
    r.set_job_id("job1");
    r.set_request_id(request_id);
    r.set_depth(depth);
    r.set_actor_id(actor_id);
    inboxes_.push_back(std::make_unique<Inbox>());
    Inbox* inbox = inboxes_.back().get();
    service_->RequestLease(r, std::make_unique<FakeRequester>(conn, inbox));
    return inbox;
  }

  // Starts the newest worker and returns the lease its requester got.
  proto::RequestLeaseReply StartNewest(Inbox* inbox) {
    const std::string& id = workers_.started.back();
    workers_.running.insert(id);
    EXPECT_EQ(service_->WorkerStarted({id, "10.0.0.1:9" + id, 4242}),
              LeaseService::Started::kGranted);
    EXPECT_EQ(inbox->replies.size(), 1u);
    return inbox->replies.back();
  }

  // The head answers the calls about groups (as it does: later).
  void HeadAnswers() {
    std::vector<std::function<void(absl::StatusOr<proto::PlacementGroupInfo>)>>
        calls;
    calls.swap(head_calls_);
    for (size_t i = 0; i < calls.size(); ++i) {
      calls[i](head_answers_(
          asked_groups_[asked_groups_.size() - calls.size() + i]));
    }
  }

  double Free(const std::string& name) const {
    return service_->resources().available.GetDouble(name);
  }

  proto::HeartbeatRequest Heartbeat() const {
    proto::HeartbeatRequest hb;
    service_->FillHeartbeat(&hb);
    return hb;
  }

  FakeClock clock_;
  FakeLauncher workers_;
  std::unique_ptr<LeaseService> service_;
  std::vector<std::unique_ptr<Inbox>> inboxes_;
  int reports_ = 0;
  std::vector<std::string> asked_groups_;
  std::vector<std::function<void(absl::StatusOr<proto::PlacementGroupInfo>)>>
      head_calls_;
  std::function<absl::StatusOr<proto::PlacementGroupInfo>(const std::string&)>
      head_answers_;
};

TEST_F(LeaseServiceTest, GrantsOnceTheNewWorkerStarts) {
  MakeService(R({{"CPU", 2}}));
  Inbox* a = Request(R({{"CPU", 1}}));
  // Taken at once, answered when the worker registers.
  EXPECT_EQ(Free("CPU"), 1);
  ASSERT_EQ(workers_.started, std::vector<std::string>{"w1"});
  EXPECT_TRUE(a->replies.empty());
  EXPECT_GT(reports_, 0);
  proto::RequestLeaseReply granted = StartNewest(a);
  EXPECT_EQ(granted.outcome(), Outcome::GRANTED);
  EXPECT_EQ(granted.worker_id(), "w1");
  EXPECT_EQ(granted.worker_address(), "10.0.0.1:9w1");
  EXPECT_EQ(granted.worker_pid(), 4242);
  EXPECT_EQ(granted.node_id(), "n1");
  ASSERT_NE(service_->leases().Find(granted.lease_id()), nullptr);

  proto::HeartbeatRequest hb = Heartbeat();
  ASSERT_EQ(hb.leases_size(), 1);
  EXPECT_EQ(hb.leases(0).lease_id(), granted.lease_id());
  EXPECT_EQ(hb.leases(0).worker_id(), "w1");
  EXPECT_EQ(hb.leases(0).job_id(), "job1");
  EXPECT_EQ(hb.leases(0).owner(), "10.0.0.9:1");
  EXPECT_EQ(hb.leases(0).worker_pid(), 42);  // the launcher's word
  EXPECT_EQ(hb.demands_size(), 0);
}

TEST_F(LeaseServiceTest, ReusesAnIdleWorkerAtOnce) {
  MakeService(R({{"CPU", 2}}));
  workers_.idle[DeviceKey({})] = {"old", "10.0.0.1:5555", 77};
  Inbox* a = Request(R({{"CPU", 1}}));
  ASSERT_EQ(a->replies.size(), 1u);
  EXPECT_EQ(a->replies[0].outcome(), Outcome::GRANTED);
  EXPECT_EQ(a->replies[0].worker_id(), "old");
  EXPECT_EQ(a->replies[0].worker_pid(), 77);
  EXPECT_TRUE(workers_.started.empty());
  EXPECT_EQ(service_->leases().Find(a->replies[0].lease_id())->worker_id,
            "old");
}

TEST_F(LeaseServiceTest, QueuesUntilALeaseIsReturned) {
  MakeService(R({{"CPU", 2}}));
  Inbox* a = Request(R({{"CPU", 2}}));
  std::string lease = StartNewest(a).lease_id();
  Inbox* b = Request(R({{"CPU", 2}}), /*conn=*/2);
  EXPECT_TRUE(b->replies.empty());
  EXPECT_EQ(service_->queued(), 1u);
  proto::HeartbeatRequest hb = Heartbeat();
  ASSERT_EQ(hb.demands_size(), 1);
  EXPECT_EQ(hb.demands(0).count(), 1);
  EXPECT_FALSE(hb.demands(0).infeasible());

  service_->ReturnLease(lease, /*kill_worker=*/false);
  ASSERT_EQ(workers_.ended.size(), 1u);
  EXPECT_EQ(workers_.ended[0], std::make_tuple(std::string("w1"), false,
                                               "its lease was returned"));
  EXPECT_EQ(service_->queued(), 0u);
  EXPECT_EQ(workers_.started.back(), "w2");  // the queued one goes now
  EXPECT_EQ(StartNewest(b).outcome(), Outcome::GRANTED);
  EXPECT_EQ(Free("CPU"), 0);
  // Returning an unknown or returned lease changes nothing.
  service_->ReturnLease(lease, true);
  EXPECT_EQ(workers_.ended.size(), 1u);
}

TEST_F(LeaseServiceTest, AnImpossibleRequestFailsAfterTheGracePeriod) {
  MakeService(R({{"CPU", 2}}));
  Inbox* a = Request(R({{"CPU", 8}}));
  EXPECT_TRUE(a->replies.empty());
  proto::HeartbeatRequest hb = Heartbeat();
  ASSERT_EQ(hb.demands_size(), 1);
  EXPECT_TRUE(hb.demands(0).infeasible());
  clock_.Advance(4000);
  EXPECT_TRUE(a->replies.empty());
  clock_.Advance(1500);
  ASSERT_EQ(a->replies.size(), 1u);
  EXPECT_EQ(a->replies[0].outcome(), Outcome::INFEASIBLE);
  EXPECT_TRUE(absl::StrContains(a->replies[0].error(), "CPU"))
      << a->replies[0].error();
  EXPECT_EQ(service_->queued(), 0u);
}

TEST_F(LeaseServiceTest, SpillsToANodeOfTheViewThatHasItFree) {
  ClusterView view;
  proto::HeartbeatReply reply;
  reply.set_view_epoch(1);
  reply.set_view_version(1);
  reply.set_full_view(true);
  proto::NodeInfo* n2 = reply.add_nodes();
  n2->set_node_id("n2");
  n2->set_address("10.0.0.2:7000");
  n2->set_alive(true);
  R({{"CPU", 8}}).ToProto(n2->mutable_total());
  R({{"CPU", 8}}).ToProto(n2->mutable_available());
  view.Apply(reply);
  MakeService(R({{"CPU", 2}}), &view);
  Inbox* a = Request(R({{"CPU", 8}}));
  ASSERT_EQ(a->replies.size(), 1u);
  EXPECT_EQ(a->replies[0].outcome(), Outcome::SPILLBACK);
  EXPECT_EQ(a->replies[0].spillback_node_id(), "n2");
  EXPECT_EQ(a->replies[0].spillback_address(), "10.0.0.2:7000");
  // Counted against n2 until the next view: it has no 8 CPUs free now.
  EXPECT_EQ(ResourceSet::FromProto(view.nodes()[0].available()).Get("CPU"), 0);
  EXPECT_TRUE(workers_.started.empty());
}

TEST_F(LeaseServiceTest, RejectsWhatTheAcceleratorsCannotGive) {
  MakeService(R({{"CPU", 4}, {"TPU", 4}}));
  Inbox* a = Request(R({{"TPU", 3}}));
  ASSERT_EQ(a->replies.size(), 1u);
  EXPECT_EQ(a->replies[0].outcome(), Outcome::INVALID);
  EXPECT_FALSE(a->replies[0].error().empty());
  EXPECT_EQ(Free("TPU"), 4);
}

TEST_F(LeaseServiceTest, CancelAnswersTheWaitingRequest) {
  MakeService(R({{"CPU", 1}}));
  StartNewest(Request(R({{"CPU", 1}})));
  Inbox* b = Request(R({{"CPU", 1}}), /*conn=*/2, "b/1");
  EXPECT_FALSE(service_->CancelRequest(1, "b/1"));  // another requester's
  EXPECT_FALSE(service_->CancelRequest(2, "b/9"));
  EXPECT_TRUE(service_->CancelRequest(2, "b/1"));
  ASSERT_EQ(b->replies.size(), 1u);
  EXPECT_EQ(b->replies[0].outcome(), Outcome::CANCELED);
  EXPECT_EQ(Heartbeat().demands_size(), 0);
  EXPECT_FALSE(service_->CancelRequest(2, "b/1"));
}

TEST_F(LeaseServiceTest, AWorkerThatDiesGivesItsLeaseBack) {
  MakeService(R({{"CPU", 1}}));
  std::string lease = StartNewest(Request(R({{"CPU", 1}}))).lease_id();
  Inbox* b = Request(R({{"CPU", 1}}), /*conn=*/2);
  service_->WorkerExited("w1", lease, "worker pid 5 exited with code 1");
  EXPECT_EQ(service_->leases().Find(lease), nullptr);
  // What it held goes to the waiting request.
  EXPECT_EQ(workers_.started.back(), "w2");
  EXPECT_EQ(StartNewest(b).outcome(), Outcome::GRANTED);
}

TEST_F(LeaseServiceTest, AWorkerThatDiesStartingFailsItsRequest) {
  MakeService(R({{"CPU", 1}}));
  Inbox* a = Request(R({{"CPU", 1}}));
  std::string lease = service_->leases().leases().begin()->first;
  service_->WorkerExited("w1", lease, "worker pid 5 killed by signal 9");
  ASSERT_EQ(a->replies.size(), 1u);
  EXPECT_EQ(a->replies[0].outcome(), Outcome::FAILED);
  EXPECT_EQ(a->replies[0].error(), "worker pid 5 killed by signal 9");
  EXPECT_EQ(Free("CPU"), 1);
  // Registering late grants nothing.
  EXPECT_EQ(service_->WorkerStarted({"w1", "x:1", 5}),
            LeaseService::Started::kNotAwaited);
}

TEST_F(LeaseServiceTest, AStartFailureSaysWhetherTheProgramIsMissing) {
  MakeService(R({{"CPU", 1}}));
  Inbox* a = Request(R({{"CPU", 1}}));
  std::string lease = service_->leases().leases().begin()->first;
  service_->StartFailed("w1", lease, absl::NotFoundError("no copy of ./prog"),
                        /*needs_program=*/true);
  ASSERT_EQ(a->replies.size(), 1u);
  EXPECT_EQ(a->replies[0].outcome(), Outcome::FAILED);
  EXPECT_TRUE(a->replies[0].needs_program());
  EXPECT_EQ(a->replies[0].error(), "no copy of ./prog");
  EXPECT_EQ(service_->leases().size(), 0u);
  EXPECT_EQ(Free("CPU"), 1);
}

TEST_F(LeaseServiceTest, ALeaseGoneBeforeItsWorkerStartsLeavesItIdle) {
  MakeService(R({{"CPU", 1}}));
  Request(R({{"CPU", 1}}));
  service_->OnDisconnect(1);
  EXPECT_EQ(service_->leases().size(), 0u);
  EXPECT_EQ(service_->WorkerStarted({"w1", "x:1", 5}),
            LeaseService::Started::kLeaseGone);
}

TEST_F(LeaseServiceTest, ADepartedRequesterLosesItsLeasesButNotActors) {
  MakeService(R({{"CPU", 4}}));
  std::string task = StartNewest(Request(R({{"CPU", 1}}))).lease_id();
  std::string actor =
      StartNewest(Request(R({{"CPU", 1}}), 1, "", 0, "actor1")).lease_id();
  std::string other = StartNewest(Request(R({{"CPU", 1}}), 2)).lease_id();
  Inbox* queued = Request(R({{"CPU", 4}}), 1);
  service_->OnDisconnect(1);
  EXPECT_EQ(service_->leases().Find(task), nullptr);
  EXPECT_NE(service_->leases().Find(actor), nullptr);  // the head's
  EXPECT_NE(service_->leases().Find(other), nullptr);
  EXPECT_EQ(service_->queued(), 0u);
  EXPECT_TRUE(queued->replies.empty());
  ASSERT_EQ(workers_.ended.size(), 1u);
  EXPECT_EQ(workers_.ended[0], std::make_tuple(std::string("w1"), true,
                                               "its driver disconnected"));
  EXPECT_EQ(Free("CPU"), 2);
}

TEST_F(LeaseServiceTest, ARequesterThatLeftWhileWaitingGetsNothing) {
  MakeService(R({{"CPU", 1}}));
  std::string lease = StartNewest(Request(R({{"CPU", 1}}))).lease_id();
  Inbox* b = Request(R({{"CPU", 1}}), 2);
  b->connected = false;
  service_->ReturnLease(lease, false);
  EXPECT_TRUE(b->replies.empty());
  EXPECT_EQ(service_->queued(), 0u);
  EXPECT_EQ(Free("CPU"), 1);
}

TEST_F(LeaseServiceTest, BundlesPrepareCommitAndCancel) {
  MakeService(R({{"CPU", 4}}));
  proto::BundleReservation r = OneBundle("pg1", R({{"CPU", 2}}));
  ASSERT_TRUE(service_->PrepareBundles(r).ok());
  EXPECT_TRUE(service_->PrepareBundles(r).ok());  // a retry
  EXPECT_EQ(Free("CPU"), 2);
  // A task of the group waits for the commit; the head says it is placed.
  head_answers_ = [](const std::string&) {
    proto::PlacementGroupInfo info;
    info.set_state(proto::PlacementGroupInfo::PENDING);
    return info;
  };
  Inbox* a = Request(R({{"CPU_group_0_pg1", 1}}));
  EXPECT_EQ(asked_groups_, std::vector<std::string>{"pg1"});
  HeadAnswers();
  EXPECT_TRUE(a->replies.empty());
  ASSERT_TRUE(service_->CommitBundles("pg1").ok());
  EXPECT_EQ(Free("CPU_group_0_pg1"), 1);  // one of two is the task's
  proto::RequestLeaseReply granted = StartNewest(a);
  EXPECT_EQ(granted.outcome(), Outcome::GRANTED);
  // Leases outside the group cannot use the group's CPU.
  Inbox* b = Request(R({{"CPU", 3}}), 2);
  EXPECT_TRUE(b->replies.empty());

  service_->CancelBundles("pg1");
  EXPECT_EQ(service_->leases().Find(granted.lease_id()), nullptr);
  ASSERT_FALSE(workers_.ended.empty());
  EXPECT_EQ(workers_.ended[0],
            std::make_tuple(std::string("w1"), true,
                            "its placement group was removed"));
  EXPECT_EQ(Free("CPU_group_0_pg1"), 0);
  // Its CPU went to the waiting request.
  EXPECT_EQ(StartNewest(b).outcome(), Outcome::GRANTED);
  EXPECT_EQ(Free("CPU"), 1);
}

TEST_F(LeaseServiceTest, AForgottenPrepareExpires) {
  MakeService(R({{"CPU", 4}}));
  proto::BundleReservation r = OneBundle("pg1", R({{"CPU", 4}}));
  ASSERT_TRUE(service_->PrepareBundles(r).ok());
  EXPECT_EQ(Free("CPU"), 0);
  clock_.Advance(9000);
  EXPECT_EQ(Free("CPU"), 0);
  clock_.Advance(1000);
  EXPECT_EQ(Free("CPU"), 4);
  EXPECT_EQ(service_->CommitBundles("pg1").code(), absl::StatusCode::kNotFound);
}

TEST_F(LeaseServiceTest, ARequestForARemovedGroupFailsAtOnce) {
  MakeService(R({{"CPU", 4}}));
  head_answers_ = [](const std::string&) {
    proto::PlacementGroupInfo info;
    info.set_state(proto::PlacementGroupInfo::REMOVED);
    return info;
  };
  Inbox* a = Request(R({{"CPU_group_pg9", 1}}));
  EXPECT_TRUE(a->replies.empty());
  HeadAnswers();
  ASSERT_EQ(a->replies.size(), 1u);
  EXPECT_EQ(a->replies[0].outcome(), Outcome::INVALID);
  EXPECT_TRUE(absl::StrContains(a->replies[0].error(), "pg9 was removed"))
      << a->replies[0].error();
}

TEST_F(LeaseServiceTest, GivesEachLeaseItsOwnTpuChips) {
  MakeService(R({{"CPU", 8}, {"TPU", 4}}));
  std::string first = StartNewest(Request(R({{"TPU", 2}}))).lease_id();
  StartNewest(Request(R({{"TPU", 2}})));
  EXPECT_EQ(workers_.devices_of["w1"], (DeviceIds{{"TPU", {0, 1}}}));
  EXPECT_EQ(workers_.devices_of["w2"], (DeviceIds{{"TPU", {2, 3}}}));
  EXPECT_EQ(workers_.claimed.size(), 2u);
  service_->ReturnLease(first, true);
  Request(R({{"TPU", 2}}));
  EXPECT_EQ(workers_.devices_of["w3"], (DeviceIds{{"TPU", {0, 1}}}));
}

TEST_F(LeaseServiceTest, GivesGpusWholeOrSharedByFractions) {
  MakeService(R({{"CPU", 8}, {"GPU", 2}}));
  Request(R({{"GPU", 1}}));
  Request(R({{"GPU", 0.5}}));
  Request(R({{"GPU", 0.5}}));
  Inbox* more = Request(R({{"GPU", 1}}));
  EXPECT_EQ(workers_.devices_of["w1"], (DeviceIds{{"GPU", {0}}}));
  // Fractions share the lowest free device and take it from no one.
  EXPECT_EQ(workers_.devices_of["w2"], (DeviceIds{{"GPU", {1}}}));
  EXPECT_EQ(workers_.devices_of["w3"], (DeviceIds{{"GPU", {1}}}));
  EXPECT_EQ(Free("GPU"), 0);
  EXPECT_TRUE(more->replies.empty());  // counted full: it waits
  EXPECT_EQ(workers_.added, 3);
}

TEST_F(LeaseServiceTest, ChipsThatCannotBeClaimedFailTheRequest) {
  MakeService(R({{"CPU", 8}, {"TPU", 4}}));
  workers_.claim_error =
      absl::FailedPreconditionError("pid 9 holds /tmp/libtpu_lockfile");
  Inbox* a = Request(R({{"TPU", 4}}));
  ASSERT_EQ(a->replies.size(), 1u);
  EXPECT_EQ(a->replies[0].outcome(), Outcome::FAILED);
  EXPECT_EQ(a->replies[0].error(), "pid 9 holds /tmp/libtpu_lockfile");
  EXPECT_EQ(service_->leases().size(), 0u);
  EXPECT_EQ(Free("TPU"), 4);
  // The chips were given back.
  workers_.claim_error = absl::OkStatus();
  Request(R({{"TPU", 4}}));
  EXPECT_EQ(workers_.devices_of["w1"], (DeviceIds{{"TPU", {0, 1, 2, 3}}}));
}

TEST_F(LeaseServiceTest, ABlockedWorkersCpuGoesToDeeperRequests) {
  MakeService(R({{"CPU", 1}}));
  std::string parent = StartNewest(Request(R({{"CPU", 1}}))).lease_id();
  Inbox* sibling = Request(R({{"CPU", 1}}), 2, "", /*depth=*/0);
  Inbox* child = Request(R({{"CPU", 1}}), 3, "", /*depth=*/1);
  service_->WorkerBlocked(parent, "someone-else", 0);  // not its worker
  EXPECT_TRUE(child->replies.empty());
  service_->WorkerBlocked(parent, "w1", 0);
  EXPECT_EQ(StartNewest(child).outcome(), Outcome::GRANTED);
  EXPECT_TRUE(sibling->replies.empty());
  EXPECT_TRUE(Heartbeat().leases(0).blocked() ||
              Heartbeat().leases(1).blocked());
  service_->WorkerUnblocked(parent, "w1");
  EXPECT_TRUE(service_->resources().OverCommitted());
}

TEST_F(LeaseServiceTest, WorkerExitWaitsForARunningWorker) {
  MakeService(R({{"CPU", 1}}));
  std::vector<proto::GetWorkerExitReply> got;
  auto done = [&](const proto::GetWorkerExitReply& r) { got.push_back(r); };
  service_->GetWorkerExit("nobody", done);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_FALSE(got[0].exited());
  EXPECT_EQ(got[0].description(), "this agent does not know the worker");

  workers_.running.insert("w7");
  service_->GetWorkerExit("w7", done);
  EXPECT_EQ(got.size(), 1u);  // waits
  clock_.Advance(300);
  workers_.exits["w7"] = "worker pid 7 killed by signal 9";
  clock_.Advance(100);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(got[1].exited());
  EXPECT_EQ(got[1].description(), "worker pid 7 killed by signal 9");

  workers_.running.insert("w8");
  service_->GetWorkerExit("w8", done);
  clock_.Advance(2100);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[2].description(), "the worker is still running");
}

TEST_F(LeaseServiceTest, AJobEntrypointReservesResources) {
  MakeService(R({{"CPU", 2}}));
  ASSERT_TRUE(service_->Reserve(R({{"CPU", 2}})).ok());
  EXPECT_EQ(service_->Reserve(R({{"CPU", 1}})).code(),
            absl::StatusCode::kResourceExhausted);
  Inbox* a = Request(R({{"CPU", 1}}));
  EXPECT_TRUE(a->replies.empty());
  service_->Unreserve(R({{"CPU", 2}}));
  EXPECT_EQ(StartNewest(a).outcome(), Outcome::GRANTED);
}

TEST_F(LeaseServiceTest, TimersDoNothingOnceTheServiceIsGone) {
  MakeService(R({{"CPU", 1}}));
  Request(R({{"CPU", 4}}));  // waits, with a timer
  proto::BundleReservation r = OneBundle("pg1", R({{"CPU", 1}}));
  ASSERT_TRUE(service_->PrepareBundles(r).ok());
  EXPECT_GT(clock_.pending(), 0u);
  service_.reset();
  EXPECT_EQ(clock_.pending(), 0u);
}

}  // namespace
}  // namespace shoal::agent
