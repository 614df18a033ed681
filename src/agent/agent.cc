#include "agent/agent.h"

#include <unistd.h>

#include <algorithm>
#include <future>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "agent/binary_cache.h"
#include "agent/head_link.h"
#include "agent/job_runner.h"
#include "agent/lease_rpc.h"
#include "agent/lease_service.h"
#include "agent/log_service.h"
#include "agent/object_service.h"
#include "agent/process_workers.h"
#include "agent/tpu_lock.h"
#include "agent/worker_pool.h"
#include "common/clock.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "common/net.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "common/version.h"
#include "head_client/head_client.h"
#include "rpc/rpc.h"
#include "scheduling/label_selector.h"
#include "shoal/shoal.pb.h"

namespace shoal {
namespace {

using agent::BinaryChunk;

std::map<std::string, int> DeviceCounts(
    const std::vector<std::shared_ptr<const accel::AcceleratorManager>>&
        accelerators) {
  std::map<std::string, int> counts;
  for (const auto& m : accelerators) {
    counts[m->ResourceName()] = m->NumDevices();
  }
  return counts;
}

// Wires the node's parts to its server: the head link (registration,
// heartbeats, head-timeout), the lease service (leases and bundles), the
// worker processes, the job runner, the object and log services.
//
// Runs on the agent's event loop; not thread-safe. Every field is the
// loop's, except what Wait() and Stop() share (stop_mu_ guards it).
class AgentImpl : public NodeAgent {
 public:
  AgentImpl(AgentOptions options, std::unique_ptr<rpc::EventLoop> loop)
      : options_(std::move(options)),
        loop_(std::move(loop)),
        node_id_(options_.node_id.empty() ? RandomHex(6) : options_.node_id),
        clock_(agent::LoopClock(loop_.get())),
        binaries_(
            options_.session_dir + "/binaries",
            [this](const std::string& hash, int64_t offset, int64_t max_bytes,
                   std::function<void(absl::StatusOr<BinaryChunk>)> done) {
              if (head_ == nullptr) {
                return done(absl::CancelledError("the agent is stopping"));
              }
              head_->FetchBlobChunk(hash, offset, max_bytes, std::move(done));
            }) {
    options_.labels[kLabelNodeId] = node_id_;
  }

  ~AgentImpl() override { Stop(); }

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
      MakeParts();
      RegisterHandlers();
      return StartObjectStore();
    });
    RETURN_IF_ERROR(status);
    if (absl::Status same = CheckHeadVersion(); !same.ok()) {
      return Annotate(same, absl::StrCat("cannot join the cluster at ",
                                         options_.head_address));
    }
    // The first registration is synchronous so that `shoal start` can say
    // whether the node joined.
    std::promise<absl::Status> registered;
    loop_->Post([&] {
      head_->Register([&](absl::Status s) { registered.set_value(s); });
    });
    absl::Status reg = registered.get_future().get();
    if (!reg.ok()) {
      return Annotate(reg, absl::StrCat("cannot join the cluster at ",
                                        options_.head_address));
    }
    loop_->Post([this] {
      head_->StartBeating();
      ScheduleReaper();
    });
    return absl::OkStatus();
  }

  // A node of another version than its head's is refused before it joins
  // (common/version.h): the two may not understand each other.
  absl::Status CheckHeadVersion() {
    rpc::HeadClient head(loop_.get(), options_.head_address, options_.token,
                         "agent " + node_id_);
    return rpc::CheckClusterVersion(head, ShoalVersion(), "this node", 5000);
  }

  std::string address() const override { return address_; }
  std::string node_id() const override { return node_id_; }

  void Wait() override {
    shoal::MutexLock lock(&stop_mu_);
    while (!stop_requested_) stop_cv_.Wait(&stop_mu_);
  }

  absl::Status stop_reason() const override {
    shoal::MutexLock lock(&stop_mu_);
    return stop_reason_;
  }

  void Stop() override {
    if (!loop_) return;
    RequestStop();
    std::promise<void> left;
    loop_->Post([&] {
      if (head_ == nullptr) return left.set_value();
      head_->Leave([&] { left.set_value(); });
    });
    left.get_future().wait();
    RunOnLoop([&]() -> absl::Status {
      if (server_) server_->Shutdown();
      if (head_ != nullptr) head_->Close();
      if (workers_ != nullptr) workers_->StopAll();
      jobs_.reset();  // ends their process groups
      return absl::OkStatus();
    }).IgnoreError();
    // Transfer threads and pulls need the loop to finish.
    if (objects_ != nullptr) objects_->Shutdown();
    loop_->Stop();
    server_.reset();
    // Unmaps the store and removes its file and spill folder's objects.
    objects_.reset();
    // With the loop stopped, their timers can be cancelled from here.
    leases_.reset();
    workers_.reset();
    head_.reset();
    loop_.reset();
  }

 private:
  // The head link, the workers, the lease service and the job runner, which
  // call each other. On the loop, once the server has its address.
  void MakeParts() {
    agent::HeadLinkOptions head;
    head.head_address = options_.head_address;
    head.node_id = node_id_;
    head.session_dir = options_.session_dir;
    head.head_timeout_ms = options_.head_timeout_ms;
    head.self_info = [this] { return SelfInfo(); };
    head.fill_heartbeat = [this](proto::HeartbeatRequest* req) {
      AvailableToProto(req->mutable_available());
      leases_->resources().total.ToProto(req->mutable_total());
      leases_->FillHeartbeat(req);
    };
    head.view_changed = [this] { leases_->Dispatch(); };
    head.lost = [this](const absl::Status& why) {
      {
        shoal::MutexLock lock(&stop_mu_);
        stop_reason_ = why;
      }
      RequestStop();
    };
    head_ = std::make_unique<agent::HeadLink>(
        clock_.get(),
        agent::HeadClientCalls(loop_.get(), options_.head_address,
                               options_.token, "agent " + node_id_),
        std::move(head));
    workers_ = std::make_unique<agent::ProcessWorkers>(
        WorkersOptions(), agent::SystemProcessLauncher(), &binaries_);
    agent::LeaseServiceOptions leases;
    leases.node_id = node_id_;
    leases.address = address_;
    leases.resources = options_.resources;
    leases.devices = DeviceCounts(options_.accelerators);
    leases.accelerators = options_.accelerators;
    leases.infeasible_grace_ms = options_.infeasible_grace_ms;
    leases.labels = options_.labels;
    leases.view = head_->view();
    leases.report_soon = [this] { head_->ReportSoon(); };
    leases.can_ask_head = [this] { return head_->can_ask(); };
    leases.ask_group = [this](const std::string& pg, auto done) {
      head_->GetPlacementGroup(pg, std::move(done));
    };
    leases_ = std::make_unique<agent::LeaseService>(
        std::move(leases), clock_.get(), workers_.get());
    workers_->set_leases(leases_.get());
    jobs_ = std::make_unique<agent::JobRunner>(loop_.get(), JobOptions());
  }

  // What every worker of this node finds in its environment, and how they
  // are started and reaped.
  agent::ProcessWorkersOptions WorkersOptions() const {
    agent::ProcessWorkersOptions o;
    o.pool.node_id = node_id_;
    o.pool.log_dir = options_.session_dir + "/logs";
    o.pool.idle_timeout_ms = options_.worker_idle_timeout_ms;
    o.pool.env = {
        {"SHOAL_AGENT_ADDRESS", address_},
        {"SHOAL_NODE_ID", node_id_},
        {"SHOAL_NODE_IP", options_.node_ip},
        {"SHOAL_TOKEN", options_.token},
        {"SHOAL_ADDRESS", options_.head_address},
        {"SHOAL_SESSION_DIR", options_.session_dir},
    };
    o.node_ip = options_.node_ip;
    o.accelerators = options_.accelerators;
    o.libtpu_lockfile = agent::LibtpuLockfilePath();
    o.other_exited = [this](pid_t pid, int wait_status) {
      if (jobs_ != nullptr) jobs_->Reaped(pid, wait_status);
    };
    o.now_us = [] { return MonotonicUs(); };
    return o;
  }

  agent::JobRunnerOptions JobOptions() {
    agent::JobRunnerOptions jobs;
    jobs.jobs_dir = options_.session_dir + "/jobs";
    jobs.token = options_.token;
    jobs.python_path = agent::FindShoalPythonPackage(SelfExecutable());
    jobs.report = [this](const proto::JobEvent& event) {
      head_->ReportJob(event);
    };
    jobs.fetch_blob =
        [this](const std::string& hash,
               std::function<void(absl::StatusOr<std::string>)> done) {
          binaries_.Resolve("", hash, "", std::move(done));
        };
    jobs.reserve = [this](const ResourceSet& need) {
      return leases_->Reserve(need);
    };
    jobs.release = [this](const ResourceSet& held) {
      leases_->Unreserve(held);
    };
    return jobs;
  }

  // The node's shared-memory object store, sized by the node's
  // object_store_memory (`--object-store-memory`, or detected).
  absl::Status StartObjectStore() {
    auto capacity = static_cast<uint64_t>(
        options_.resources.GetDouble("object_store_memory"));
    if (capacity == 0) return absl::OkStatus();
    agent::ObjectServiceOptions object_options;
    object_options.name = absl::StrCat("node-", node_id_, "-", getpid());
    object_options.capacity = capacity;
    object_options.spill_dir = options_.session_dir + "/spill";
    object_options.loop = loop_.get();
    object_options.node_ip = options_.node_ip;
    object_options.token = options_.token;
    object_options.node_id = node_id_;
    auto objects = agent::ObjectService::Create(object_options);
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
    const agent::NodeResources& node = leases_->resources();
    ResourceSet available = node.Unlent();
    if (objects_ != nullptr) {
      int64_t total = node.total.Get("object_store_memory");
      int64_t used = static_cast<int64_t>(objects_->used_bytes());
      available.Set("object_store_memory",
                    std::max<int64_t>(0, total - used * kResourceUnit));
    }
    available.ToProto(map);
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
    leases_->resources().total.ToProto(info.mutable_total());
    AvailableToProto(info.mutable_available());
    for (const auto& [k, v] : options_.labels) (*info.mutable_labels())[k] = v;
    info.set_session_dir(options_.session_dir);
    if (objects_ != nullptr) {
      info.set_object_transfer_address(objects_->transfer_address());
    }
    return info;
  }

  absl::Status RunOnLoop(const std::function<absl::Status()>& fn) {
    absl::Status status;
    loop_->RunSync([&] { status = fn(); });
    return status;
  }

  void RequestStop() {
    shoal::MutexLock lock(&stop_mu_);
    stop_requested_ = true;
    stop_cv_.SignalAll();
  }

  void RegisterHandlers() {
    rpc::Server* s = server_.get();
    logs_ = std::make_unique<agent::LogService>(
        loop_.get(), options_.session_dir + "/logs", node_id_);
    logs_->Register(s);
    agent::RegisterLeaseHandlers(leases_.get(), s);
    agent::RegisterCancelHandler(workers_.get(), s);
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
    RegisterWorkerHandlers(s);
    rpc::RegisterProto<proto::Empty>(
        s, proto::GET_AGENT_INFO, [this](const auto&, rpc::Responder resp) {
          proto::AgentInfo info;
          *info.mutable_node() = SelfInfo();
          info.set_num_workers(workers_->size());
          info.set_num_leases(leases_->leases().size());
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
    server_->OnDisconnect([this](uint64_t conn) {
      if (objects_ != nullptr) objects_->OnDisconnect(conn);
      leases_->OnDisconnect(conn);
    });
  }

  // What the node's workers call: they registered, they wait in Get or
  // Wait (their CPU goes to deeper requests: agent/lease_table.h), they run
  // again.
  void RegisterWorkerHandlers(rpc::Server* s) {
    rpc::RegisterProto<proto::RegisterWorkerRequest>(
        s, proto::REGISTER_WORKER, [this](const auto& r, rpc::Responder resp) {
          absl::Status st = workers_->Registered(r.worker_id(), r.port(),
                                                 static_cast<pid_t>(r.pid()));
          if (!st.ok()) return resp.Error(st);
          resp.Reply(proto::Empty());
          workers_->Serve(r.worker_id());
        });
    rpc::RegisterProto<proto::WorkerBlockedRequest>(
        s, proto::WORKER_BLOCKED, [this](const auto& r, rpc::Responder resp) {
          leases_->WorkerBlocked(workers_->LeaseOf(r.worker_id()),
                                 r.worker_id(), r.depth());
          resp.Reply(proto::Empty());
        });
    rpc::RegisterProto<proto::WorkerLendingRequest>(
        s, proto::WORKER_LENDING, [this](const auto& r, rpc::Responder resp) {
          workers_->SetLending(r.worker_id(), r.lending());
          resp.Reply(proto::Empty());
        });
    rpc::RegisterProto<proto::WorkerBlockedRequest>(
        s, proto::WORKER_UNBLOCKED, [this](const auto& r, rpc::Responder resp) {
          leases_->WorkerUnblocked(workers_->LeaseOf(r.worker_id()),
                                   r.worker_id());
          resp.Reply(proto::Empty());
        });
  }

  void ScheduleReaper() {
    loop_->RunAfter(100, [this] {
      workers_->Reap();
      workers_->EndIdle();
      ScheduleReaper();
    });
  }

  AgentOptions options_;
  std::unique_ptr<rpc::EventLoop> loop_;
  const std::string node_id_;
  std::string address_;
  std::unique_ptr<agent::Clock> clock_;
  agent::BinaryCache binaries_;
  std::unique_ptr<rpc::Server> server_;
  std::unique_ptr<agent::ObjectService> objects_;  // null: no store memory
  std::unique_ptr<agent::LogService> logs_;
  // Made in Start(), on the loop (MakeParts).
  std::unique_ptr<agent::HeadLink> head_;
  std::unique_ptr<agent::ProcessWorkers> workers_;
  std::unique_ptr<agent::LeaseService> leases_;
  std::unique_ptr<agent::JobRunner> jobs_;

  mutable shoal::Mutex stop_mu_;
  shoal::CondVar stop_cv_;
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
