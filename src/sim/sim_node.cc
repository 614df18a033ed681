#include "sim/sim_node.h"

#include <algorithm>
#include <optional>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/lease_rpc.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/net.h"
#include "common/random.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "shoal/shoal.pb.h"

namespace shoal::sim {
namespace {

using google::protobuf::internal::WireFormatLite;

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
      clock_(agent::LoopClock(shared_->loop)) {}

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
  // The agent's lease service, quiet, over no cluster view: nothing spills
  // back, no head is asked about groups, and a request that never fits here
  // fails INFEASIBLE after the grace period.
  agent::LeaseServiceOptions leases;
  leases.node_id = spec_.node_id;
  leases.address = address_;
  leases.resources = spec_.resources;
  leases.accelerators = shared_->accelerators;
  leases.infeasible_grace_ms = o.infeasible_grace_ms;
  leases.labels = spec_.labels;
  leases.worker_exit_wait_ms = 0;
  leases.log_events = false;
  leases.report_soon = [this] { ReportSoon(); };
  leases_ = std::make_unique<agent::LeaseService>(std::move(leases),
                                                  clock_.get(), this);
  RegisterHandlers();
  return absl::OkStatus();
}

void SimNode::Close() {
  if (closed_) return;
  closed_ = true;
  if (heartbeat_timer_ != 0) shared_->loop->CancelTimer(heartbeat_timer_);
  heartbeat_timer_ = 0;
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
  leases_->resources().total.ToProto(info.mutable_total());
  leases_->resources().Unlent().ToProto(info.mutable_available());
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
  leases_->resources().Unlent().ToProto(req.mutable_available());
  leases_->resources().total.ToProto(req.mutable_total());
  // Demands and leases, as the agent fills them.
  leases_->FillHeartbeat(&req);
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
  agent::RegisterLeaseHandlers(leases_.get(), s);
  rpc::RegisterProto<proto::Empty>(
      s, proto::GET_AGENT_INFO, [this](const auto&, rpc::Responder resp) {
        proto::AgentInfo info;
        *info.mutable_node() = SelfInfo();
        info.set_num_workers(static_cast<int64_t>(leases_->leases().size()));
        info.set_num_leases(static_cast<int64_t>(leases_->leases().size()));
        resp.Reply(info);
      });
  // The fake workers: every lease's worker is this server.
  rpc::RegisterProto<proto::TaskSpec>(
      s, proto::PUSH_TASK,
      [this](const auto& spec, rpc::Responder resp) { PushTask(spec, resp); });
  server_->OnDisconnect([this](uint64_t conn) { leases_->OnDisconnect(conn); });
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

// ---- Simulated workers (agent::WorkerLauncher) ----

absl::Status SimNode::ClaimDevices(const agent::DeviceIds&) {
  return absl::OkStatus();
}

// Every lease gets a worker of its own: none is reused.
std::optional<agent::WorkerAddress> SimNode::Reuse(
    const agent::Lease&, const proto::RequestLeaseRequest&) {
  return std::nullopt;
}

std::string SimNode::Add(const agent::Lease& lease,
                         const proto::RequestLeaseRequest&) {
  return "simw-" + lease.id;
}

// A simulated worker is up at once, at the node's own address.
void SimNode::Start(const std::string& worker_id,
                    const proto::RequestLeaseRequest&) {
  ++shared_->stats.leases_granted;
  leases_->WorkerStarted({worker_id, address_, 0});
}

// A worker ends with its lease; when it is killed, `why` is what
// GET_WORKER_EXIT says of it.
void SimNode::LeaseEnded(const std::string& worker_id, bool kill,
                         const std::string& why) {
  if (!kill) return;
  if (exits_.size() >= kExitsKept) exits_.erase(exits_.begin());
  exits_[worker_id] = "killed: " + why;
}

bool SimNode::Knows(const std::string& worker_id) {
  for (const auto& [id, lease] : leases_->leases().leases()) {
    if (lease.worker_id == worker_id) return true;
  }
  return false;
}

std::optional<std::string> SimNode::ExitOf(const std::string& worker_id) {
  auto it = exits_.find(worker_id);
  if (it == exits_.end()) return std::nullopt;
  return it->second;
}

void SimNode::Describe(const std::string&, proto::LeaseInfo*) const {}

absl::Status SimNode::CancelTask(const std::string& worker_id, int32_t, bool,
                                 bool) {
  return absl::FailedPreconditionError(absl::StrCat(
      "worker ", worker_id, " is simulated: it runs no task to cancel"));
}

}  // namespace shoal::sim
