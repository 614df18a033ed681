#include "agent/agent.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <future>
#include <mutex>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/object_service.h"
#include "common/logging.h"
#include "common/process.h"
#include "common/status_macros.h"
#include "common/util.h"
#include "rpc/rpc.h"
#include "shoal/shoal.pb.h"

namespace shoal {
namespace {

using agent::ObjectService;

constexpr int64_t kBlobChunk = 4 << 20;
constexpr size_t kMaxRememberedExits = 4096;
constexpr int64_t kPrepareExpiryMs = 10000;

// A task placed in a bundle asks for "TPU_group_0_<pg>": its devices are
// still TPU chips. Maps bundle resources back to the node resource they were
// carved from (the largest form wins: the indexed and the any-bundle name
// describe the same devices).
ResourceSet BaseShape(const ResourceSet& shape) {
  ResourceSet base;
  for (const auto& [name, amount] : shape.amounts()) {
    BundleResource bundle;
    std::string root = ParseBundleResource(name, &bundle) ? bundle.base : name;
    if (amount > base.Get(root)) base.Set(root, amount);
  }
  return base;
}

// Device ids per resource name ("TPU" -> {0, 1}).
using DeviceIds = std::map<std::string, std::vector<int>>;

std::string DeviceKey(const DeviceIds& devices) {
  std::string key;
  for (const auto& [name, ids] : devices) {
    absl::StrAppend(&key, name, ":");
    for (int id : ids) absl::StrAppend(&key, id, ",");
    key += ";";
  }
  return key;
}

struct Worker {
  enum class State { kStarting, kIdle, kLeased };
  std::string id;
  // A worker sees the devices it was started with for its whole life, so it
  // is reused only by leases that hold the same devices.
  std::string device_key;
  pid_t pid = 0;
  std::string job_id;
  std::string binary_hash;
  std::string address;
  State state = State::kStarting;
  std::string lease_id;
  int64_t idle_since_us = 0;
  std::string log_path;
  // Set when the agent itself ends the worker (why), so that its exit is
  // expected rather than a failure to warn about.
  std::string stopped_because;
};

struct Lease {
  std::string id;
  std::string worker_id;
  ResourceSet shape;
  DeviceIds devices;
  uint64_t conn_id = 0;
  // For `shoal status --verbose`: who holds it, for which job, since when.
  std::string owner;
  std::string job_id;
  int64_t granted_us = 0;
};

struct PendingLease {
  proto::RequestLeaseRequest request;
  ResourceSet shape;
  rpc::Responder responder;
  int64_t arrival_us = 0;
  bool infeasible = false;
  uint64_t seq = 0;  // this agent's number for it
  // A request in a placement group's bundle that no node holds: what the
  // head said of the group.
  enum class Group {
    kUnchecked,
    kAsking,
    kBeingPlaced
  } group = Group::kUnchecked;
  int64_t group_checked_us = 0;
};

// The placement group a shape's bundle resources belong to, or "".
std::string GroupOfShape(const ResourceSet& shape) {
  for (const auto& [name, amount] : shape.amounts()) {
    BundleResource bundle;
    if (ParseBundleResource(name, &bundle)) return bundle.group_id;
  }
  return "";
}

// A lease granted before its worker registered.
struct PendingGrant {
  std::string lease_id;
  rpc::Responder responder;
};

// Runs on the agent's event loop; not thread-safe.
class AgentImpl : public NodeAgent {
 public:
  AgentImpl(AgentOptions options, std::unique_ptr<rpc::EventLoop> loop)
      : options_(std::move(options)), loop_(std::move(loop)) {
    total_ = options_.resources;
    available_ = total_;
    for (const auto& m : options_.accelerators) {
      std::set<int>& ids = free_devices_[m->ResourceName()];
      for (int i = 0; i < m->NumDevices(); ++i) ids.insert(i);
    }
    node_id_ = options_.node_id.empty() ? RandomHex(6) : options_.node_id;
  }

  ~AgentImpl() override { Stop(); }

  // The node's shared-memory object store, sized by the node's
  // object_store_memory (`--object-store-memory`, or detected).
  absl::Status StartObjectStore() {
    auto capacity =
        static_cast<uint64_t>(total_.GetDouble("object_store_memory"));
    if (capacity == 0) return absl::OkStatus();
    agent::ObjectServiceOptions object_options;
    object_options.name = absl::StrCat("node-", node_id_, "-", getpid());
    object_options.capacity = capacity;
    object_options.spill_dir = options_.session_dir + "/spill";
    object_options.loop = loop_.get();
    object_options.node_ip = options_.node_ip;
    object_options.token = options_.token;
    auto objects = ObjectService::Create(object_options);
    if (!objects.ok()) {
      return Annotate(objects.status(),
                      "cannot create the node's object store; start the node "
                      "with a smaller --object-store-memory");
    }
    objects_ = std::move(*objects);
    objects_->Register(server_.get());
    return absl::OkStatus();
  }

  // What the node has free; object_store_memory is what the store has not
  // used, so that `shoal status` shows its use.
  void AvailableToProto(proto::ResourceMap* map) const {
    ResourceSet available = available_;
    if (objects_ != nullptr) {
      int64_t total = total_.Get("object_store_memory");
      int64_t used = static_cast<int64_t>(objects_->used_bytes());
      available.Set("object_store_memory",
                    std::max<int64_t>(0, total - used * kResourceUnit));
    }
    available.ToProto(map);
  }

  absl::Status Start() {
    RETURN_IF_ERROR(MakeDirs(options_.session_dir + "/logs"));
    RETURN_IF_ERROR(MakeDirs(options_.session_dir + "/binaries"));
    absl::Status status = RunOnLoop([&]() -> absl::Status {
      ASSIGN_OR_RETURN(server_,
                       rpc::Server::Create(loop_.get(), options_.node_ip,
                                           options_.port, options_.token));
      rpc::AlsoListenOnLoopback(server_.get(), options_.node_ip);
      address_ = absl::StrCat(options_.node_ip, ":", server_->port());
      head_ =
          std::make_unique<rpc::Channel>(loop_.get(), options_.head_address,
                                         options_.token, "agent " + node_id_);
      RegisterHandlers();
      return StartObjectStore();
    });
    RETURN_IF_ERROR(status);
    // The first registration is synchronous so that `shoal start` can say
    // whether the node joined.
    std::promise<absl::Status> registered;
    loop_->Post(
        [&] { Register([&](absl::Status s) { registered.set_value(s); }); });
    absl::Status reg = registered.get_future().get();
    if (!reg.ok()) {
      return Annotate(reg, absl::StrCat("cannot join the cluster at ",
                                        options_.head_address));
    }
    loop_->Post([this] {
      ScheduleHeartbeat();
      ScheduleReaper();
    });
    return absl::OkStatus();
  }

  std::string address() const override { return address_; }
  std::string node_id() const override { return node_id_; }

  void Wait() override {
    std::unique_lock<std::mutex> lock(stop_mu_);
    stop_cv_.wait(lock, [&] { return stop_requested_; });
  }

  void Stop() override {
    if (!loop_) return;
    RequestStop();
    std::promise<void> unregistered;
    loop_->Post([&] {
      if (!registered_ || head_ == nullptr) return unregistered.set_value();
      proto::UnregisterNodeRequest req;
      req.set_node_id(node_id_);
      req.set_reason("stopped by its operator (shoal stop)");
      rpc::CallProto<proto::Empty>(
          head_.get(), proto::UNREGISTER_NODE, req,
          [&](absl::StatusOr<proto::Empty>) { unregistered.set_value(); },
          1000);
    });
    unregistered.get_future().wait();
    RunOnLoop([&]() -> absl::Status {
      if (server_) server_->Shutdown();
      head_.reset();
      for (auto& [id, w] : workers_) {
        if (w.pid > 0) kill(w.pid, SIGTERM);
      }
      // Give workers a moment to exit, then make sure.
      for (int i = 0; i < 50; ++i) {
        bool any = false;
        for (auto& [id, w] : workers_) {
          if (w.pid > 0 && waitpid(w.pid, nullptr, WNOHANG) == 0) any = true;
        }
        if (!any) break;
        usleep(20000);
      }
      for (auto& [id, w] : workers_) {
        if (w.pid > 0 && kill(w.pid, SIGKILL) == 0) waitpid(w.pid, nullptr, 0);
      }
      workers_.clear();
      return absl::OkStatus();
    }).IgnoreError();
    // Transfer threads and pulls need the loop to finish.
    if (objects_ != nullptr) objects_->Shutdown();
    loop_->Stop();
    server_.reset();
    // Unmaps the store and removes its file and spill folder's objects.
    objects_.reset();
    loop_.reset();
  }

 private:
  absl::Status RunOnLoop(const std::function<absl::Status()>& fn) {
    absl::Status status;
    loop_->RunSync([&] { status = fn(); });
    return status;
  }

  void RequestStop() {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_requested_ = true;
    stop_cv_.notify_all();
  }

  void RegisterHandlers() {
    rpc::Server* s = server_.get();
    rpc::RegisterProto<proto::RequestLeaseRequest>(
        s, proto::REQUEST_LEASE,
        [this](const auto& r, rpc::Responder resp) { RequestLease(r, resp); });
    rpc::RegisterProto<proto::ReturnLeaseRequest>(
        s, proto::RETURN_LEASE, [this](const auto& r, rpc::Responder resp) {
          ReleaseLease(r.lease_id(), r.kill_worker(),
                       "its driver returned the lease and asked so");
          resp.Reply(proto::Empty());
        });
    rpc::RegisterProto<proto::RegisterWorkerRequest>(
        s, proto::REGISTER_WORKER, [this](const auto& r, rpc::Responder resp) {
          RegisterWorker(r, resp);
        });
    rpc::RegisterProto<proto::GetWorkerExitRequest>(
        s, proto::GET_WORKER_EXIT, [this](const auto& r, rpc::Responder resp) {
          GetWorkerExit(r.worker_id(), resp, 0);
        });
    rpc::RegisterProto<proto::Empty>(
        s, proto::GET_AGENT_INFO, [this](const auto&, rpc::Responder resp) {
          proto::AgentInfo info;
          *info.mutable_node() = SelfInfo();
          info.set_num_workers(workers_.size());
          info.set_num_leases(leases_.size());
          if (objects_ != nullptr) {
            objects_->Describe(info.mutable_object_store());
          }
          resp.Reply(info);
        });
    rpc::RegisterProto<proto::Empty>(
        s, proto::SHUTDOWN_AGENT, [this](const auto&, rpc::Responder resp) {
          SHOAL_LOG(INFO) << "shutdown requested by " << resp.peer();
          resp.Reply(proto::Empty());
          RequestStop();
        });
    rpc::RegisterProto<proto::BundleReservation>(
        s, proto::PREPARE_BUNDLES, [this](const auto& r, rpc::Responder resp) {
          PrepareBundles(r, resp);
        });
    rpc::RegisterProto<proto::BundleReservation>(
        s, proto::COMMIT_BUNDLES, [this](const auto& r, rpc::Responder resp) {
          absl::Status st = CommitBundles(r.pg_id());
          if (!st.ok()) return resp.Error(st);
          resp.Reply(proto::Empty());
        });
    rpc::RegisterProto<proto::BundleReservation>(
        s, proto::CANCEL_BUNDLES, [this](const auto& r, rpc::Responder resp) {
          CancelBundles(r.pg_id());
          resp.Reply(proto::Empty());
        });
    server_->OnDisconnect([this](uint64_t conn) { OnDisconnect(conn); });
  }

  // ---- Placement-group bundles (two-phase: prepare, then commit) ----

  // Holds the bundles' resources (nothing else may take them) until the head
  // commits or cancels; a prepare the head forgets expires.
  void PrepareBundles(const proto::BundleReservation& r, rpc::Responder resp) {
    if (prepared_.count(r.pg_id()) || committed_.count(r.pg_id())) {
      return resp.Reply(proto::Empty());  // a retried prepare
    }
    Reservation res;
    ResourceSet sum;
    for (int i = 0; i < r.indices_size() && i < r.bundles_size(); ++i) {
      res.bundles.emplace_back(r.indices(i),
                               ResourceSet::FromProto(r.bundles(i)));
      sum.Add(res.bundles.back().second);
    }
    if (!available_.Contains(sum)) {
      return resp.Error(absl::FailedPreconditionError(absl::StrCat(
          "node ", node_id_, " no longer has ", sum.DebugString(), " free")));
    }
    available_.Subtract(sum);
    res.held = sum;
    std::string pg = r.pg_id();
    prepared_[pg] = std::move(res);
    loop_->RunAfter(kPrepareExpiryMs, [this, pg] {
      if (prepared_.count(pg)) {
        SHOAL_LOG(WARNING) << "placement group " << pg
                           << ": prepared bundles never committed; released";
        CancelBundles(pg);
      }
    });
    ReportSoon();
    resp.Reply(proto::Empty());
  }

  // Turns held resources into the bundles' own resources, named as Ray names
  // them: CPU_group_<index>_<pg> for one bundle, CPU_group_<pg> for any.
  absl::Status CommitBundles(const std::string& pg) {
    if (committed_.count(pg)) return absl::OkStatus();
    auto it = prepared_.find(pg);
    if (it == prepared_.end()) {
      return absl::NotFoundError(absl::StrCat(
          "placement group ", pg, " has no prepared bundles on node ", node_id_,
          " (they expired); the head will place it again"));
    }
    Reservation res = std::move(it->second);
    prepared_.erase(it);
    for (const auto& [index, shape] : res.bundles) {
      for (const auto& [name, amount] : shape.amounts()) {
        res.added.Set(absl::StrCat(name, "_group_", index, "_", pg), amount);
        std::string any = absl::StrCat(name, "_group_", pg);
        res.added.Set(any, res.added.Get(any) + amount);
      }
    }
    total_.Add(res.added);
    available_.Add(res.added);
    committed_[pg] = std::move(res);
    ReportSoon();
    Dispatch();
    return absl::OkStatus();
  }

  void CancelBundles(const std::string& pg) {
    if (auto it = prepared_.find(pg); it != prepared_.end()) {
      available_.Add(it->second.held);
      prepared_.erase(it);
    }
    if (auto it = committed_.find(pg); it != committed_.end()) {
      // Workers running in the group's bundles end with it.
      std::vector<std::string> in_group;
      for (const auto& [id, lease] : leases_) {
        for (const auto& [name, amount] : lease.shape.amounts()) {
          if (absl::EndsWith(name, "_" + pg)) in_group.push_back(id);
        }
      }
      for (const auto& id : in_group) {
        ReleaseLease(id, /*kill_worker=*/true,
                     "its placement group was removed");
      }
      total_.Subtract(it->second.added);
      available_.Subtract(it->second.added);
      available_.Add(it->second.held);
      committed_.erase(it);
    }
    ReportSoon();
    Dispatch();
  }

  proto::NodeInfo SelfInfo() const {
    proto::NodeInfo info;
    info.set_node_id(node_id_);
    info.set_address(address_);
    info.set_node_ip(options_.node_ip);
    info.set_hostname(Hostname());
    info.set_alive(true);
    info.set_is_head_node(options_.is_head_node);
    total_.ToProto(info.mutable_total());
    AvailableToProto(info.mutable_available());
    for (const auto& [k, v] : options_.labels) (*info.mutable_labels())[k] = v;
    info.set_session_dir(options_.session_dir);
    if (objects_ != nullptr) {
      info.set_object_transfer_address(objects_->transfer_address());
    }
    return info;
  }

  // ---- Head ----

  void Register(std::function<void(absl::Status)> done) {
    proto::RegisterNodeRequest req;
    *req.mutable_node() = SelfInfo();
    rpc::CallProto<proto::RegisterNodeReply>(
        head_.get(), proto::REGISTER_NODE, req,
        [this, done](absl::StatusOr<proto::RegisterNodeReply> reply) {
          if (reply.ok()) {
            registered_ = true;
            if (reply->heartbeat_interval_ms() > 0) {
              heartbeat_ms_ = reply->heartbeat_interval_ms();
            }
            SHOAL_LOG(INFO)
                << "registered node " << node_id_ << " at " << address_
                << " with head " << options_.head_address;
          }
          if (done) done(reply.status());
        },
        5000);
  }

  void ScheduleHeartbeat() {
    loop_->RunAfter(heartbeat_ms_,
                    [this] { SendHeartbeat(/*periodic=*/true); });
  }

  // Tells the head about a change (lease granted or returned, request
  // queued) soon, rather than at the next periodic heartbeat, so that
  // `shoal status` and other agents' spillback see it. Coalesced.
  void ReportSoon() {
    if (report_scheduled_ || head_ == nullptr) return;
    report_scheduled_ = true;
    loop_->RunAfter(20, [this] {
      report_scheduled_ = false;
      SendHeartbeat(/*periodic=*/false);
    });
  }

  void SendHeartbeat(bool periodic) {
    if (head_ == nullptr) return;
    proto::HeartbeatRequest req;
    req.set_node_id(node_id_);
    AvailableToProto(req.mutable_available());
    total_.ToProto(req.mutable_total());
    FillDemands(&req);
    FillLeases(&req);
    rpc::CallProto<proto::HeartbeatReply>(
        head_.get(), proto::HEARTBEAT, req,
        [this, periodic](absl::StatusOr<proto::HeartbeatReply> reply) {
          if (!reply.ok()) {
            if (!head_warned_) {
              SHOAL_LOG(WARNING)
                  << "heartbeat to head failed: " << reply.status()
                  << " (retrying)";
              head_warned_ = true;
            }
          } else if (reply->unknown_node()) {
            if (periodic) {
              SHOAL_LOG(WARNING) << "the head does not know this node (it "
                                    "restarted or declared it dead); "
                                    "registering again";
              Register(nullptr);
            }
          } else {
            head_warned_ = false;
            view_.assign(reply->nodes().begin(), reply->nodes().end());
            Dispatch();
          }
          if (periodic) ScheduleHeartbeat();
        },
        std::max<int64_t>(heartbeat_ms_ * 4, 2000));
  }

  void FillLeases(proto::HeartbeatRequest* req) const {
    int64_t now = MonotonicUs();
    for (const auto& [id, lease] : leases_) {
      proto::LeaseInfo* info = req->add_leases();
      info->set_lease_id(id);
      info->set_node_id(node_id_);
      info->set_job_id(lease.job_id);
      info->set_worker_id(lease.worker_id);
      info->set_owner(lease.owner);
      info->set_age_ms((now - lease.granted_us) / 1000);
      lease.shape.ToProto(info->mutable_shape());
      if (auto w = workers_.find(lease.worker_id); w != workers_.end()) {
        info->set_worker_pid(w->second.pid);
        info->set_starting(w->second.state == Worker::State::kStarting);
      }
    }
  }

  void FillDemands(proto::HeartbeatRequest* req) const {
    std::map<std::pair<std::string, bool>, proto::ResourceDemand> by_shape;
    for (const PendingLease& p : pending_) {
      auto key = std::make_pair(p.shape.DebugString(), p.infeasible);
      auto [it, added] = by_shape.emplace(key, proto::ResourceDemand());
      if (added) {
        p.shape.ToProto(it->second.mutable_shape());
        it->second.set_infeasible(p.infeasible);
      }
      it->second.set_count(it->second.count() + 1);
    }
    for (auto& [k, d] : by_shape) *req->add_demands() = d;
  }

  // ---- Leases ----

  // The alive node (other than this one and the excluded) that fits `shape`
  // now, preferring the most available CPU; else one whose total fits.
  const proto::NodeInfo* FindSpillbackNode(const PendingLease& p,
                                           bool need_available) const {
    const proto::NodeInfo* best = nullptr;
    int64_t best_cpu = -1;
    for (const proto::NodeInfo& n : view_) {
      if (!n.alive() || n.node_id() == node_id_) continue;
      bool excluded = false;
      for (const auto& e : p.request.excluded_nodes())
        excluded |= e == n.node_id();
      if (excluded) continue;
      ResourceSet have =
          ResourceSet::FromProto(need_available ? n.available() : n.total());
      if (!have.Contains(p.shape)) continue;
      int64_t cpu = ResourceSet::FromProto(n.available()).Get("CPU");
      if (cpu > best_cpu) {
        best = &n;
        best_cpu = cpu;
      }
    }
    return best;
  }

  void RequestLease(const proto::RequestLeaseRequest& r, rpc::Responder resp) {
    PendingLease p;
    p.request = r;
    p.shape = ResourceSet::FromProto(r.shape());
    p.responder = std::move(resp);
    p.arrival_us = MonotonicUs();
    p.seq = ++next_request_seq_;
    if (!TryPlace(p)) pending_.push_back(std::move(p));
    ReportSoon();
  }

  // Grants, spills back or fails `p`; false when it must wait.
  bool TryPlace(PendingLease& p) {
    // A requester that left wants nothing (done: drop the request).
    if (!p.responder.connected()) return true;
    for (const auto& m : options_.accelerators) {
      absl::Status valid =
          m->ValidateRequest(BaseShape(p.shape).GetDouble(m->ResourceName()));
      if (!valid.ok()) {
        proto::RequestLeaseReply reply;
        reply.set_outcome(proto::RequestLeaseReply::INVALID);
        reply.set_error(std::string(valid.message()));
        p.responder.Reply(reply);
        return true;
      }
    }
    if (total_.Contains(p.shape)) {
      p.infeasible = false;
      if (available_.Contains(p.shape)) {
        Grant(p);
        return true;
      }
      if (!p.request.no_spillback()) {
        if (const auto* n = FindSpillbackNode(p, /*need_available=*/true)) {
          Spillback(p, *n);
          return true;
        }
      }
      return false;  // wait for local resources
    }
    if (const auto* n = FindSpillbackNode(p, /*need_available=*/true)) {
      Spillback(p, *n);
      return true;
    }
    if (const auto* n = FindSpillbackNode(p, /*need_available=*/false)) {
      Spillback(p, *n);
      return true;
    }
    // A task of a placement group whose bundle no node holds: a group that
    // was removed (or never existed) fails at once; one still being placed
    // is waited for, as long as the head says it is.
    if (std::string group = GroupOfShape(p.shape); !group.empty()) {
      int64_t now = MonotonicUs();
      if (p.group == PendingLease::Group::kBeingPlaced &&
          now - p.group_checked_us >= options_.infeasible_grace_ms * 1000) {
        p.group = PendingLease::Group::kUnchecked;
      }
      if (p.group == PendingLease::Group::kUnchecked && head_ != nullptr) {
        p.group = PendingLease::Group::kAsking;
        AskAboutGroup(p.seq, group);
      }
      if (p.group != PendingLease::Group::kUnchecked) {
        p.infeasible = false;
        EnsureDispatchTimer(now + options_.infeasible_grace_ms * 1000);
        return false;
      }
    }
    p.infeasible = true;
    if (MonotonicUs() - p.arrival_us >= options_.infeasible_grace_ms * 1000) {
      std::vector<NodeTotals> nodes;
      bool self_in_view = false;
      for (const proto::NodeInfo& n : view_) {
        if (!n.alive()) continue;
        self_in_view |= n.node_id() == node_id_;
        nodes.push_back({absl::StrCat(n.node_id(), " (", n.address(), ")"),
                         ResourceSet::FromProto(n.total())});
      }
      if (!self_in_view) {
        nodes.push_back({absl::StrCat(node_id_, " (", address_, ")"), total_});
      }
      proto::RequestLeaseReply reply;
      reply.set_outcome(proto::RequestLeaseReply::INFEASIBLE);
      reply.set_error(absl::StrCat("infeasible request ", p.shape.DebugString(),
                                   ": ", DescribeInfeasible(p.shape, nodes)));
      SHOAL_LOG(WARNING) << reply.error();
      p.responder.Reply(reply);
      return true;
    }
    EnsureDispatchTimer(p.arrival_us + options_.infeasible_grace_ms * 1000);
    return false;
  }

  // Asks the head about `group` for queued request `seq`: fails it at once
  // when the group is gone, else lets it wait for the group's placement.
  void AskAboutGroup(uint64_t seq, const std::string& group) {
    proto::GetPlacementGroupRequest req;
    req.set_pg_id(group);
    rpc::CallProto<proto::PlacementGroupInfo>(
        head_.get(), proto::GET_PLACEMENT_GROUP, req,
        [this, seq, group](absl::StatusOr<proto::PlacementGroupInfo> info) {
          auto it = std::find_if(
              pending_.begin(), pending_.end(),
              [seq](const PendingLease& p) { return p.seq == seq; });
          if (it == pending_.end()) return;
          std::string gone;
          if (!info.ok() && absl::IsNotFound(info.status())) {
            gone = absl::StrCat("no placement group ", group,
                                " exists on this cluster");
          } else if (info.ok() &&
                     (info->state() == proto::PlacementGroupInfo::REMOVED ||
                      info->state() == proto::PlacementGroupInfo::FAILED)) {
            gone = absl::StrCat(
                "placement group ", group,
                info->state() == proto::PlacementGroupInfo::FAILED
                    ? absl::StrCat(" failed: ", info->error())
                    : " was removed (by RemovePlacementGroup, or because the "
                      "job that created it ended; create it with "
                      "Lifetime::kDetached to keep it)");
          }
          if (gone.empty()) {
            // Being placed (or the head cannot say): wait, and ask again
            // after a grace period.
            it->group = PendingLease::Group::kBeingPlaced;
            it->group_checked_us = MonotonicUs();
            return;
          }
          proto::RequestLeaseReply reply;
          reply.set_outcome(proto::RequestLeaseReply::INVALID);
          reply.set_error(absl::StrCat(gone, "; its tasks cannot run"));
          it->responder.Reply(reply);
          pending_.erase(it);
          ReportSoon();
        },
        5000);
  }

  void EnsureDispatchTimer(int64_t at_us) {
    if (dispatch_timer_at_ != 0 && dispatch_timer_at_ <= at_us) return;
    if (dispatch_timer_ != 0) loop_->CancelTimer(dispatch_timer_);
    dispatch_timer_at_ = at_us;
    int64_t delay_ms = std::max<int64_t>(1, (at_us - MonotonicUs()) / 1000 + 1);
    dispatch_timer_ = loop_->RunAfter(delay_ms, [this] {
      dispatch_timer_ = 0;
      dispatch_timer_at_ = 0;
      Dispatch();
    });
  }

  void Dispatch() {
    std::deque<PendingLease> waiting;
    waiting.swap(pending_);
    while (!waiting.empty()) {
      PendingLease p = std::move(waiting.front());
      waiting.pop_front();
      if (!TryPlace(p)) pending_.push_back(std::move(p));
    }
  }

  void Spillback(const PendingLease& p, const proto::NodeInfo& node) {
    // Until the next view arrives, count what was sent there as taken, so
    // that the next request of the same shape goes to another node that fits
    // (tasks that must run at once, one per host, then do).
    for (proto::NodeInfo& n : view_) {
      if (n.node_id() != node.node_id()) continue;
      ResourceSet available = ResourceSet::FromProto(n.available());
      if (!available.Contains(p.shape)) break;
      available.Subtract(p.shape);
      n.clear_available();
      available.ToProto(n.mutable_available());
      break;
    }
    proto::RequestLeaseReply reply;
    reply.set_outcome(proto::RequestLeaseReply::SPILLBACK);
    reply.set_spillback_address(node.address());
    reply.set_spillback_node_id(node.node_id());
    p.responder.Reply(reply);
  }

  // Takes device ids for each accelerator the shape asks for: whole devices
  // are exclusive; a fraction (GPU: 0.5) shares the lowest-numbered device.
  DeviceIds TakeDevices(const ResourceSet& shape) {
    DeviceIds out;
    for (const auto& m : options_.accelerators) {
      const std::string& name = m->ResourceName();
      int64_t fixed = shape.Get(name);
      if (fixed <= 0) continue;
      std::set<int>& free = free_devices_[name];
      if (fixed < kResourceUnit) {
        out[name] = {free.empty() ? 0 : *free.begin()};
        continue;
      }
      int64_t count = fixed / kResourceUnit;
      for (auto it = free.begin(); it != free.end() && count > 0; --count) {
        out[name].push_back(*it);
        it = free.erase(it);
      }
    }
    return out;
  }

  void ReturnDevices(const Lease& lease) {
    ResourceSet base = BaseShape(lease.shape);
    for (const auto& [name, ids] : lease.devices) {
      if (base.Get(name) < kResourceUnit) continue;  // shared
      free_devices_[name].insert(ids.begin(), ids.end());
    }
  }

  void Grant(PendingLease& p) {
    available_.Subtract(p.shape);
    Lease lease;
    lease.id = RandomHex(8);
    lease.shape = p.shape;
    lease.conn_id = p.responder.connection_id();
    lease.owner = p.responder.peer();
    lease.job_id = p.request.job_id();
    lease.granted_us = MonotonicUs();
    lease.devices = TakeDevices(BaseShape(p.shape));
    if (lease.devices.count("TPU")) {
      absl::Status clear = ClearTpuLock();
      if (!clear.ok()) {
        ReturnDevices(lease);
        available_.Add(p.shape);
        proto::RequestLeaseReply reply;
        reply.set_outcome(proto::RequestLeaseReply::FAILED);
        reply.set_error(std::string(clear.message()));
        p.responder.Reply(reply);
        return;
      }
    }
    std::string device_key = DeviceKey(lease.devices);
    // Reuse an idle worker of the same job and binary that sees the same
    // devices.
    for (auto& [id, w] : workers_) {
      if (w.state == Worker::State::kIdle && w.job_id == p.request.job_id() &&
          w.binary_hash == p.request.binary_hash() &&
          w.device_key == device_key) {
        w.state = Worker::State::kLeased;
        w.lease_id = lease.id;
        lease.worker_id = id;
        leases_[lease.id] = lease;
        ReplyGranted(p.responder, lease, w);
        return;
      }
    }
    std::string worker_id = RandomHex(6);
    lease.worker_id = worker_id;
    leases_[lease.id] = lease;
    Worker& w = workers_[worker_id];
    w.id = worker_id;
    w.job_id = p.request.job_id();
    w.binary_hash = p.request.binary_hash();
    w.device_key = device_key;
    w.state = Worker::State::kStarting;
    w.lease_id = lease.id;
    starting_[worker_id] = {lease.id, p.responder};
    ResolveBinary(p.request.binary_path(), p.request.binary_hash(),
                  [this, worker_id](absl::StatusOr<std::string> path) {
                    if (!path.ok()) return FailStart(worker_id, path.status());
                    StartWorker(worker_id, *path);
                  });
  }

  // Before a process gets TPU chips, nothing may still hold them: libtpu
  // takes /tmp/libtpu_lockfile (SHOAL_LIBTPU_LOCKFILE) for the host's chips.
  // Holders left from an earlier Shoal gang on this node are ended; a lock
  // with no living holder is removed; a holder that is not Shoal's is an
  // error naming it (never a silent hang in the new process).
  absl::Status ClearTpuLock() {
    const char* env = getenv("SHOAL_LIBTPU_LOCKFILE");
    std::string path = env && *env ? env : "/tmp/libtpu_lockfile";
    if (!PathExists(path)) return absl::OkStatus();
    for (int64_t pid : ProcessesHoldingFile(path)) {
      auto environ = ReadFile(absl::StrCat("/proc/", pid, "/environ"));
      std::string vars = environ.ok() ? *environ : "";
      std::replace(vars.begin(), vars.end(), '\0', '\n');
      vars = "\n" + vars;
      bool ours =
          vars.find("\nSHOAL_NODE_ID=" + node_id_ + "\n") != std::string::npos;
      bool live = false;
      for (const auto& [id, w] : workers_) {
        if (w.state != Worker::State::kIdle &&
            vars.find("\nSHOAL_WORKER_ID=" + id + "\n") != std::string::npos) {
          live = true;
        }
      }
      if (ours && !live) {
        SHOAL_LOG(WARNING) << "ending pid " << pid
                           << ", left from an earlier gang, which holds "
                           << path;
        kill(static_cast<pid_t>(pid), SIGKILL);
        for (int i = 0; i < 100 && ProcessAlive(pid); ++i) usleep(10000);
        continue;
      }
      auto cmdline = ReadFile(absl::StrCat("/proc/", pid, "/cmdline"));
      std::string cmd = cmdline.ok() ? *cmdline : "?";
      std::replace(cmd.begin(), cmd.end(), '\0', ' ');
      return absl::FailedPreconditionError(
          absl::StrCat("the TPU chips of node ", node_id_, " are held by pid ",
                       pid, " (", absl::StripTrailingAsciiWhitespace(cmd),
                       "), which Shoal did not start: it has ", path,
                       " open. Stop that process, then retry"));
    }
    if (ProcessesHoldingFile(path).empty()) {
      SHOAL_LOG(INFO) << "removing stale " << path << " (no living holder)";
      unlink(path.c_str());
    }
    return absl::OkStatus();
  }

  void ReplyGranted(const rpc::Responder& responder, const Lease& lease,
                    const Worker& w) {
    proto::RequestLeaseReply reply;
    reply.set_outcome(proto::RequestLeaseReply::GRANTED);
    reply.set_lease_id(lease.id);
    reply.set_worker_id(w.id);
    reply.set_worker_address(w.address);
    reply.set_worker_pid(w.pid);
    reply.set_node_id(node_id_);
    responder.Reply(reply);
  }

  void FailStart(const std::string& worker_id, const absl::Status& why) {
    auto it = starting_.find(worker_id);
    if (it != starting_.end()) {
      proto::RequestLeaseReply reply;
      reply.set_outcome(proto::RequestLeaseReply::FAILED);
      reply.set_error(std::string(why.message()));
      it->second.responder.Reply(reply);
      starting_.erase(it);
    }
    auto w = workers_.find(worker_id);
    if (w != workers_.end()) {
      RememberExit(worker_id, std::string(why.message()));
      DropLease(w->second.lease_id);
      workers_.erase(w);
    }
    Dispatch();
  }

  void DropLease(const std::string& lease_id) {
    auto it = leases_.find(lease_id);
    if (it == leases_.end()) return;
    available_.Add(it->second.shape);
    ReturnDevices(it->second);
    leases_.erase(it);
    ReportSoon();
  }

  void ReleaseLease(const std::string& lease_id, bool kill_worker,
                    const std::string& why = "its lease was returned") {
    auto it = leases_.find(lease_id);
    if (it == leases_.end()) return;
    std::string worker_id = it->second.worker_id;
    DropLease(lease_id);
    auto w = workers_.find(worker_id);
    if (w != workers_.end()) {
      if (kill_worker && w->second.pid > 0) {
        w->second.stopped_because = why;
        kill(w->second.pid, SIGKILL);
      } else if (w->second.state == Worker::State::kLeased) {
        w->second.state = Worker::State::kIdle;
        w->second.lease_id.clear();
        w->second.idle_since_us = MonotonicUs();
      }
    }
    Dispatch();
  }

  void OnDisconnect(uint64_t conn) {
    if (objects_ != nullptr) objects_->OnDisconnect(conn);
    // Its queued requests go first: releasing its leases below hands the
    // freed resources to what waits, which must not be the departed
    // requester's own requests (their leases would belong to nobody).
    std::deque<PendingLease> keep;
    size_t dropped = 0;
    for (auto& p : pending_) {
      if (p.responder.connection_id() != conn) {
        keep.push_back(std::move(p));
      } else {
        ++dropped;
      }
    }
    pending_.swap(keep);
    std::vector<std::string> gone;
    for (const auto& [id, l] : leases_) {
      if (l.conn_id == conn) gone.push_back(id);
    }
    if (!gone.empty() || dropped > 0) {
      SHOAL_LOG(INFO) << "requester " << conn << " left: releasing "
                      << gone.size() << " lease(s), dropping " << dropped
                      << " queued request(s)";
    }
    // The requester is gone: its workers may be mid-task for nobody.
    for (const auto& id : gone) {
      ReleaseLease(id, /*kill_worker=*/true, "its driver disconnected");
    }
    ReportSoon();
  }

  // ---- Workers ----

  // The path of a file with `hash`: the driver's own path when it holds the
  // same file, else a copy fetched from the head.
  void ResolveBinary(const std::string& path, const std::string& hash,
                     std::function<void(absl::StatusOr<std::string>)> done) {
    if (hash.empty()) return done(path);
    if (FileHasHash(path, hash)) return done(path);
    std::string cached = options_.session_dir + "/binaries/" + hash;
    if (FileHasHash(cached, hash)) return done(cached);
    fetch_waiters_[hash].push_back(std::move(done));
    if (fetch_waiters_[hash].size() > 1) return;  // already fetching
    SHOAL_LOG(INFO) << "fetching binary " << hash.substr(0, 12)
                    << " from the head (" << path << " is not here)";
    std::string partial = cached + ".partial";
    unlink(partial.c_str());
    FetchChunk(hash, partial, cached, 0);
  }

  void FetchChunk(const std::string& hash, const std::string& partial,
                  const std::string& final_path, int64_t offset) {
    if (head_ == nullptr) {
      auto waiters = std::move(fetch_waiters_[hash]);
      fetch_waiters_.erase(hash);
      for (auto& w : waiters) w(absl::CancelledError("the agent is stopping"));
      return;
    }
    proto::GetBlobChunkRequest req;
    req.set_hash(hash);
    req.set_offset(offset);
    req.set_max_bytes(kBlobChunk);
    rpc::CallProto<proto::BlobChunk>(
        head_.get(), proto::GET_BLOB_CHUNK, req,
        [this, hash, partial, final_path,
         offset](absl::StatusOr<proto::BlobChunk> chunk) {
          auto finish = [this, hash](absl::StatusOr<std::string> result) {
            auto waiters = std::move(fetch_waiters_[hash]);
            fetch_waiters_.erase(hash);
            for (auto& w : waiters) w(result);
          };
          if (!chunk.ok()) {
            return finish(
                Annotate(chunk.status(),
                         "cannot fetch the worker binary from the head"));
          }
          std::ofstream f(partial, std::ios::binary | std::ios::app);
          f.write(chunk->data().data(), chunk->data().size());
          f.close();
          if (!chunk->last()) {
            return FetchChunk(hash, partial, final_path,
                              offset + chunk->data().size());
          }
          auto got = Sha256File(partial);
          if (!got.ok() || *got != hash) {
            unlink(partial.c_str());
            return finish(absl::DataLossError(
                "the binary fetched from the head does not match its hash"));
          }
          chmod(partial.c_str(), 0755);
          rename(partial.c_str(), final_path.c_str());
          finish(final_path);
        },
        60000);
  }

  bool FileHasHash(const std::string& path, const std::string& hash) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return false;
    std::string key = absl::StrCat(path, "|", st.st_size, "|",
                                   st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec);
    auto it = hash_cache_.find(key);
    if (it == hash_cache_.end()) {
      auto h = Sha256File(path);
      if (!h.ok()) return false;
      it = hash_cache_.emplace(key, *h).first;
    }
    return it->second == hash;
  }

  void StartWorker(const std::string& worker_id, const std::string& binary) {
    auto wit = workers_.find(worker_id);
    if (wit == workers_.end()) return;
    Worker& w = wit->second;
    if (leases_.count(w.lease_id) == 0) {
      // Its lease went while the binary was being found (the requester left
      // or returned it): start nothing for nobody.
      SHOAL_LOG(INFO) << "not starting worker " << worker_id << ": its lease "
                      << w.lease_id << " was released";
      return FailStart(worker_id,
                       absl::CancelledError("the lease was released"));
    }
    SpawnOptions spawn;
    spawn.argv = {binary};
    spawn.env = {
        {"SHOAL_ROLE", "worker"},
        {"SHOAL_WORKER_ID", worker_id},
        {"SHOAL_AGENT_ADDRESS", address_},
        {"SHOAL_NODE_ID", node_id_},
        {"SHOAL_NODE_IP", options_.node_ip},
        {"SHOAL_JOB_ID", w.job_id},
        {"SHOAL_TOKEN", options_.token},
        {"SHOAL_ADDRESS", options_.head_address},
        {"SHOAL_SESSION_DIR", options_.session_dir},
    };
    if (auto lease = leases_.find(w.lease_id); lease != leases_.end()) {
      absl::Status st = AddDeviceEnvironment(lease->second.devices, &spawn);
      if (!st.ok()) return FailStart(worker_id, st);
    }
    w.log_path =
        absl::StrCat(options_.session_dir, "/logs/worker-", worker_id, ".log");
    spawn.log_path = w.log_path;
    auto pid = Spawn(spawn);
    if (!pid.ok()) return FailStart(worker_id, pid.status());
    w.pid = *pid;
  }

  // What a worker holding `devices` must find in its environment: the
  // accelerator's own variables (TPU_VISIBLE_CHIPS and bounds,
  // CUDA_VISIBLE_DEVICES) and Shoal's (read by shoal::GetAssignedDevices()).
  absl::Status AddDeviceEnvironment(const DeviceIds& devices,
                                    SpawnOptions* spawn) {
    for (const auto& m : options_.accelerators) {
      auto it = devices.find(m->ResourceName());
      if (it == devices.end()) {
        // Hide this kind's devices from a worker that holds none of them.
        ASSIGN_OR_RETURN(accel::DeviceEnvironment none,
                         m->VisibleDevicesEnvironment({}));
        for (const auto& [k, v] : none.set) spawn->env[k] = v;
        for (const auto& k : none.unset) spawn->unset_env.push_back(k);
        continue;
      }
      ASSIGN_OR_RETURN(accel::DeviceEnvironment env,
                       m->VisibleDevicesEnvironment(it->second));
      for (const auto& [k, v] : env.set) spawn->env[k] = v;
      for (const auto& k : env.unset) spawn->unset_env.push_back(k);
      std::string ids;
      for (int id : it->second) {
        absl::StrAppend(&ids, ids.empty() ? "" : ",", id);
      }
      spawn->env["SHOAL_DEVICE_KIND"] = m->ResourceName();
      spawn->env["SHOAL_DEVICE_IDS"] = ids;
      spawn->env["SHOAL_ACCELERATOR_TYPE"] = m->AcceleratorType();
      auto labels = m->Labels();
      for (const auto& [label, var] :
           std::vector<std::pair<std::string, std::string>>{
               {accel::kLabelTpuSliceName, "SHOAL_TPU_SLICE_NAME"},
               {accel::kLabelTpuWorkerId, "SHOAL_TPU_WORKER_ID"},
               {accel::kLabelAcceleratorType, "SHOAL_ACCELERATOR_NAME"}}) {
        if (auto l = labels.find(label); l != labels.end()) {
          spawn->env[var] = l->second;
        }
      }
    }
    return absl::OkStatus();
  }

  void RegisterWorker(const proto::RegisterWorkerRequest& r,
                      rpc::Responder resp) {
    auto it = workers_.find(r.worker_id());
    if (it == workers_.end()) {
      return resp.Error(absl::NotFoundError("this agent did not start worker " +
                                            r.worker_id()));
    }
    Worker& w = it->second;
    w.address = absl::StrCat(options_.node_ip, ":", r.port());
    if (w.pid == 0) w.pid = r.pid();
    resp.Reply(proto::Empty());
    auto s = starting_.find(r.worker_id());
    if (s == starting_.end()) return;
    PendingGrant grant = std::move(s->second);
    starting_.erase(s);
    auto lease = leases_.find(grant.lease_id);
    if (lease == leases_.end()) {
      // The requester went away while the worker started.
      w.state = Worker::State::kIdle;
      w.lease_id.clear();
      w.idle_since_us = MonotonicUs();
      return;
    }
    w.state = Worker::State::kLeased;
    ReplyGranted(grant.responder, lease->second, w);
  }

  void RememberExit(const std::string& worker_id, const std::string& what) {
    exits_[worker_id] = what;
    exit_order_.push_back(worker_id);
    if (exit_order_.size() > kMaxRememberedExits) {
      exits_.erase(exit_order_.front());
      exit_order_.pop_front();
    }
  }

  void ScheduleReaper() {
    loop_->RunAfter(100, [this] {
      Reap();
      ReapIdle();
      ScheduleReaper();
    });
  }

  void Reap() {
    while (true) {
      int status = 0;
      pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      for (auto it = workers_.begin(); it != workers_.end(); ++it) {
        if (it->second.pid != pid) continue;
        Worker w = it->second;
        std::string what =
            absl::StrCat("worker pid ", pid, " on node ", node_id_, " ",
                         DescribeWaitStatus(status));
        if (w.state == Worker::State::kStarting) {
          what += absl::StrCat(" before it registered; see ", w.log_path);
        }
        if (!w.stopped_because.empty()) {
          SHOAL_LOG(INFO) << what
                          << " (stopped by this agent: " << w.stopped_because
                          << ")";
        } else if (w.state != Worker::State::kIdle) {
          SHOAL_LOG(WARNING) << what;
        }
        RememberExit(w.id, what);
        EndLeftovers(w.id);
        if (w.state == Worker::State::kStarting) {
          FailStart(w.id, absl::UnavailableError(what));
        } else {
          DropLease(w.lease_id);
          workers_.erase(it);
          Dispatch();
        }
        break;
      }
    }
  }

  // Processes a worker started (a launch's ranks and whatever they started
  // in turn) carry its SHOAL_WORKER_ID: none outlives the worker.
  void EndLeftovers(const std::string& worker_id) {
    for (int64_t pid : ProcessesWithEnvironment("SHOAL_WORKER_ID", worker_id)) {
      if (pid == getpid()) continue;
      SHOAL_LOG(INFO) << "ending pid " << pid << ", left behind by worker "
                      << worker_id;
      kill(static_cast<pid_t>(pid), SIGKILL);
    }
  }

  void ReapIdle() {
    int64_t now = MonotonicUs();
    for (auto& [id, w] : workers_) {
      if (w.state == Worker::State::kIdle && w.pid > 0 &&
          now - w.idle_since_us > options_.worker_idle_timeout_ms * 1000) {
        kill(w.pid, SIGTERM);
        w.idle_since_us = now;  // SIGKILL follows if it lingers another period
      }
    }
  }

  // Answers when the worker has been reaped (waiting up to ~2 s for it).
  void GetWorkerExit(const std::string& worker_id, rpc::Responder resp,
                     int attempt) {
    Reap();
    proto::GetWorkerExitReply reply;
    if (auto it = exits_.find(worker_id); it != exits_.end()) {
      reply.set_exited(true);
      reply.set_description(it->second);
      return resp.Reply(reply);
    }
    if (workers_.count(worker_id) == 0 || attempt >= 20) {
      reply.set_description(workers_.count(worker_id)
                                ? "the worker is still running"
                                : "this agent does not know the worker");
      return resp.Reply(reply);
    }
    loop_->RunAfter(100, [this, worker_id, resp, attempt] {
      GetWorkerExit(worker_id, resp, attempt + 1);
    });
  }

  AgentOptions options_;
  std::unique_ptr<rpc::EventLoop> loop_;
  std::unique_ptr<rpc::Server> server_;
  std::unique_ptr<ObjectService> objects_;  // null: no object store memory
  std::unique_ptr<rpc::Channel> head_;
  std::string node_id_;
  std::string address_;
  bool registered_ = false;
  bool head_warned_ = false;
  bool report_scheduled_ = false;
  int64_t heartbeat_ms_ = 500;

  ResourceSet total_;
  ResourceSet available_;
  std::vector<proto::NodeInfo> view_;
  uint64_t next_request_seq_ = 0;
  std::map<std::string, std::set<int>> free_devices_;
  struct Reservation {
    std::vector<std::pair<int, ResourceSet>> bundles;  // index, resources
    ResourceSet held;   // taken from the node's own resources
    ResourceSet added;  // the bundle resources, once committed
  };
  std::map<std::string, Reservation> prepared_;
  std::map<std::string, Reservation> committed_;
  std::map<std::string, Worker> workers_;
  std::map<std::string, Lease> leases_;
  std::map<std::string, PendingGrant> starting_;
  std::deque<PendingLease> pending_;
  uint64_t dispatch_timer_ = 0;
  int64_t dispatch_timer_at_ = 0;
  std::map<std::string, std::string> exits_;
  std::deque<std::string> exit_order_;
  std::map<std::string, std::string> hash_cache_;
  std::map<std::string,
           std::vector<std::function<void(absl::StatusOr<std::string>)>>>
      fetch_waiters_;

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_requested_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<NodeAgent>> NodeAgent::Create(
    const AgentOptions& options) {
  ASSIGN_OR_RETURN(auto loop, rpc::EventLoop::Create("shoal-agent"));
  auto agent = std::make_unique<AgentImpl>(options, std::move(loop));
  RETURN_IF_ERROR(agent->Start());
  return agent;
}

}  // namespace shoal
