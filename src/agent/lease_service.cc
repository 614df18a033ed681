#include "agent/lease_service.h"

#include <algorithm>
#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/cluster_view.h"
#include "agent/lease_policy.h"
#include "common/logging.h"
#include "common/random.h"

namespace shoal::agent {

LeaseService::LeaseService(LeaseServiceOptions options, Clock* clock,
                           WorkerLauncher* launcher)
    : options_(std::move(options)),
      clock_(clock),
      launcher_(launcher),
      node_{options_.resources, options_.resources},
      leases_(&node_),
      bundles_(options_.node_id, &node_),
      devices_(options_.devices) {}

LeaseService::~LeaseService() {
  *alive_ = false;
  if (dispatch_timer_ != 0) clock_->Cancel(dispatch_timer_);
  for (const auto& [pg, timer] : prepare_timers_) clock_->Cancel(timer);
}

void LeaseService::ReportSoon() {
  if (options_.report_soon) options_.report_soon();
}

// ---- Lease requests ----

void LeaseService::RequestLease(const proto::RequestLeaseRequest& request,
                                std::unique_ptr<LeaseRequester> requester) {
  PendingLease p;
  p.request = request;
  p.ask.shape = ResourceSet::FromProto(request.shape());
  p.ask.excluded_nodes.assign(request.excluded_nodes().begin(),
                              request.excluded_nodes().end());
  p.ask.no_spillback = request.no_spillback();
  p.ask.devices_valid = ValidateDevices(options_.accelerators, p.ask.shape);
  if (request.has_label_selector() && p.ask.devices_valid.ok()) {
    absl::StatusOr<LabelSelector> selector =
        LabelSelector::FromProto(request.label_selector());
    if (selector.ok()) {
      p.ask.selector = *std::move(selector);
    } else {
      p.ask.devices_valid = selector.status();  // answered INVALID
    }
  }
  p.ask.arrival_us = clock_->NowUs();
  p.requester = std::move(requester);
  p.seq = ++next_request_seq_;
  if (!TryPlace(p)) pending_.Push(std::move(p));
  ReportSoon();
}

// The withdrawn request is answered CANCELED (before the cancel itself is),
// and no longer counts as demand.
bool LeaseService::CancelRequest(uint64_t conn_id,
                                 const std::string& request_id) {
  std::optional<PendingLease> p = pending_.Take(conn_id, request_id);
  if (!p.has_value()) return false;
  Fail(*p, proto::RequestLeaseReply::CANCELED, "the requester withdrew it");
  ReportSoon();
  return true;
}

// Grants, spills back or fails `p`; false when it must wait.
bool LeaseService::TryPlace(PendingLease& p) {
  // A requester that left wants nothing (done: drop the request).
  if (p.requester == nullptr || !p.requester->connected()) return true;
  static const std::vector<proto::NodeInfo> kNoView;
  bool can_ask = options_.ask_group != nullptr &&
                 (options_.can_ask_head == nullptr || options_.can_ask_head());
  LocalNode here{options_.node_id,
                 options_.address,
                 node_,
                 options_.view != nullptr ? options_.view->nodes() : kNoView,
                 can_ask,
                 options_.infeasible_grace_ms * 1000,
                 leases_.Withheld(p.request.depth()),
                 &options_.labels};
  LeaseDecision d = DecideLease(p.ask, here, clock_->NowUs());
  switch (d.kind) {
    case LeaseDecision::Kind::kGrant:
      Grant(p);
      return true;
    case LeaseDecision::Kind::kSpillback: {
      if (options_.view != nullptr) {
        options_.view->CountSpillback(d.node_id, p.ask.shape);
      }
      proto::RequestLeaseReply reply;
      reply.set_outcome(proto::RequestLeaseReply::SPILLBACK);
      reply.set_spillback_address(d.node_address);
      reply.set_spillback_node_id(d.node_id);
      p.requester->Reply(reply);
      return true;
    }
    case LeaseDecision::Kind::kInvalid:
      Fail(p, proto::RequestLeaseReply::INVALID, d.message);
      return true;
    case LeaseDecision::Kind::kInfeasible:
      if (options_.log_events) SHOAL_LOG(WARNING) << d.message;
      Fail(p, proto::RequestLeaseReply::INFEASIBLE, d.message);
      return true;
    case LeaseDecision::Kind::kAskHeadAboutGroup:
    case LeaseDecision::Kind::kWait:
      return Wait(p, d);
  }
  return false;
}

bool LeaseService::Wait(PendingLease& p, const LeaseDecision& d) {
  if (d.kind == LeaseDecision::Kind::kAskHeadAboutGroup) {
    p.ask.group = GroupCheck::kAsking;
    AskAboutGroup(p.seq, d.group_id);
    p.infeasible = false;
    EnsureDispatchTimer(d.retry_at_us);
    return false;
  }
  p.infeasible = d.infeasible;
  if (d.retry_at_us != 0) EnsureDispatchTimer(d.retry_at_us);
  return false;
}

void LeaseService::Fail(const PendingLease& p,
                        proto::RequestLeaseReply::Outcome outcome,
                        const std::string& error) {
  if (p.requester == nullptr) return;
  proto::RequestLeaseReply reply;
  reply.set_outcome(outcome);
  reply.set_error(error);
  p.requester->Reply(reply);
}

// Asks the head about `group` for queued request `seq`: fails it at once
// when the group is gone, else lets it wait for the group's placement.
void LeaseService::AskAboutGroup(uint64_t seq, const std::string& group) {
  std::weak_ptr<bool> alive = alive_;
  options_.ask_group(group,
                     [this, alive, seq,
                      group](absl::StatusOr<proto::PlacementGroupInfo> info) {
                       if (!alive.expired()) GroupAnswered(seq, group, info);
                     });
}

void LeaseService::GroupAnswered(
    uint64_t seq, const std::string& group,
    const absl::StatusOr<proto::PlacementGroupInfo>& info) {
  PendingLease* p = pending_.Find(seq);
  if (p == nullptr) return;
  std::string gone = GroupGoneMessage(group, info);
  if (gone.empty()) {
    // Being placed (or the head cannot say): wait, and ask again after a
    // grace period.
    p->ask.group = GroupCheck::kBeingPlaced;
    p->ask.group_checked_us = clock_->NowUs();
    return;
  }
  Fail(*p, proto::RequestLeaseReply::INVALID, gone);
  pending_.Erase(seq);
  ReportSoon();
}

void LeaseService::EnsureDispatchTimer(int64_t at_us) {
  if (dispatch_timer_at_ != 0 && dispatch_timer_at_ <= at_us) return;
  if (dispatch_timer_ != 0) clock_->Cancel(dispatch_timer_);
  dispatch_timer_at_ = at_us;
  int64_t delay_ms = std::max<int64_t>(1, (at_us - clock_->NowUs()) / 1000 + 1);
  dispatch_timer_ = clock_->RunAfter(delay_ms, [this] {
    dispatch_timer_ = 0;
    dispatch_timer_at_ = 0;
    Dispatch();
  });
}

// Tries every queued request, deepest first (the queue's order).
void LeaseService::Dispatch() {
  std::deque<PendingLease> waiting = pending_.TakeAll();
  while (!waiting.empty()) {
    PendingLease p = std::move(waiting.front());
    waiting.pop_front();
    if (!TryPlace(p)) pending_.Push(std::move(p));
  }
}

void LeaseService::Grant(PendingLease& p) {
  const proto::RequestLeaseRequest& r = p.request;
  Lease lease;
  lease.id = RandomHex(8);
  lease.shape = p.ask.shape;
  lease.conn_id = p.requester->connection_id();
  lease.owner = p.requester->peer();
  lease.job_id = r.job_id();
  lease.actor_id = r.actor_id();
  lease.granted_us = clock_->NowUs();
  lease.devices = devices_.Take(BaseShape(p.ask.shape));
  if (absl::Status st = launcher_->ClaimDevices(lease.devices); !st.ok()) {
    devices_.Return(BaseShape(lease.shape), lease.devices).IgnoreError();
    return Fail(p, proto::RequestLeaseReply::FAILED, std::string(st.message()));
  }
  ReportSoon();
  if (std::optional<WorkerAddress> w = launcher_->Reuse(lease, r)) {
    lease.worker_id = w->id;
    ReplyGranted(*p.requester, leases_.Add(std::move(lease)), *w);
    return;
  }
  std::string worker_id = launcher_->Add(lease, r);
  lease.worker_id = worker_id;
  starting_[worker_id] = {lease.id, std::move(p.requester)};
  leases_.Add(std::move(lease));
  launcher_->Start(worker_id, r);
}

void LeaseService::ReplyGranted(const LeaseRequester& requester,
                                const Lease& lease, const WorkerAddress& w) {
  proto::RequestLeaseReply reply;
  reply.set_outcome(proto::RequestLeaseReply::GRANTED);
  reply.set_lease_id(lease.id);
  reply.set_worker_id(w.id);
  reply.set_worker_address(w.address);
  reply.set_worker_pid(w.pid);
  reply.set_node_id(options_.node_id);
  requester.Reply(reply);
}

void LeaseService::DropLease(const std::string& lease_id) {
  std::optional<Lease> lease = leases_.Remove(lease_id);
  if (!lease.has_value()) return;
  absl::Status st = devices_.Return(BaseShape(lease->shape), lease->devices);
  if (!st.ok()) SHOAL_LOG(ERROR) << "lease " << lease->id << ": " << st;
  ReportSoon();
}

void LeaseService::ReturnLease(const std::string& lease_id, bool kill_worker,
                               const std::string& why) {
  const Lease* lease = leases_.Find(lease_id);
  if (lease == nullptr) return;
  std::string worker_id = lease->worker_id;
  DropLease(lease_id);
  launcher_->LeaseEnded(worker_id, kill_worker, why);
  Dispatch();
}

void LeaseService::OnDisconnect(uint64_t conn_id) {
  // Its queued requests go first: releasing its leases below hands the
  // freed resources to what waits, which must not be the departed
  // requester's own requests (their leases would belong to nobody).
  size_t dropped = pending_.DropConnection(conn_id);
  std::vector<std::string> gone;
  size_t kept = 0;
  for (const std::string& id : leases_.HeldBy(conn_id)) {
    // An actor's lease is the head's, and outlives its connection: a head
    // that restarts takes the actor up again, and returns the leases of
    // actors it does not know (docs/design/durability.md).
    if (!leases_.Find(id)->actor_id.empty()) {
      ++kept;
    } else {
      gone.push_back(id);
    }
  }
  if (options_.log_events && (!gone.empty() || dropped > 0 || kept > 0)) {
    SHOAL_LOG(INFO) << "requester " << conn_id << " left: releasing "
                    << gone.size() << " lease(s), dropping " << dropped
                    << " queued request(s)"
                    << (kept > 0 ? absl::StrCat(", keeping ", kept,
                                                " actor lease(s) for the head")
                                 : std::string());
  }
  // The requester is gone: its workers may be mid-task for nobody.
  for (const auto& id : gone) {
    ReturnLease(id, /*kill_worker=*/true, "its driver disconnected");
  }
  ReportSoon();
}

// ---- Workers ----

LeaseService::Started LeaseService::WorkerStarted(const WorkerAddress& w) {
  auto it = starting_.find(w.id);
  if (it == starting_.end()) return Started::kNotAwaited;
  PendingGrant grant = std::move(it->second);
  starting_.erase(it);
  const Lease* lease = leases_.Find(grant.lease_id);
  // The requester went away while the worker started.
  if (lease == nullptr) return Started::kLeaseGone;
  ReplyGranted(*grant.requester, *lease, w);
  return Started::kGranted;
}

// Tells the requester waiting for worker `worker_id` to start that it will
// not.
void LeaseService::ReplyStartFailed(const std::string& worker_id,
                                    const absl::Status& why,
                                    bool needs_program) {
  auto it = starting_.find(worker_id);
  if (it == starting_.end()) return;
  proto::RequestLeaseReply reply;
  reply.set_outcome(proto::RequestLeaseReply::FAILED);
  reply.set_error(std::string(why.message()));
  reply.set_needs_program(needs_program);
  it->second.requester->Reply(reply);
  starting_.erase(it);
}

void LeaseService::StartFailed(const std::string& worker_id,
                               const std::string& lease_id,
                               const absl::Status& why, bool needs_program) {
  ReplyStartFailed(worker_id, why, needs_program);
  DropLease(lease_id);
  Dispatch();
}

void LeaseService::WorkerExited(const std::string& worker_id,
                                const std::string& lease_id,
                                const std::string& description) {
  ReplyStartFailed(worker_id, absl::UnavailableError(description),
                   /*needs_program=*/false);
  DropLease(lease_id);
  Dispatch();
}

void LeaseService::WorkerBlocked(const std::string& lease_id,
                                 const std::string& worker_id, int depth) {
  const Lease* lease = leases_.Find(lease_id);
  if (lease == nullptr || lease->worker_id != worker_id) return;
  switch (leases_.Block(lease_id, depth)) {
    case BlockResult::kLent:
      ReportSoon();
      Dispatch();
      break;
    case BlockResult::kNothingToLend:
      ReportSoon();
      break;
    case BlockResult::kAlreadyBlocked:
    case BlockResult::kUnknownLease:
      break;
  }
}

// It takes its CPU back, even from a request granted with it (the node is
// over-committed until leases end).
void LeaseService::WorkerUnblocked(const std::string& lease_id,
                                   const std::string& worker_id) {
  const Lease* lease = leases_.Find(lease_id);
  if (lease == nullptr || lease->worker_id != worker_id) return;
  if (leases_.Unblock(lease_id)) ReportSoon();
}

void LeaseService::GetWorkerExit(
    const std::string& worker_id,
    std::function<void(const proto::GetWorkerExitReply&)> done, int attempt) {
  constexpr int64_t kPollMs = 100;
  proto::GetWorkerExitReply reply;
  if (std::optional<std::string> exit = launcher_->ExitOf(worker_id)) {
    reply.set_exited(true);
    reply.set_description(*exit);
    return done(reply);
  }
  bool known = launcher_->Knows(worker_id);
  if (!known || attempt >= options_.worker_exit_wait_ms / kPollMs) {
    reply.set_description(known ? "the worker is still running"
                                : "this agent does not know the worker");
    return done(reply);
  }
  std::weak_ptr<bool> alive = alive_;
  clock_->RunAfter(kPollMs, [this, alive, worker_id, done, attempt] {
    if (!alive.expired()) GetWorkerExit(worker_id, done, attempt + 1);
  });
}

// ---- Bundles ----

absl::Status LeaseService::PrepareBundles(const proto::BundleReservation& r) {
  const std::string& pg = r.pg_id();
  if (bundles_.IsPrepared(pg) || bundles_.IsCommitted(pg)) {
    return absl::OkStatus();  // a retried prepare
  }
  std::vector<BundleReservations::Bundle> bundles;
  for (int i = 0; i < r.indices_size() && i < r.bundles_size(); ++i) {
    bundles.emplace_back(r.indices(i), ResourceSet::FromProto(r.bundles(i)));
  }
  if (absl::Status st = bundles_.Prepare(pg, bundles); !st.ok()) return st;
  prepare_timers_[pg] =
      clock_->RunAfter(options_.prepare_expiry_ms, [this, pg] {
        prepare_timers_.erase(pg);
        if (!bundles_.IsPrepared(pg)) return;
        if (options_.log_events) {
          SHOAL_LOG(WARNING) << "placement group " << pg
                             << ": prepared bundles never committed; released";
        }
        CancelBundles(pg);
      });
  ReportSoon();
  return absl::OkStatus();
}

absl::Status LeaseService::CommitBundles(const std::string& pg) {
  if (absl::Status st = bundles_.Commit(pg); !st.ok()) return st;
  ReportSoon();
  Dispatch();
  return absl::OkStatus();
}

void LeaseService::CancelBundles(const std::string& pg) {
  bool committed = bundles_.IsCommitted(pg);
  // The group's resources go first, so that what its leases give back below
  // cannot be granted again to a request of the same group.
  bundles_.Cancel(pg);
  if (committed) {
    // Workers running in the group's bundles end with it.
    for (const auto& id : leases_.InGroup(pg)) {
      ReturnLease(id, /*kill_worker=*/true, "its placement group was removed");
    }
  }
  ReportSoon();
  Dispatch();
}

// ---- Resources held outside leases ----

absl::Status LeaseService::Reserve(const ResourceSet& need) {
  if (!node_.CanGrant(need)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the entrypoint's resources (", need.DebugString(),
                     ") are not free on this node now"));
  }
  node_.available.Subtract(need);
  ReportSoon();
  return absl::OkStatus();
}

void LeaseService::Unreserve(const ResourceSet& held) {
  node_.available.Add(held);
  ReportSoon();
  Dispatch();
}

void LeaseService::FillHeartbeat(proto::HeartbeatRequest* request) const {
  pending_.FillDemands(request);
  int first = request->leases_size();
  leases_.FillLeases(options_.node_id, clock_->NowUs(), request);
  for (int i = first; i < request->leases_size(); ++i) {
    proto::LeaseInfo* info = request->mutable_leases(i);
    launcher_->Describe(info->worker_id(), info);
  }
}

}  // namespace shoal::agent
