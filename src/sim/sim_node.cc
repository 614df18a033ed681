#include "sim/sim_node.h"

#include <algorithm>
#include <deque>
#include <optional>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/lease_policy.h"
#include "common/logging.h"
#include "common/util.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "shoal/shoal.pb.h"

namespace shoal::sim {
namespace {

using agent::Lease;
using agent::LeaseDecision;
using agent::PendingLease;
using google::protobuf::internal::WireFormatLite;

constexpr int64_t kPrepareExpiryMs = 10000;
constexpr size_t kExitsKept = 64;
// What a `void` function returns: msgpack nil.
constexpr char kNoOpResult[] = "\xc0";

// What a simulated node reads of a HeartbeatReply: whether to register
// again and the view version it brings, without parsing the nodes that
// come with it (field 1, skipped: a simulated node never spills back).
struct ReplyHeader {
  bool unknown_node = false;
  uint64_t view_epoch = 0;
  int64_t view_version = 0;
  int nodes = 0;  // view entries it brings (skipped, not parsed)
};

// nullopt: not a HeartbeatReply.
std::optional<ReplyHeader> ReadReplyHeader(std::string_view payload) {
  google::protobuf::io::CodedInputStream in(
      reinterpret_cast<const uint8_t*>(payload.data()),
      static_cast<int>(payload.size()));
  ReplyHeader header;
  while (uint32_t tag = in.ReadTag()) {
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const bool varint =
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_VARINT;
    uint64_t value = 0;
    if (varint && (field == proto::HeartbeatReply::kUnknownNodeFieldNumber ||
                   field == proto::HeartbeatReply::kViewEpochFieldNumber ||
                   field == proto::HeartbeatReply::kViewVersionFieldNumber)) {
      if (!in.ReadVarint64(&value)) return std::nullopt;
      if (field == proto::HeartbeatReply::kUnknownNodeFieldNumber) {
        header.unknown_node = value != 0;
      } else if (field == proto::HeartbeatReply::kViewEpochFieldNumber) {
        header.view_epoch = value;
      } else {
        header.view_version = static_cast<int64_t>(value);
      }
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      return std::nullopt;
    } else if (field == proto::HeartbeatReply::kNodesFieldNumber) {
      ++header.nodes;
    }
  }
  if (!in.ConsumedEntireMessage()) return std::nullopt;
  return header;
}

}  // namespace

SimNode::SimNode(SimShared* shared, SimNodeSpec spec)
    : shared_(shared),
      spec_(std::move(spec)),
      node_{spec_.resources, spec_.resources},
      leases_(&node_),
      bundles_(spec_.node_id, &node_) {}

SimNode::~SimNode() {
  *alive_ = false;
  Close();
}

absl::Status SimNode::Listen() {
  const SimNodesOptions& o = shared_->options;
  auto server = rpc::Server::Create(shared_->loop, o.node_ip, 0, o.token);
  if (!server.ok()) return server.status();
  server_ = std::move(*server);
  address_ = absl::StrCat(o.node_ip, ":", server_->port());
  head_ = std::make_unique<rpc::TcpChannel>(shared_->loop, o.head_address,
                                            o.token, "agent " + spec_.node_id);
  RegisterHandlers();
  return absl::OkStatus();
}

void SimNode::Close() {
  if (closed_) return;
  closed_ = true;
  if (heartbeat_timer_ != 0) shared_->loop->CancelTimer(heartbeat_timer_);
  if (dispatch_timer_ != 0) shared_->loop->CancelTimer(dispatch_timer_);
  heartbeat_timer_ = dispatch_timer_ = 0;
  if (registered_) --shared_->stats.registered;
  registered_ = false;
  SetViewWhole(false);
  if (server_) server_->Shutdown();
  if (head_) head_->Close();
}

proto::NodeInfo SimNode::SelfInfo() const {
  proto::NodeInfo info;
  info.set_node_id(spec_.node_id);
  info.set_address(address_);
  info.set_node_ip(shared_->options.node_ip);
  info.set_hostname(spec_.node_id);  // a simulated host of its own
  info.set_host_id(HostId());        // its files are this host's
  info.set_alive(true);
  node_.total.ToProto(info.mutable_total());
  node_.Unlent().ToProto(info.mutable_available());
  for (const auto& [k, v] : spec_.labels) (*info.mutable_labels())[k] = v;
  return info;
}

// ---- Head ----

void SimNode::Register(std::function<void(absl::Status)> done) {
  if (closed_ || registering_) return;
  registering_ = true;
  proto::RegisterNodeRequest req;
  *req.mutable_node() = SelfInfo();
  std::weak_ptr<bool> alive = alive_;
  rpc::CallProto<proto::RegisterNodeReply>(
      head_.get(), proto::REGISTER_NODE, req,
      [this, alive, done](absl::StatusOr<proto::RegisterNodeReply> reply) {
        if (alive.expired()) return;
        registering_ = false;
        if (reply.ok() && !closed_ && !leaving_) {
          if (!registered_) ++shared_->stats.registered;
          registered_ = true;
          view_epoch_ = 0;
          view_version_ = 0;
          ++shared_->stats.registrations;
          heartbeat_ms_ =
              shared_->options.heartbeat_ms > 0
                  ? shared_->options.heartbeat_ms
                  : std::max<int64_t>(1, reply->heartbeat_interval_ms() > 0
                                             ? reply->heartbeat_interval_ms()
                                             : heartbeat_ms_);
          // The first beat at a random point of the interval: nodes that
          // registered together spread over it.
          std::uniform_int_distribution<int64_t> first(1, heartbeat_ms_);
          thread_local std::mt19937_64 rng(std::random_device{}());
          ScheduleHeartbeat(first(rng));
        }
        if (done) done(reply.status());
      },
      10000);
}

void SimNode::Unregister(int64_t timeout_ms, std::function<void()> done) {
  // A beat answered after the head took the node off would find it
  // unknown and register it again, alive with no simulator behind it.
  leaving_ = true;
  if (heartbeat_timer_ != 0) shared_->loop->CancelTimer(heartbeat_timer_);
  heartbeat_timer_ = 0;
  // One registering is taken off too: the head answers in order.
  if ((!registered_ && !registering_) || closed_) return done();
  proto::UnregisterNodeRequest req;
  req.set_node_id(spec_.node_id);
  req.set_reason("its simulator (shoal dev sim-nodes) stopped");
  rpc::CallProto<proto::Empty>(
      head_.get(), proto::UNREGISTER_NODE, req,
      [done](absl::StatusOr<proto::Empty>) { done(); }, timeout_ms);
}

void SimNode::ScheduleHeartbeat(int64_t delay_ms) {
  if (closed_ || leaving_) return;
  if (heartbeat_timer_ != 0) shared_->loop->CancelTimer(heartbeat_timer_);
  heartbeat_timer_ = shared_->loop->RunAfter(delay_ms, [this] {
    heartbeat_timer_ = 0;
    SendHeartbeat(/*periodic=*/true);
  });
}

// A change (lease granted or returned, request queued, bundles) reaches the
// head within 20 ms rather than at the next beat, as the agent's does.
void SimNode::ReportSoon() {
  if (report_scheduled_ || !registered_ || closed_ || leaving_) return;
  report_scheduled_ = true;
  std::weak_ptr<bool> alive = alive_;
  shared_->loop->RunAfter(20, [this, alive] {
    if (alive.expired()) return;
    report_scheduled_ = false;
    SendHeartbeat(/*periodic=*/false);
  });
}

void SimNode::SendHeartbeat(bool periodic) {
  if (closed_ || !registered_ || leaving_) return;
  proto::HeartbeatRequest req;
  req.set_node_id(spec_.node_id);
  node_.Unlent().ToProto(req.mutable_available());
  node_.total.ToProto(req.mutable_total());
  // Demands and leases, as the agent fills them (agent.cc).
  std::map<std::pair<std::string, bool>, proto::ResourceDemand> by_shape;
  for (const PendingLease& p : pending_.requests()) {
    auto key = std::make_pair(p.ask.shape.DebugString(), p.infeasible);
    auto [it, added] = by_shape.emplace(key, proto::ResourceDemand());
    if (added) {
      p.ask.shape.ToProto(it->second.mutable_shape());
      it->second.set_infeasible(p.infeasible);
    }
    it->second.set_count(it->second.count() + 1);
  }
  for (auto& [k, d] : by_shape) *req.add_demands() = d;
  int64_t now = MonotonicUs();
  for (const auto& [id, lease] : leases_.leases()) {
    proto::LeaseInfo* info = req.add_leases();
    info->set_lease_id(id);
    info->set_node_id(spec_.node_id);
    info->set_job_id(lease.job_id);
    info->set_worker_id(lease.worker_id);
    info->set_owner(lease.owner);
    info->set_age_ms((now - lease.granted_us) / 1000);
    info->set_actor_id(lease.actor_id);
    lease.shape.ToProto(info->mutable_shape());
  }
  // The view version it holds, as an agent does (agent/cluster_view.h):
  // the head then sends only what changed.
  req.set_view_epoch(view_epoch_);
  req.set_view_version(view_version_);
  std::string payload = rpc::Serialize(req);
  const int64_t request_bytes = static_cast<int64_t>(payload.size());
  std::weak_ptr<bool> alive = alive_;
  head_->Call(
      proto::HEARTBEAT, std::move(payload),
      [this, alive, periodic,
       request_bytes](absl::StatusOr<std::string> reply) {
        if (alive.expired() || closed_) return;
        SimStats& stats = shared_->stats;
        std::optional<ReplyHeader> header;
        if (reply.ok()) header = ReadReplyHeader(*reply);
        if (!header.has_value()) {
          ++stats.heartbeat_failures;
        } else {
          ++stats.heartbeats;
          stats.heartbeat_request_bytes += request_bytes;
          stats.heartbeat_reply_bytes += static_cast<int64_t>(reply->size());
          if (header->unknown_node) {
            if (periodic && !leaving_) OnUnknownNode();
            return;  // the new registration starts the beats again
          }
          view_epoch_ = header->view_epoch;
          view_version_ = header->view_version;
          // Nothing newer than what it holds: this node's view is whole.
          SetViewWhole(header->nodes == 0 && view_version_ > 0);
        }
        if (periodic) ScheduleHeartbeat(JitteredMs(heartbeat_ms_));
      },
      std::max<int64_t>(heartbeat_ms_ * 4, 2000));
}

void SimNode::SetViewWhole(bool whole) {
  if (whole == view_whole_) return;
  view_whole_ = whole;
  shared_->stats.views_whole += whole ? 1 : -1;
}

// The head restarted or declared this node dead: register again, as an
// agent does, trying again each interval until it takes.
void SimNode::OnUnknownNode() {
  if (registered_) --shared_->stats.registered;
  registered_ = false;
  SetViewWhole(false);
  std::weak_ptr<bool> alive = alive_;
  Register([this, alive](absl::Status st) {
    if (alive.expired() || st.ok() || closed_ || leaving_) return;
    shared_->loop->RunAfter(JitteredMs(heartbeat_ms_), [this, alive] {
      if (!alive.expired()) OnUnknownNode();
    });
  });
}

// ---- The agent's RPCs ----

void SimNode::RegisterHandlers() {
  rpc::Server* s = server_.get();
  rpc::RegisterProto<proto::RequestLeaseRequest>(
      s, proto::REQUEST_LEASE,
      [this](const auto& r, rpc::Responder resp) { RequestLease(r, resp); });
  rpc::RegisterProto<proto::CancelLease>(
      s, proto::CANCEL_LEASE_REQUEST,
      [this](const auto& r, rpc::Responder resp) {
        std::optional<PendingLease> p =
            pending_.Take(resp.connection_id(), r.request_id());
        proto::CancelLeaseReply reply;
        if (p.has_value()) {
          proto::RequestLeaseReply canceled;
          canceled.set_outcome(proto::RequestLeaseReply::CANCELED);
          canceled.set_error("the requester withdrew it");
          p->responder.Reply(canceled);
          reply.set_canceled(true);
          ReportSoon();
        }
        resp.Reply(reply);
      });
  rpc::RegisterProto<proto::ReturnLeaseRequest>(
      s, proto::RETURN_LEASE, [this](const auto& r, rpc::Responder resp) {
        ReleaseLease(r.lease_id(),
                     r.kill_worker() ? "killed: its driver returned the lease "
                                       "and asked so"
                                     : "");
        resp.Reply(proto::Empty());
      });
  rpc::RegisterProto<proto::GetWorkerExitRequest>(
      s, proto::GET_WORKER_EXIT, [this](const auto& r, rpc::Responder resp) {
        proto::GetWorkerExitReply reply;
        auto it = exits_.find(r.worker_id());
        if (it != exits_.end()) {
          reply.set_exited(true);
          reply.set_description(it->second);
        } else {
          bool running = false;
          for (const auto& [id, lease] : leases_.leases()) {
            running |= lease.worker_id == r.worker_id();
          }
          reply.set_description(running
                                    ? "the worker is still running"
                                    : "this agent does not know the worker");
        }
        resp.Reply(reply);
      });
  rpc::RegisterProto<proto::Empty>(
      s, proto::GET_AGENT_INFO, [this](const auto&, rpc::Responder resp) {
        proto::AgentInfo info;
        *info.mutable_node() = SelfInfo();
        info.set_num_workers(static_cast<int64_t>(leases_.size()));
        info.set_num_leases(static_cast<int64_t>(leases_.size()));
        resp.Reply(info);
      });
  rpc::RegisterProto<proto::BundleReservation>(
      s, proto::PREPARE_BUNDLES, [this](const auto& r, rpc::Responder resp) {
        absl::Status st = PrepareBundles(r);
        if (!st.ok()) return resp.Error(st);
        resp.Reply(proto::Empty());
      });
  rpc::RegisterProto<proto::BundleReservation>(
      s, proto::COMMIT_BUNDLES, [this](const auto& r, rpc::Responder resp) {
        absl::Status st = bundles_.Commit(r.pg_id());
        if (!st.ok()) return resp.Error(st);
        ReportSoon();
        Dispatch();
        resp.Reply(proto::Empty());
      });
  rpc::RegisterProto<proto::BundleReservation>(
      s, proto::CANCEL_BUNDLES, [this](const auto& r, rpc::Responder resp) {
        CancelBundles(r.pg_id());
        resp.Reply(proto::Empty());
      });
  // The fake workers: every lease's worker is this server.
  rpc::RegisterProto<proto::TaskSpec>(
      s, proto::PUSH_TASK,
      [this](const auto& spec, rpc::Responder resp) { PushTask(spec, resp); });
  server_->OnDisconnect([this](uint64_t conn) { OnDisconnect(conn); });
}

void SimNode::PushTask(const proto::TaskSpec& spec, rpc::Responder resp) {
  proto::TaskResult result;
  if (!spec.actor_id().empty()) {
    result.set_error(
        "simulated nodes (shoal dev sim-nodes) run no actors; give the "
        "actor resources no simulated node has");
    result.set_error_type("shoal::UnknownFunction");
    return resp.Reply(result);
  }
  result.set_ok(true);
  result.set_value(kNoOpResult, sizeof(kNoOpResult) - 1);
  result.set_start_time_ms(NowMs());
  ++shared_->stats.tasks_run;
  resp.Reply(result);
}

void SimNode::RequestLease(const proto::RequestLeaseRequest& r,
                           rpc::Responder resp) {
  PendingLease p;
  p.request = r;
  p.ask.shape = ResourceSet::FromProto(r.shape());
  p.ask.excluded_nodes.assign(r.excluded_nodes().begin(),
                              r.excluded_nodes().end());
  p.ask.no_spillback = r.no_spillback();
  p.ask.devices_valid =
      agent::ValidateDevices(shared_->accelerators, p.ask.shape);
  p.ask.arrival_us = MonotonicUs();
  p.responder = std::move(resp);
  p.seq = ++next_request_seq_;
  if (!TryPlace(p)) pending_.Push(std::move(p));
  ReportSoon();
}

// Grants, fails or keeps `p` waiting (false), by the agent's own policy
// over no cluster view: nothing spills back.
bool SimNode::TryPlace(PendingLease& p) {
  if (!p.responder.connected()) return true;
  static const std::vector<proto::NodeInfo> kNoView;
  int64_t now = MonotonicUs();
  agent::LocalNode here{spec_.node_id,
                        address_,
                        node_,
                        kNoView,
                        /*can_ask_head=*/false,
                        shared_->options.infeasible_grace_ms * 1000,
                        leases_.Withheld(p.request.depth())};
  LeaseDecision d = agent::DecideLease(p.ask, here, now);
  switch (d.kind) {
    case LeaseDecision::Kind::kGrant:
      Grant(p);
      return true;
    case LeaseDecision::Kind::kInvalid:
    case LeaseDecision::Kind::kInfeasible: {
      proto::RequestLeaseReply reply;
      reply.set_outcome(d.kind == LeaseDecision::Kind::kInvalid
                            ? proto::RequestLeaseReply::INVALID
                            : proto::RequestLeaseReply::INFEASIBLE);
      reply.set_error(d.message);
      p.responder.Reply(reply);
      return true;
    }
    case LeaseDecision::Kind::kSpillback:          // no view: never
    case LeaseDecision::Kind::kAskHeadAboutGroup:  // can_ask_head: never
    case LeaseDecision::Kind::kWait:
      p.infeasible = d.infeasible;
      if (d.retry_at_us != 0) EnsureDispatchTimer(d.retry_at_us);
      return false;
  }
  return false;
}

void SimNode::Grant(PendingLease& p) {
  const proto::RequestLeaseRequest& r = p.request;
  Lease lease;
  lease.id = RandomHex(8);
  lease.worker_id = "simw-" + lease.id;
  lease.shape = p.ask.shape;
  lease.conn_id = p.responder.connection_id();
  lease.owner = p.responder.peer();
  lease.job_id = r.job_id();
  lease.actor_id = r.actor_id();
  lease.granted_us = MonotonicUs();
  const Lease& added = leases_.Add(std::move(lease));
  ++shared_->stats.leases_granted;
  proto::RequestLeaseReply reply;
  reply.set_outcome(proto::RequestLeaseReply::GRANTED);
  reply.set_lease_id(added.id);
  reply.set_worker_id(added.worker_id);
  reply.set_worker_address(address_);
  reply.set_worker_pid(0);
  reply.set_node_id(spec_.node_id);
  p.responder.Reply(reply);
  ReportSoon();
}

void SimNode::Dispatch() {
  std::deque<PendingLease> waiting = pending_.TakeAll();
  while (!waiting.empty()) {
    PendingLease p = std::move(waiting.front());
    waiting.pop_front();
    if (!TryPlace(p)) pending_.Push(std::move(p));
  }
}

void SimNode::EnsureDispatchTimer(int64_t at_us) {
  if (dispatch_timer_at_ != 0 && dispatch_timer_at_ <= at_us) return;
  if (dispatch_timer_ != 0) shared_->loop->CancelTimer(dispatch_timer_);
  dispatch_timer_at_ = at_us;
  int64_t delay_ms = std::max<int64_t>(1, (at_us - MonotonicUs()) / 1000 + 1);
  dispatch_timer_ = shared_->loop->RunAfter(delay_ms, [this] {
    dispatch_timer_ = 0;
    dispatch_timer_at_ = 0;
    Dispatch();
  });
}

// Ends a lease; its fake worker ends with it when `why` is not empty (it is
// then what GET_WORKER_EXIT says).
void SimNode::ReleaseLease(const std::string& lease_id,
                           const std::string& why) {
  std::optional<Lease> lease = leases_.Remove(lease_id);
  if (!lease.has_value()) return;
  if (!why.empty()) {
    if (exits_.size() >= kExitsKept) exits_.erase(exits_.begin());
    exits_[lease->worker_id] = why;
  }
  ReportSoon();
  Dispatch();
}

void SimNode::OnDisconnect(uint64_t conn) {
  // Its queued requests go first, so that what its leases free goes to
  // others (as in the agent).
  size_t dropped = pending_.DropConnection(conn);
  std::vector<std::string> gone;
  for (const std::string& id : leases_.HeldBy(conn)) {
    if (leases_.Find(id)->actor_id.empty()) gone.push_back(id);
  }
  for (const auto& id : gone) {
    ReleaseLease(id, "killed: its driver disconnected");
  }
  if (dropped > 0 || !gone.empty()) ReportSoon();
}

// ---- Placement-group bundles ----

absl::Status SimNode::PrepareBundles(const proto::BundleReservation& r) {
  const std::string& pg = r.pg_id();
  if (bundles_.IsPrepared(pg) || bundles_.IsCommitted(pg)) {
    return absl::OkStatus();  // a retried prepare
  }
  std::vector<agent::BundleReservations::Bundle> bundles;
  for (int i = 0; i < r.indices_size() && i < r.bundles_size(); ++i) {
    bundles.emplace_back(r.indices(i), ResourceSet::FromProto(r.bundles(i)));
  }
  if (absl::Status st = bundles_.Prepare(pg, bundles); !st.ok()) return st;
  std::weak_ptr<bool> alive = alive_;
  shared_->loop->RunAfter(kPrepareExpiryMs, [this, alive, pg] {
    if (!alive.expired() && bundles_.IsPrepared(pg)) CancelBundles(pg);
  });
  ReportSoon();
  return absl::OkStatus();
}

void SimNode::CancelBundles(const std::string& pg) {
  bool committed = bundles_.IsCommitted(pg);
  bundles_.Cancel(pg);
  if (committed) {
    for (const auto& id : leases_.InGroup(pg)) {
      ReleaseLease(id, "killed: its placement group was removed");
    }
  }
  ReportSoon();
  Dispatch();
}

}  // namespace shoal::sim
