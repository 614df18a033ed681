#include "agent/agent.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "agent/binary_cache.h"
#include "agent/bundle_reservations.h"
#include "agent/cluster_view.h"
#include "agent/device_allocator.h"
#include "agent/job_runner.h"
#include "agent/lease_policy.h"
#include "agent/lease_queue.h"
#include "agent/lease_table.h"
#include "agent/log_service.h"
#include "agent/node_resources.h"
#include "agent/object_service.h"
#include "agent/tpu_lock.h"
#include "agent/worker_pool.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/util.h"
#include "head_client/head_client.h"
#include "rpc/rpc.h"
#include "shoal/shoal.pb.h"

namespace shoal {
namespace {

using agent::BinaryCache;
using agent::BinaryChunk;
using agent::BlockResult;
using agent::BundleReservations;
using agent::DeviceAllocator;
using agent::Lease;
using agent::LeaseDecision;
using agent::LeaseQueue;
using agent::LeaseTable;
using agent::NodeResources;
using agent::ObjectService;
using agent::PendingLease;
using agent::Worker;
using agent::WorkerPool;

constexpr int64_t kPrepareExpiryMs = 10000;

// A lease granted before its worker registered.
struct PendingGrant {
  std::string lease_id;
  rpc::Responder responder;
};

std::map<std::string, int> DeviceCounts(
    const std::vector<std::shared_ptr<const accel::AcceleratorManager>>&
        accelerators) {
  std::map<std::string, int> counts;
  for (const auto& m : accelerators) {
    counts[m->ResourceName()] = m->NumDevices();
  }
  return counts;
}

// Runs on the agent's event loop; not thread-safe. Every field is the
// loop's, except what Wait() and Stop() share (stop_mu_ guards it); the
// parts (leases_, bundles_, devices_, workers_, binaries_, pending_) are
// loop-only as well.
class AgentImpl : public NodeAgent {
 public:
  AgentImpl(AgentOptions options, std::unique_ptr<rpc::EventLoop> loop)
      : options_(std::move(options)),
        loop_(std::move(loop)),
        node_id_(options_.node_id.empty() ? RandomHex(6) : options_.node_id),
        node_{options_.resources, options_.resources},
        leases_(&node_),
        bundles_(node_id_, &node_),
        devices_(DeviceCounts(options_.accelerators)),
        binaries_(
            options_.session_dir + "/binaries",
            [this](const std::string& hash, int64_t offset, int64_t max_bytes,
                   std::function<void(absl::StatusOr<BinaryChunk>)> done) {
              FetchBlobChunk(hash, offset, max_bytes, std::move(done));
            }) {}

  ~AgentImpl() override { Stop(); }

  // The node's shared-memory object store, sized by the node's
  // object_store_memory (`--object-store-memory`, or detected).
  absl::Status StartObjectStore() {
    auto capacity =
        static_cast<uint64_t>(node_.total.GetDouble("object_store_memory"));
    if (capacity == 0) return absl::OkStatus();
    agent::ObjectServiceOptions object_options;
    object_options.name = absl::StrCat("node-", node_id_, "-", getpid());
    object_options.capacity = capacity;
    object_options.spill_dir = options_.session_dir + "/spill";
    object_options.loop = loop_.get();
    object_options.node_ip = options_.node_ip;
    object_options.token = options_.token;
    object_options.node_id = node_id_;
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

  // What the node has free (CPU that blocked workers lend serves only their
  // nested tasks and is not counted); object_store_memory is what the store
  // has not used, so that `shoal status` shows its use.
  void AvailableToProto(proto::ResourceMap* map) const {
    ResourceSet available = node_.Unlent();
    if (objects_ != nullptr) {
      int64_t total = node_.total.Get("object_store_memory");
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
      server_->EnableStats();
      rpc::AlsoListenOnLoopback(server_.get(), options_.node_ip);
      address_ = absl::StrCat(options_.node_ip, ":", server_->port());
      head_ = std::make_unique<rpc::HeadClient>(
          loop_.get(), options_.head_address, options_.token,
          "agent " + node_id_);
      workers_ = std::make_unique<WorkerPool>(PoolOptions(),
                                              agent::SystemProcessLauncher());
      agent::JobRunnerOptions jobs;
      jobs.jobs_dir = options_.session_dir + "/jobs";
      jobs.token = options_.token;
      jobs.python_path = agent::FindShoalPythonPackage(SelfExecutable());
      jobs.report = [this](const proto::JobEvent& event) {
        job_events_.push_back(event);
        if (job_events_.size() == 1) SendJobEvent();
      };
      jobs.fetch_blob =
          [this](const std::string& hash,
                 std::function<void(absl::StatusOr<std::string>)> done) {
            binaries_.Resolve("", hash, "", std::move(done));
          };
      jobs.reserve = [this](const ResourceSet& need) {
        if (!node_.CanGrant(need)) {
          return absl::ResourceExhaustedError(
              absl::StrCat("the entrypoint's resources (", need.DebugString(),
                           ") are not free on this node now"));
        }
        node_.available.Subtract(need);
        ReportSoon();
        return absl::OkStatus();
      };
      jobs.release = [this](const ResourceSet& held) {
        node_.available.Add(held);
        ReportSoon();
        Dispatch();
      };
      jobs_ = std::make_unique<agent::JobRunner>(loop_.get(), std::move(jobs));
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
      ScheduleHeadWatch();
    });
    return absl::OkStatus();
  }

  std::string address() const override { return address_; }
  std::string node_id() const override { return node_id_; }

  void Wait() override {
    std::unique_lock<std::mutex> lock(stop_mu_);
    stop_cv_.wait(lock, [&] { return stop_requested_; });
  }

  absl::Status stop_reason() const override {
    std::lock_guard<std::mutex> lock(stop_mu_);
    return stop_reason_;
  }

  void Stop() override {
    if (!loop_) return;
    RequestStop();
    std::promise<void> unregistered;
    loop_->Post([&] {
      // From here no beat goes out: one answered after the head took the
      // node off would find it unknown and register it again.
      leaving_ = true;
      // A lost head is not told: it is gone, or another cluster's.
      if (!registered_ || head_ == nullptr || head_lost_) {
        return unregistered.set_value();
      }
      proto::UnregisterNodeRequest req;
      req.set_node_id(node_id_);
      req.set_reason("stopped by its operator (shoal stop)");
      head_->UnregisterNode(
          req, [&](absl::StatusOr<proto::Empty>) { unregistered.set_value(); },
          1000);
    });
    unregistered.get_future().wait();
    RunOnLoop([&]() -> absl::Status {
      if (server_) server_->Shutdown();
      // Closing the client fails the calls still in flight, and their
      // callbacks run now; head_ is null by then, which tells them that the
      // agent is stopping and must not act on (or warn about) the failure.
      std::unique_ptr<rpc::HeadClient> head = std::move(head_);
      if (head != nullptr) head->Close();
      if (workers_ != nullptr) {
        std::vector<std::string> ids;
        for (const auto& [id, w] : workers_->workers()) ids.push_back(id);
        workers_->StopAll();
        for (const std::string& id : ids) EndLeftovers(id);
      }
      jobs_.reset();  // ends their process groups
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
  // What every worker of this node finds in its environment.
  agent::WorkerPoolOptions PoolOptions() const {
    agent::WorkerPoolOptions o;
    o.node_id = node_id_;
    o.log_dir = options_.session_dir + "/logs";
    o.idle_timeout_ms = options_.worker_idle_timeout_ms;
    o.env = {
        {"SHOAL_AGENT_ADDRESS", address_},
        {"SHOAL_NODE_ID", node_id_},
        {"SHOAL_NODE_IP", options_.node_ip},
        {"SHOAL_TOKEN", options_.token},
        {"SHOAL_ADDRESS", options_.head_address},
        {"SHOAL_SESSION_DIR", options_.session_dir},
    };
    return o;
  }

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
    logs_ = std::make_unique<agent::LogService>(
        loop_.get(), options_.session_dir + "/logs", node_id_);
    logs_->Register(s);
    rpc::RegisterProto<proto::JobSpec>(
        s, proto::START_JOB, [this](const auto& r, rpc::Responder resp) {
          jobs_->Start(r, [resp](absl::Status st) {
            if (!st.ok()) return resp.Error(st);
            resp.Reply(proto::Empty());
          });
        });
    rpc::RegisterProto<proto::JobRef>(
        s, proto::SIGNAL_JOB, [this](const auto& r, rpc::Responder resp) {
          absl::Status st = jobs_->Signal(r.submission_id());
          if (!st.ok()) return resp.Error(st);
          resp.Reply(proto::Empty());
        });
    rpc::RegisterProto<proto::RequestLeaseRequest>(
        s, proto::REQUEST_LEASE,
        [this](const auto& r, rpc::Responder resp) { RequestLease(r, resp); });
    rpc::RegisterProto<proto::CancelLease>(
        s, proto::CANCEL_LEASE_REQUEST,
        [this](const auto& r, rpc::Responder resp) {
          CancelLeaseRequest(r.request_id(), resp);
        });
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
    rpc::RegisterProto<proto::WorkerBlockedRequest>(
        s, proto::WORKER_BLOCKED, [this](const auto& r, rpc::Responder resp) {
          WorkerBlocked(r.worker_id(), r.depth());
          resp.Reply(proto::Empty());
        });
    rpc::RegisterProto<proto::WorkerBlockedRequest>(
        s, proto::WORKER_UNBLOCKED, [this](const auto& r, rpc::Responder resp) {
          WorkerUnblocked(r.worker_id());
          resp.Reply(proto::Empty());
        });
    rpc::RegisterProto<proto::GetWorkerExitRequest>(
        s, proto::GET_WORKER_EXIT, [this](const auto& r, rpc::Responder resp) {
          GetWorkerExit(r.worker_id(), resp, 0);
        });
    rpc::RegisterProto<proto::Empty>(
        s, proto::GET_AGENT_INFO, [this](const auto&, rpc::Responder resp) {
          proto::AgentInfo info;
          *info.mutable_node() = SelfInfo();
          info.set_num_workers(workers_->size());
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
          absl::Status st = PrepareBundles(r);
          if (!st.ok()) return resp.Error(st);
          resp.Reply(proto::Empty());
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

  // A prepare the head forgets (never commits or cancels) expires.
  absl::Status PrepareBundles(const proto::BundleReservation& r) {
    const std::string& pg = r.pg_id();
    if (bundles_.IsPrepared(pg) || bundles_.IsCommitted(pg)) {
      return absl::OkStatus();  // a retried prepare
    }
    std::vector<BundleReservations::Bundle> bundles;
    for (int i = 0; i < r.indices_size() && i < r.bundles_size(); ++i) {
      bundles.emplace_back(r.indices(i), ResourceSet::FromProto(r.bundles(i)));
    }
    RETURN_IF_ERROR(bundles_.Prepare(pg, bundles));
    loop_->RunAfter(kPrepareExpiryMs, [this, pg] {
      if (bundles_.IsPrepared(pg)) {
        SHOAL_LOG(WARNING) << "placement group " << pg
                           << ": prepared bundles never committed; released";
        CancelBundles(pg);
      }
    });
    ReportSoon();
    return absl::OkStatus();
  }

  absl::Status CommitBundles(const std::string& pg) {
    RETURN_IF_ERROR(bundles_.Commit(pg));
    ReportSoon();
    Dispatch();
    return absl::OkStatus();
  }

  void CancelBundles(const std::string& pg) {
    bool committed = bundles_.IsCommitted(pg);
    // The group's resources go first, so that what its leases give back
    // below cannot be granted again to a request of the same group.
    bundles_.Cancel(pg);
    if (committed) {
      // Workers running in the group's bundles end with it.
      for (const auto& id : leases_.InGroup(pg)) {
        ReleaseLease(id, /*kill_worker=*/true,
                     "its placement group was removed");
      }
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
    info.set_host_id(HostId());
    info.set_alive(true);
    info.set_is_head_node(options_.is_head_node);
    node_.total.ToProto(info.mutable_total());
    AvailableToProto(info.mutable_available());
    for (const auto& [k, v] : options_.labels) (*info.mutable_labels())[k] = v;
    info.set_session_dir(options_.session_dir);
    if (objects_ != nullptr) {
      info.set_object_transfer_address(objects_->transfer_address());
    }
    return info;
  }

  // ---- Head ----

  // Sends the oldest job report not yet taken by the head; the next once it
  // is. A head that is away (restarting) gets it again every 500 ms, in
  // order: a job's output is not lost while its head restarts.
  void SendJobEvent() {
    if (job_events_.empty() || head_ == nullptr) return;
    head_->JobEvent(job_events_.front(),
                    [this](absl::StatusOr<proto::Empty> r) {
                      if (head_ == nullptr) return;  // stopping
                      if (!r.ok()) {
                        if (!job_events_warned_) {
                          job_events_warned_ = true;
                          SHOAL_LOG(WARNING)
                              << "job " << job_events_.front().submission_id()
                              << ": the head did not take a report ("
                              << r.status() << "); sending it again";
                        }
                        loop_->RunAfter(500, [this] { SendJobEvent(); });
                        return;
                      }
                      job_events_warned_ = false;
                      job_events_.pop_front();
                      SendJobEvent();
                    });
  }

  void Register(std::function<void(absl::Status)> done) {
    proto::RegisterNodeRequest req;
    *req.mutable_node() = SelfInfo();
    head_->RegisterNode(
        req,
        [this, done](absl::StatusOr<proto::RegisterNodeReply> reply) {
          if (!reply.ok()) {
            HeadFailed(reply.status());
          } else {
            registered_ = true;
            HeadAnswered();
            view_.Reset();
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
    loop_->RunAfter(JitteredMs(heartbeat_ms_),
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
    if (head_ == nullptr || leaving_) return;
    proto::HeartbeatRequest req;
    req.set_node_id(node_id_);
    AvailableToProto(req.mutable_available());
    node_.total.ToProto(req.mutable_total());
    FillDemands(&req);
    FillLeases(&req);
    view_.FillRequest(&req);
    head_->Heartbeat(
        req,
        [this, periodic](absl::StatusOr<proto::HeartbeatReply> reply) {
          if (head_ == nullptr) return;  // stopping (see Stop())
          if (!reply.ok()) {
            HeadFailed(reply.status());
            if (!head_warned_) {
              SHOAL_LOG(WARNING)
                  << "heartbeat to head failed: " << reply.status()
                  << " (retrying)";
              head_warned_ = true;
            }
          } else if (reply->unknown_node()) {
            if (periodic && !leaving_) {
              SHOAL_LOG(WARNING) << "the head does not know this node (it "
                                    "restarted or declared it dead); "
                                    "registering again";
              Register(nullptr);
            }
          } else {
            head_warned_ = false;
            HeadAnswered();
            view_.Apply(*reply);
            Dispatch();
          }
          if (periodic) ScheduleHeartbeat();
        },
        std::max<int64_t>(heartbeat_ms_ * 4, 2000));
  }

  // ---- Losing the head ----
  //
  // The head accepted a registration or heartbeat of this node: it is
  // there and has the node as a member.
  void HeadAnswered() {
    last_head_ok_us_ = MonotonicUs();
    last_head_error_ = absl::OkStatus();
  }

  void HeadFailed(const absl::Status& why) { last_head_error_ = why; }

  void ScheduleHeadWatch() {
    int64_t period_ms =
        std::clamp<int64_t>(options_.head_timeout_ms / 10, 100, 1000);
    loop_->RunAfter(period_ms, [this] { WatchHead(); });
  }

  // Stops the node once the head has not accepted it for head_timeout_ms
  // (killed and not restarted, its host gone, or another cluster answering
  // on its address): its workers and store would otherwise outlive the
  // cluster. A head back within the window keeps the node.
  void WatchHead() {
    if (head_ == nullptr || leaving_) return;
    if (!session_gone_warned_ && !PathExists(options_.session_dir)) {
      session_gone_warned_ = true;
      SHOAL_LOG(WARNING) << "this node's session folder "
                         << options_.session_dir
                         << " was deleted; the node stops if the head at "
                         << options_.head_address << " does not answer for "
                         << options_.head_timeout_ms / 1000.0
                         << " s (--head-timeout-s)";
    }
    int64_t silent_ms = (MonotonicUs() - last_head_ok_us_) / 1000;
    if (silent_ms < options_.head_timeout_ms) return ScheduleHeadWatch();
    std::string why = absl::StrCat("the head at ", options_.head_address,
                                   " has been unreachable for ",
                                   options_.head_timeout_ms / 1000.0,
                                   " s; stopping this node (--head-timeout-s)");
    if (absl::IsPermissionDenied(last_head_error_) ||
        absl::IsUnauthenticated(last_head_error_)) {
      absl::StrAppend(&why, ". It refuses this node (",
                      last_head_error_.ToString(),
                      "): another cluster answers there, or the token changed");
    } else if (!last_head_error_.ok()) {
      absl::StrAppend(&why, ". Last error: ", last_head_error_.ToString());
    }
    absl::StrAppend(&why,
                    ". The node's workers end and its object store is freed; "
                    "once a head is up, join it again with `shoal start "
                    "--address=",
                    options_.head_address, "`");
    SHOAL_LOG(ERROR) << why;
    head_lost_ = true;
    {
      std::lock_guard<std::mutex> lock(stop_mu_);
      stop_reason_ = absl::UnavailableError(why);
    }
    RequestStop();
  }

  void FillLeases(proto::HeartbeatRequest* req) const {
    int64_t now = MonotonicUs();
    for (const auto& [id, lease] : leases_.leases()) {
      proto::LeaseInfo* info = req->add_leases();
      info->set_lease_id(id);
      info->set_node_id(node_id_);
      info->set_job_id(lease.job_id);
      info->set_worker_id(lease.worker_id);
      info->set_owner(lease.owner);
      info->set_age_ms((now - lease.granted_us) / 1000);
      info->set_actor_id(lease.actor_id);
      info->set_blocked(lease.blocked);
      lease.shape.ToProto(info->mutable_shape());
      if (const Worker* w = workers_->Find(lease.worker_id)) {
        info->set_worker_pid(w->pid);
        info->set_starting(w->state == Worker::State::kStarting);
      }
    }
  }

  void FillDemands(proto::HeartbeatRequest* req) const {
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
    for (auto& [k, d] : by_shape) *req->add_demands() = d;
  }

  // ---- Leases ----

  void RequestLease(const proto::RequestLeaseRequest& r, rpc::Responder resp) {
    PendingLease p;
    p.request = r;
    p.ask.shape = ResourceSet::FromProto(r.shape());
    p.ask.excluded_nodes.assign(r.excluded_nodes().begin(),
                                r.excluded_nodes().end());
    p.ask.no_spillback = r.no_spillback();
    p.ask.devices_valid =
        agent::ValidateDevices(options_.accelerators, p.ask.shape);
    p.ask.arrival_us = MonotonicUs();
    p.responder = std::move(resp);
    p.seq = ++next_request_seq_;
    if (!TryPlace(p)) pending_.Push(std::move(p));
    ReportSoon();
  }

  // The requester withdraws a request that waits here: it is answered
  // CANCELED (before the cancel itself is answered), and no longer counts
  // as demand.
  void CancelLeaseRequest(const std::string& request_id, rpc::Responder resp) {
    std::optional<PendingLease> p =
        pending_.Take(resp.connection_id(), request_id);
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
  }

  // Grants, spills back or fails `p`; false when it must wait.
  bool TryPlace(PendingLease& p) {
    // A requester that left wants nothing (done: drop the request).
    if (!p.responder.connected()) return true;
    int64_t now = MonotonicUs();
    agent::LocalNode here{node_id_,
                          address_,
                          node_,
                          view_.nodes(),
                          /*can_ask_head=*/head_ != nullptr,
                          options_.infeasible_grace_ms * 1000,
                          leases_.Withheld(p.request.depth())};
    LeaseDecision d = agent::DecideLease(p.ask, here, now);
    switch (d.kind) {
      case LeaseDecision::Kind::kGrant:
        Grant(p);
        return true;
      case LeaseDecision::Kind::kSpillback:
        Spillback(p, d);
        return true;
      case LeaseDecision::Kind::kInvalid:
      case LeaseDecision::Kind::kInfeasible: {
        proto::RequestLeaseReply reply;
        if (d.kind == LeaseDecision::Kind::kInvalid) {
          reply.set_outcome(proto::RequestLeaseReply::INVALID);
        } else {
          reply.set_outcome(proto::RequestLeaseReply::INFEASIBLE);
          SHOAL_LOG(WARNING) << d.message;
        }
        reply.set_error(d.message);
        p.responder.Reply(reply);
        return true;
      }
      case LeaseDecision::Kind::kAskHeadAboutGroup:
        p.ask.group = agent::GroupCheck::kAsking;
        AskAboutGroup(p.seq, d.group_id);
        p.infeasible = false;
        EnsureDispatchTimer(d.retry_at_us);
        return false;
      case LeaseDecision::Kind::kWait:
        p.infeasible = d.infeasible;
        if (d.retry_at_us != 0) EnsureDispatchTimer(d.retry_at_us);
        return false;
    }
    return false;
  }

  // Asks the head about `group` for queued request `seq`: fails it at once
  // when the group is gone, else lets it wait for the group's placement.
  void AskAboutGroup(uint64_t seq, const std::string& group) {
    proto::GetPlacementGroupRequest req;
    req.set_pg_id(group);
    head_->GetPlacementGroup(
        req,
        [this, seq, group](absl::StatusOr<proto::PlacementGroupInfo> info) {
          if (head_ == nullptr) return;  // stopping (see Stop())
          PendingLease* p = pending_.Find(seq);
          if (p == nullptr) return;
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
            p->ask.group = agent::GroupCheck::kBeingPlaced;
            p->ask.group_checked_us = MonotonicUs();
            return;
          }
          proto::RequestLeaseReply reply;
          reply.set_outcome(proto::RequestLeaseReply::INVALID);
          reply.set_error(absl::StrCat(gone, "; its tasks cannot run"));
          p->responder.Reply(reply);
          pending_.Erase(seq);
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

  // Tries every queued request, deepest first (the queue's order).
  void Dispatch() {
    std::deque<PendingLease> waiting = pending_.TakeAll();
    while (!waiting.empty()) {
      PendingLease p = std::move(waiting.front());
      waiting.pop_front();
      if (!TryPlace(p)) pending_.Push(std::move(p));
    }
  }

  void Spillback(const PendingLease& p, const LeaseDecision& d) {
    view_.CountSpillback(d.node_id, p.ask.shape);
    proto::RequestLeaseReply reply;
    reply.set_outcome(proto::RequestLeaseReply::SPILLBACK);
    reply.set_spillback_address(d.node_address);
    reply.set_spillback_node_id(d.node_id);
    p.responder.Reply(reply);
  }

  void ReturnDevices(const Lease& lease) {
    absl::Status st =
        devices_.Return(agent::BaseShape(lease.shape), lease.devices);
    if (!st.ok()) SHOAL_LOG(ERROR) << "lease " << lease.id << ": " << st;
  }

  void Grant(PendingLease& p) {
    const proto::RequestLeaseRequest& r = p.request;
    Lease lease;
    lease.id = RandomHex(8);
    lease.shape = p.ask.shape;
    lease.conn_id = p.responder.connection_id();
    lease.owner = p.responder.peer();
    lease.job_id = r.job_id();
    lease.actor_id = r.actor_id();
    lease.granted_us = MonotonicUs();
    lease.devices = devices_.Take(agent::BaseShape(p.ask.shape));
    if (lease.devices.count("TPU")) {
      // Nothing may still hold the chips: see agent/tpu_lock.h.
      absl::Status clear = agent::ClearTpuLock(
          agent::LibtpuLockfilePath(), node_id_, [this](const std::string& id) {
            const Worker* w = workers_->Find(id);
            return w != nullptr && w->state != Worker::State::kIdle;
          });
      if (!clear.ok()) {
        ReturnDevices(lease);
        proto::RequestLeaseReply reply;
        reply.set_outcome(proto::RequestLeaseReply::FAILED);
        reply.set_error(std::string(clear.message()));
        p.responder.Reply(reply);
        return;
      }
    }
    std::string device_key = agent::DeviceKey(lease.devices);
    // Reuse an idle worker of the same job and binary that sees the same
    // devices.
    if (const Worker* w = workers_->TakeIdle(r.job_id(), r.binary_hash(),
                                             device_key, lease.id)) {
      lease.worker_id = w->id;
      ReplyGranted(p.responder, leases_.Add(std::move(lease)), *w);
      return;
    }
    std::string worker_id =
        workers_->Add(r.job_id(), r.binary_hash(), device_key, lease.id).id;
    lease.worker_id = worker_id;
    starting_[worker_id] = {lease.id, p.responder};
    leases_.Add(std::move(lease));
    if (r.worker_command().argv_size() > 0) {
      // The job's workers are a command on this node (a Python driver's).
      const proto::WorkerCommand& command = r.worker_command();
      return StartWorker(worker_id,
                         {command.argv().begin(), command.argv().end()},
                         {command.env().begin(), command.env().end()});
    }
    binaries_.Resolve(
        r.binary_path(), r.binary_hash(), r.blob_hash(),
        [this, worker_id,
         blob = r.blob_hash()](absl::StatusOr<std::string> path) {
          if (!path.ok()) {
            // NotFound: neither this host nor the head has the program;
            // the requester can send the head a copy.
            return FailStart(worker_id, path.status(),
                             /*needs_program=*/absl::IsNotFound(path.status()));
          }
          StartWorker(worker_id, {*path}, {}, blob);
        });
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

  // Tells the requester waiting for worker `worker_id` to start that it
  // will not; `needs_program` when this node has no copy of its program
  // (RequestLeaseReply.needs_program).
  void ReplyStartFailed(const std::string& worker_id, const absl::Status& why,
                        bool needs_program = false) {
    auto it = starting_.find(worker_id);
    if (it == starting_.end()) return;
    proto::RequestLeaseReply reply;
    reply.set_outcome(proto::RequestLeaseReply::FAILED);
    reply.set_error(std::string(why.message()));
    reply.set_needs_program(needs_program);
    it->second.responder.Reply(reply);
    starting_.erase(it);
  }

  // Worker `worker_id` could not start: its requester hears why, and the
  // worker and its lease are dropped.
  void FailStart(const std::string& worker_id, const absl::Status& why,
                 bool needs_program = false) {
    ReplyStartFailed(worker_id, why, needs_program);
    if (const Worker* w = workers_->Find(worker_id)) {
      std::string lease_id = w->lease_id;
      workers_->Remove(worker_id, std::string(why.message()));
      DropLease(lease_id);
    }
    Dispatch();
  }

  void DropLease(const std::string& lease_id) {
    std::optional<Lease> lease = leases_.Remove(lease_id);
    if (!lease.has_value()) return;
    ReturnDevices(*lease);
    ReportSoon();
  }

  void ReleaseLease(const std::string& lease_id, bool kill_worker,
                    const std::string& why = "its lease was returned") {
    const Lease* lease = leases_.Find(lease_id);
    if (lease == nullptr) return;
    std::string worker_id = lease->worker_id;
    DropLease(lease_id);
    if (const Worker* w = workers_->Find(worker_id)) {
      if (kill_worker && w->pid > 0) {
        workers_->Kill(worker_id, why);
      } else if (w->state == Worker::State::kLeased) {
        workers_->MarkIdle(worker_id, MonotonicUs());
      }
    }
    Dispatch();
  }

  // ---- Blocked workers ----

  // The lease worker `worker_id` serves now; null when none.
  const Lease* LeaseOfWorker(const std::string& worker_id) const {
    const Worker* w = workers_->Find(worker_id);
    if (w == nullptr || w->lease_id.empty()) return nullptr;
    const Lease* lease = leases_.Find(w->lease_id);
    if (lease == nullptr || lease->worker_id != worker_id) return nullptr;
    return lease;
  }

  // The worker waits in Get or Wait, in a task nested `depth` deep: its CPU
  // goes to deeper requests (agent/lease_table.h).
  void WorkerBlocked(const std::string& worker_id, int depth) {
    const Lease* lease = LeaseOfWorker(worker_id);
    if (lease == nullptr) return;
    switch (leases_.Block(lease->id, depth)) {
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

  // The worker runs again: it takes its CPU back, even from a request
  // granted with it (the node is over-committed until leases end).
  void WorkerUnblocked(const std::string& worker_id) {
    const Lease* lease = LeaseOfWorker(worker_id);
    if (lease == nullptr) return;
    if (!leases_.Unblock(lease->id)) return;
    ReportSoon();
  }

  void OnDisconnect(uint64_t conn) {
    if (objects_ != nullptr) objects_->OnDisconnect(conn);
    // Its queued requests go first: releasing its leases below hands the
    // freed resources to what waits, which must not be the departed
    // requester's own requests (their leases would belong to nobody).
    size_t dropped = pending_.DropConnection(conn);
    std::vector<std::string> gone;
    size_t kept = 0;
    for (const std::string& id : leases_.HeldBy(conn)) {
      // An actor's lease is the head's, and outlives its connection: a
      // head that restarts takes the actor up again, and returns the
      // leases of actors it does not know (docs/design/durability.md).
      if (!leases_.Find(id)->actor_id.empty()) {
        ++kept;
      } else {
        gone.push_back(id);
      }
    }
    if (!gone.empty() || dropped > 0 || kept > 0) {
      SHOAL_LOG(INFO) << "requester " << conn << " left: releasing "
                      << gone.size() << " lease(s), dropping " << dropped
                      << " queued request(s)"
                      << (kept > 0 ? absl::StrCat(", keeping ", kept,
                                                  " actor lease(s) for the "
                                                  "head")
                                   : std::string());
    }
    // The requester is gone: its workers may be mid-task for nobody.
    for (const auto& id : gone) {
      ReleaseLease(id, /*kill_worker=*/true, "its driver disconnected");
    }
    ReportSoon();
  }

  // ---- Workers ----

  // Fetches a piece of a worker binary from the head (the BinaryCache's
  // seam).
  void FetchBlobChunk(const std::string& hash, int64_t offset,
                      int64_t max_bytes,
                      std::function<void(absl::StatusOr<BinaryChunk>)> done) {
    if (head_ == nullptr) {
      return done(absl::CancelledError("the agent is stopping"));
    }
    proto::GetBlobChunkRequest req;
    req.set_hash(hash);
    req.set_offset(offset);
    req.set_max_bytes(max_bytes);
    head_->GetBlobChunk(
        req,
        [this, done = std::move(done)](absl::StatusOr<proto::BlobChunk> chunk) {
          // Stopping (see Stop()): the cache's fetch ends unanswered, as its
          // requester's connection does.
          if (head_ == nullptr) return;
          if (!chunk.ok()) return done(chunk.status());
          BinaryChunk out;
          out.data = std::move(*chunk->mutable_data());
          out.last = chunk->last();
          done(std::move(out));
        },
        60000);
  }

  // Starts worker `worker_id` as `argv` with `job_env` added to its
  // environment.
  // `blob_hash` names the head's copy of its program, for the leases of the
  // tasks it submits (SHOAL_BLOB_HASH).
  void StartWorker(const std::string& worker_id, std::vector<std::string> argv,
                   std::map<std::string, std::string> job_env,
                   const std::string& blob_hash = "") {
    const Worker* w = workers_->Find(worker_id);
    if (w == nullptr) return;
    const Lease* lease = leases_.Find(w->lease_id);
    if (lease == nullptr) {
      // Its lease went while the binary was being found (the requester left
      // or returned it): start nothing for nobody.
      SHOAL_LOG(INFO) << "not starting worker " << worker_id << ": its lease "
                      << w->lease_id << " was released";
      return FailStart(worker_id,
                       absl::CancelledError("the lease was released"));
    }
    SpawnOptions device_env;
    absl::Status st = agent::AddDeviceEnvironment(options_.accelerators,
                                                  lease->devices, &device_env);
    // Set by the agent, like the device variables: the job cannot change it.
    if (!blob_hash.empty()) device_env.env["SHOAL_BLOB_HASH"] = blob_hash;
    if (st.ok()) {
      SpawnOptions program;
      program.argv = std::move(argv);
      program.env = std::move(job_env);
      st = workers_->Launch(worker_id, program, device_env);
    }
    if (!st.ok()) FailStart(worker_id, st);
  }

  void RegisterWorker(const proto::RegisterWorkerRequest& r,
                      rpc::Responder resp) {
    const std::string& id = r.worker_id();
    absl::Status st = workers_->Registered(
        id, absl::StrCat(options_.node_ip, ":", r.port()), r.pid());
    if (!st.ok()) return resp.Error(st);
    resp.Reply(proto::Empty());
    auto s = starting_.find(id);
    if (s == starting_.end()) return;
    PendingGrant grant = std::move(s->second);
    starting_.erase(s);
    const Lease* lease = leases_.Find(grant.lease_id);
    if (lease == nullptr) {
      // The requester went away while the worker started.
      workers_->MarkIdle(id, MonotonicUs());
      return;
    }
    workers_->MarkLeased(id);
    ReplyGranted(grant.responder, *lease, *workers_->Find(id));
  }

  void ScheduleReaper() {
    loop_->RunAfter(100, [this] {
      Reap();
      workers_->EndIdle(MonotonicUs());
      ScheduleReaper();
    });
  }

  void Reap() {
    std::vector<agent::ProcessLauncher::Exit> others;
    std::vector<WorkerPool::Exited> exited = workers_->Reap(&others);
    for (const auto& other : others) {
      if (jobs_ != nullptr) jobs_->Reaped(other.pid, other.wait_status);
    }
    for (const WorkerPool::Exited& e : exited) {
      EndLeftovers(e.worker.id);
      if (e.worker.state == Worker::State::kStarting) {
        ReplyStartFailed(e.worker.id, absl::UnavailableError(e.description));
      }
      DropLease(e.worker.lease_id);
    }
    if (!exited.empty()) Dispatch();
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

  // Answers when the worker has been reaped (waiting up to ~2 s for it).
  void GetWorkerExit(const std::string& worker_id, rpc::Responder resp,
                     int attempt) {
    Reap();
    proto::GetWorkerExitReply reply;
    if (std::optional<std::string> exit = workers_->ExitOf(worker_id)) {
      reply.set_exited(true);
      reply.set_description(*exit);
      return resp.Reply(reply);
    }
    bool known = workers_->Find(worker_id) != nullptr;
    if (!known || attempt >= 20) {
      reply.set_description(known ? "the worker is still running"
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
  std::unique_ptr<agent::LogService> logs_;
  // Reports of the jobs this node runs, oldest first, until the head takes
  // them.
  std::deque<proto::JobEvent> job_events_;
  bool job_events_warned_ = false;
  std::unique_ptr<rpc::HeadClient> head_;  // null once stopping
  const std::string node_id_;
  std::string address_;
  bool registered_ = false;
  bool leaving_ = false;  // unregistering (Stop)
  bool head_warned_ = false;
  // When the head last accepted this node (MonotonicUs), and what the
  // calls to it since have failed with.
  int64_t last_head_ok_us_ = 0;
  absl::Status last_head_error_;
  bool head_lost_ = false;  // stopping: head_timeout_ms passed (WatchHead)
  bool session_gone_warned_ = false;
  bool report_scheduled_ = false;
  int64_t heartbeat_ms_ = 500;

  NodeResources node_;
  LeaseTable leases_;           // changes node_
  BundleReservations bundles_;  // changes node_
  DeviceAllocator devices_;
  BinaryCache binaries_;
  std::unique_ptr<WorkerPool> workers_;     // made in Start()
  std::unique_ptr<agent::JobRunner> jobs_;  // made in Start()
  agent::ClusterView view_;
  uint64_t next_request_seq_ = 0;
  std::map<std::string, PendingGrant> starting_;  // by worker id
  LeaseQueue pending_;
  uint64_t dispatch_timer_ = 0;
  int64_t dispatch_timer_at_ = 0;

  mutable std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_requested_ ABSL_GUARDED_BY(stop_mu_) = false;
  absl::Status stop_reason_ ABSL_GUARDED_BY(stop_mu_);
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
