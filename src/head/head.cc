#include "head/head.h"

#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "common/version.h"
#include "head/actor_manager.h"
#include "head/agent_call.h"
#include "head/blob_store.h"
#include "head/driver_job_table.h"
#include "head/gang_table.h"
#include "head/head_storage.h"
#include "head/job_manager.h"
#include "head/kv_table.h"
#include "head/node_manager.h"
#include "head/placement_group_manager.h"
#include "head/table_storage.h"
#include "head/task_event_store.h"
#include "rpc/rpc.h"
#include "scheduling/label_selector.h"
#include "scheduling/resource_set.h"
#include "shoal/shoal.pb.h"

namespace shoal {
namespace {

// An RPC's answer: the reply, or its error.
template <typename Reply>
void Answer(const rpc::Responder& resp, const absl::StatusOr<Reply>& reply) {
  if (!reply.ok()) return resp.Error(reply.status());
  resp.Reply(*reply);
}

void Answer(const rpc::Responder& resp, const absl::Status& status) {
  if (!status.ok()) return resp.Error(status);
  resp.Reply(proto::Empty());
}

// Records this head's version for the drivers and agents that join to check
// (common/version.h); a head restarted at another version replaces it.
absl::Status RecordVersion(KvTable& kv) {
  proto::KvPutRequest put;
  put.set_key(kClusterVersionKey);
  put.set_value(ShoalVersion());
  put.set_overwrite(true);
  return kv.Put(put).status();
}

// Deletes what the frontends kept for job `job_id` (KvTable::DeleteJobKeys)
// once it is over: its driver gone, and none of its actors alive (they read
// it after the job ends, a detached one for as long as it lives).
void SweepJobKeys(const std::string& job_id, const DriverJobTable& jobs,
                  const ActorManager* actors, KvTable& kv) {
  // Cheapest first: each of a job's actors that dies asks again, and once
  // the keys are gone the read of HasJobKeys ends it (no walk of actors).
  if (jobs.Live(job_id) || !kv.HasJobKeys(job_id) ||
      (actors != nullptr && actors->table().HasLiveActorOf(job_id))) {
    return;
  }
  absl::StatusOr<int> deleted = kv.DeleteJobKeys(job_id);
  if (!deleted.ok()) {
    SHOAL_LOG(ERROR) << "cannot delete the keys " << job_id
                     << " left: " << deleted.status();
  } else if (*deleted > 0) {
    SHOAL_LOG(INFO) << "deleted the " << *deleted << " keys " << job_id
                    << " left, now that it and its actors are over";
  }
}

// The head: receives RPCs and hands them to its parts (nodes, placement
// groups, jobs, actors, KV, blobs, task events, gangs), and wires the parts
// to each other, to storage, the event loop and the agents' channels.
//
// Threading: runs on the head's event loop; not thread-safe, except for
// Wait() and Stop().
class HeadImpl : public Head {
 public:
  HeadImpl(HeadOptions options, std::unique_ptr<rpc::EventLoop> loop)
      : options_(std::move(options)),
        loop_(std::move(loop)),
        blobs_(options_.session_dir + "/blobs"),
        task_events_(options_.max_task_events_per_job) {}

  ~HeadImpl() override { Stop(); }

  absl::Status Start() {
    ASSIGN_OR_RETURN(storage_, OpenHeadStorage(StorageOf(options_)));
    gangs_ = std::make_unique<GangTable>(/*max_gangs=*/100, storage_.get());
    kv_ = std::make_unique<KvTable>(storage_.get());
    RETURN_IF_ERROR(RecordVersion(*kv_));
    driver_jobs_ = std::make_unique<DriverJobTable>(storage_.get());
    absl::Status status;
    loop_->RunSync([&] {
      auto server = rpc::Server::Create(loop_.get(), options_.host,
                                        options_.port, options_.token);
      if (!server.ok()) {
        status = server.status();
        return;
      }
      server_ = std::move(*server);
      server_->EnableStats();
      rpc::AlsoListenOnLoopback(server_.get(), options_.host);
      MakeParts();
      Restore();
      RegisterHandlers();
      nodes_->StartHealthChecks();
    });
    RETURN_IF_ERROR(MakeDirs(blobs_.dir()));
    RETURN_IF_ERROR(MakeDirs(options_.session_dir + "/logs"));
    return status;
  }

  int port() const override { return server_->port(); }

  void Wait() override {
    shoal::MutexLock lock(&stop_mu_);
    while (!stop_requested_) stop_cv_.Wait(&stop_mu_);
  }

  void SetDashboardAddress(const std::string& address) override {
    loop_->RunSync([&] { dashboard_address_ = address; });
  }

  void Stop() override {
    if (!loop_) return;
    RequestStop();
    loop_->RunSync([&] {
      if (server_) server_->Shutdown();
      actors_.reset();
      jobs_.reset();
      pgs_.reset();
      nodes_.reset();
      agents_.clear();
    });
    loop_->Stop();
    server_.reset();
    loop_.reset();
  }

 private:
  static StorageOptions StorageOf(const HeadOptions& options) {
    StorageOptions storage;
    storage.storage = options.storage;
    storage.session_dir = options.session_dir;
    storage.token = options.token;
    storage.sync = options.storage_sync;
    storage.discard_wal = options.discard_wal;
    return storage;
  }

  void RequestStop() {
    shoal::MutexLock lock(&stop_mu_);
    stop_requested_ = true;
    stop_cv_.SignalAll();
  }

  std::string Address() const {
    return absl::StrCat(options_.host, ":", server_->port());
  }

  // The parts, each told how to reach the agents, the loop and the others.
  void MakeParts() {
    const AgentCall call = [this](const std::string& address, int method,
                                  std::string payload, AgentReply done,
                                  int64_t timeout_ms) {
      AgentChannel(address)->Call(method, std::move(payload), std::move(done),
                                  timeout_ms);
    };
    const RunAfter run_after = [this](int64_t ms, std::function<void()> fn) {
      loop_->RunAfter(ms, std::move(fn));
    };
    MakeNodes(call, run_after);
    PlacementGroupManagerOptions pg;
    pg.infeasible_grace_ms = options_.infeasible_grace_ms;
    pg.call_agent = call;
    pg.run_after = run_after;
    pg.now_us = MonotonicUs;
    pg.node = [this](const std::string& id) -> const proto::NodeInfo* {
      const NodeTable::Entry* e = nodes_->table().Find(id);
      return e == nullptr ? nullptr : &e->info;
    };
    pg.placement_nodes = [this](bool use_totals) {
      return nodes_->table().PlacementNodes(use_totals);
    };
    pg.storage = storage_.get();
    pgs_ = std::make_unique<PlacementGroupManager>(std::move(pg));
    ActorManagerOptions actor_options;
    actor_options.worker_channels = std::make_shared<rpc::TcpChannelFactory>(
        loop_.get(), options_.token, "head");
    actor_options.agent_channel = [this](const std::string& address) {
      return AgentChannel(address);
    };
    actor_options.alive_nodes = [this] { return ActorNodes(); };
    actor_options.storage = storage_.get();
    actor_options.on_dead = [this](const std::string& actor_id,
                                   const std::string& job_id) {
      if (auto gone = kv_->DeleteActorKeys(actor_id); !gone.ok()) {
        SHOAL_LOG(ERROR) << "cannot delete the keys of actor " << actor_id
                         << ": " << gone.status();
      }
      SweepJobKeys(job_id, *driver_jobs_, actors_.get(), *kv_);
    };
    actors_ =
        std::make_unique<ActorManager>(loop_.get(), std::move(actor_options));
    JobManagerOptions job_options;
    job_options.log_dir = options_.session_dir + "/logs";
    job_options.head_address = Address();
    job_options.call_agent = call;
    job_options.run_after = run_after;
    job_options.alive_nodes = [this] { return JobNodes(); };
    job_options.storage = storage_.get();
    jobs_ = std::make_unique<JobManager>(std::move(job_options));
  }

  void MakeNodes(const AgentCall& call, const RunAfter& run_after) {
    NodeManagerOptions node_options;
    node_options.heartbeat_interval_ms = options_.heartbeat_interval_ms;
    node_options.health_timeout_ms = options_.health_timeout_ms;
    node_options.call_agent = call;
    node_options.run_after = run_after;
    node_options.storage = storage_.get();
    node_options.on_registered = [this](const proto::NodeInfo& node) {
      pgs_->NodeRegistered(node);
    };
    node_options.on_dead = [this](const proto::NodeInfo& node,
                                  const std::string& why) {
      // Null only while stopping.
      if (jobs_) jobs_->NodeDied(node.node_id(), why);
      if (actors_) actors_->OnNodeDead(node.node_id(), why);
      if (pgs_) pgs_->NodeDied(node, why);
    };
    node_options.on_leases =
        [this](const std::string& agent,
               const google::protobuf::RepeatedPtrField<proto::LeaseInfo>&
                   leases) {
          if (actors_) actors_->OnNodeLeases(agent, leases);
        };
    nodes_ = std::make_unique<NodeManager>(std::move(node_options), MonotonicUs,
                                           RandomU64());
  }

  rpc::Channel* AgentChannel(const std::string& address) {
    auto& ch = agents_[address];
    if (ch == nullptr) {
      ch = std::make_unique<rpc::TcpChannel>(loop_.get(), address,
                                             options_.token, "head");
    }
    return ch.get();
  }

  void RegisterHandlers() {
    rpc::Server* s = server_.get();
    RegisterNodeHandlers(s);
    RegisterDriverHandlers(s);
    RegisterJobHandlers(s);
    RegisterStateHandlers(s);
    actors_->RegisterHandlers(s);
    server_->OnDisconnect([this](uint64_t conn) { OnDisconnect(conn); });
  }

  void RegisterNodeHandlers(rpc::Server* s) {
    rpc::RegisterProto<proto::RegisterNodeRequest>(
        s, proto::REGISTER_NODE, [this](const auto& r, rpc::Responder resp) {
          Answer(resp, nodes_->Register(r));
        });
    rpc::RegisterProto<proto::HeartbeatRequest>(
        s, proto::HEARTBEAT, [this](const auto& r, rpc::Responder resp) {
          resp.ReplyRaw(nodes_->Heartbeat(r));
        });
    rpc::RegisterProto<proto::UnregisterNodeRequest>(
        s, proto::UNREGISTER_NODE, [this](const auto& r, rpc::Responder resp) {
          nodes_->MarkDead(r.node_id(), r.reason());
          resp.Reply(proto::Empty());
        });
    rpc::RegisterProto<proto::ClusterStatusRequest>(
        s, proto::GET_CLUSTER_STATUS,
        [this](const auto& r, rpc::Responder resp) {
          if (r.head_only()) {
            proto::ClusterStatus status;
            AddHeadFields(&status);
            return resp.Reply(status);
          }
          auto selector = LabelSelector::FromProto(r.nodes());
          if (!selector.ok()) return resp.Error(selector.status());
          resp.Reply(Status(*selector, !r.nodes_and_groups()));
        });
    rpc::RegisterProto<proto::Empty>(
        s, proto::SHUTDOWN_HEAD, [this](const auto&, rpc::Responder resp) {
          SHOAL_LOG(INFO) << "shutdown requested by " << resp.peer();
          resp.Reply(proto::Empty());
          RequestStop();
        });
    rpc::RegisterProto<proto::ListLogsRequest>(
        s, proto::LIST_LOGS, [this](const auto& r, rpc::Responder resp) {
          nodes_->ListLogs(r, [resp](auto reply) { Answer(resp, reply); });
        });
    rpc::RegisterProto<proto::ListObjectsRequest>(
        s, proto::LIST_OBJECTS, [this](const auto& r, rpc::Responder resp) {
          nodes_->ListObjects(r, [resp](auto reply) { Answer(resp, reply); });
        });
    rpc::RegisterProto<proto::ReadLogRequest>(
        s, proto::READ_LOG, [this](const auto& r, rpc::Responder resp) {
          nodes_->ReadLog(r, [resp](absl::StatusOr<std::string> reply) {
            if (!reply.ok()) return resp.Error(reply.status());
            resp.ReplyRaw(std::move(*reply));
          });
        });
  }

  // What drivers use: their job, program copies, KV, placement groups.
  void RegisterDriverHandlers(rpc::Server* s) {
    rpc::RegisterProto<proto::RegisterJobRequest>(
        s, proto::REGISTER_JOB, [this](const auto& r, rpc::Responder resp) {
          Answer(resp, driver_jobs_->Register(r, resp.connection_id()));
        });
    rpc::RegisterProto<proto::BlobRef>(
        s, proto::HAS_BLOB, [this](const auto& r, rpc::Responder resp) {
          resp.Reply(blobs_.Has(r));
        });
    rpc::RegisterProto<proto::BlobChunk>(
        s, proto::PUT_BLOB_CHUNK, [this](const auto& r, rpc::Responder resp) {
          Answer(resp, blobs_.PutChunk(r, resp.connection_id()));
        });
    rpc::RegisterProto<proto::GetBlobChunkRequest>(
        s, proto::GET_BLOB_CHUNK, [this](const auto& r, rpc::Responder resp) {
          Answer(resp, blobs_.GetChunk(r));
        });
    rpc::RegisterProto<proto::KvPutRequest>(
        s, proto::KV_PUT, [this](const auto& r, rpc::Responder resp) {
          Answer(resp, kv_->Put(r));
        });
    rpc::RegisterProto<proto::KvGetRequest>(
        s, proto::KV_GET, [this](const auto& r, rpc::Responder resp) {
          Answer(resp, kv_->Get(r));
        });
    rpc::RegisterProto<proto::KvDelRequest>(
        s, proto::KV_DEL, [this](const auto& r, rpc::Responder resp) {
          Answer(resp, kv_->Del(r));
        });
    rpc::RegisterProto<proto::KvKeysRequest>(
        s, proto::KV_KEYS, [this](const auto& r, rpc::Responder resp) {
          Answer(resp, kv_->Keys(r));
        });
    rpc::RegisterProto<proto::PlacementGroupSpec>(
        s, proto::CREATE_PLACEMENT_GROUP,
        [this](const auto& r, rpc::Responder resp) {
          Answer(resp,
                 pgs_->Create(r, driver_jobs_->JobOf(resp.connection_id())));
        });
    rpc::RegisterProto<proto::GetPlacementGroupRequest>(
        s, proto::GET_PLACEMENT_GROUP,
        [this](const auto& r, rpc::Responder resp) {
          Answer(resp, pgs_->Get(r));
        });
    rpc::RegisterProto<proto::GetPlacementGroupRequest>(
        s, proto::REMOVE_PLACEMENT_GROUP,
        [this](const auto& r, rpc::Responder resp) {
          pgs_->Remove(r);
          resp.Reply(proto::Empty());
        });
  }

  void RegisterJobHandlers(rpc::Server* s) {
    rpc::RegisterProto<proto::JobSpec>(
        s, proto::SUBMIT_JOB, [this](const auto& r, rpc::Responder resp) {
          Answer(resp, jobs_->Submit(r));
        });
    rpc::RegisterProto<proto::JobRef>(
        s, proto::GET_JOB, [this](const auto& r, rpc::Responder resp) {
          Answer(resp, jobs_->Get(r.submission_id()));
        });
    rpc::RegisterProto<proto::Empty>(s, proto::LIST_JOBS,
                                     [this](const auto&, rpc::Responder resp) {
                                       resp.Reply(jobs_->List());
                                     });
    rpc::RegisterProto<proto::JobRef>(
        s, proto::STOP_JOB, [this](const auto& r, rpc::Responder resp) {
          Answer(resp, jobs_->Stop(r.submission_id()));
        });
    rpc::RegisterProto<proto::JobRef>(
        s, proto::DELETE_JOB, [this](const auto& r, rpc::Responder resp) {
          Answer(resp, jobs_->Delete(r.submission_id()));
        });
    rpc::RegisterProto<proto::JobLogsRequest>(
        s, proto::GET_JOB_LOGS, [this](const auto& r, rpc::Responder resp) {
          jobs_->Logs(r, [resp](auto logs) { Answer(resp, logs); });
        });
    rpc::RegisterProto<proto::JobEvent>(
        s, proto::JOB_EVENT, [this](const auto& r, rpc::Responder resp) {
          Answer(resp, jobs_->Event(r));
        });
  }

  // Task events and gangs.
  void RegisterStateHandlers(rpc::Server* s) {
    rpc::RegisterProto<proto::TaskEventBatch>(
        s, proto::REPORT_TASK_EVENTS,
        [this](const auto& r, rpc::Responder resp) {
          task_events_.Add(r);
          resp.Reply(proto::Empty());
        });
    rpc::RegisterProto<proto::ListTasksRequest>(
        s, proto::LIST_TASKS, [this](const auto& r, rpc::Responder resp) {
          Answer(resp, task_events_.List(r));
        });
    rpc::RegisterProto<proto::GangInfo>(
        s, proto::GANG_UPDATE, [this](const auto& r, rpc::Responder resp) {
          proto::GangInfo gang = r;
          gang.set_driver_job_id(driver_jobs_->JobOf(resp.connection_id()));
          gangs_->Update(gang);
          resp.Reply(proto::Empty());
        });
    rpc::RegisterProto<proto::Empty>(s, proto::LIST_GANGS,
                                     [this](const auto&, rpc::Responder resp) {
                                       resp.Reply(gangs_->List());
                                     });
  }

  // The alive nodes for job placement.
  std::vector<JobNode> JobNodes() const {
    std::vector<JobNode> out;
    for (const auto& [id, entry] : nodes_->table().entries()) {
      const proto::NodeInfo& n = entry.info;
      if (!n.alive()) continue;
      out.push_back({n.node_id(), n.address(), n.total(), n.is_head_node(),
                     n.available()});
    }
    return out;
  }

  // The alive nodes for actor placement, in the order PlacementNodes uses.
  std::vector<ActorNode> ActorNodes() const {
    std::vector<ActorNode> out;
    const NodeTable& table = nodes_->table();
    for (const PlacementNode& p : table.PlacementNodes(/*use_totals=*/false)) {
      const NodeTable::Entry& entry = *table.Find(p.node_id);
      const proto::NodeInfo& n = entry.info;
      ActorNode node{n.node_id(), n.address(),
                     ResourceSet::FromProto(n.total()), p.available};
      for (const auto& l : entry.leases) {
        if (!l.actor_id().empty()) node.leased_actors.insert(l.actor_id());
      }
      node.labels.insert(n.labels().begin(), n.labels().end());
      out.push_back(std::move(node));
    }
    return out;
  }

  // The cluster's state; `nodes` picks the nodes, and without `details`
  // only nodes and placement groups are told.
  proto::ClusterStatus Status(const LabelSelector& nodes = LabelSelector(),
                              bool details = true) const {
    proto::ClusterStatus status;
    nodes_->table().AddToStatus(&status, nodes.empty() ? nullptr : &nodes,
                                details);
    AddHeadFields(&status);
    pgs_->AddToStatus(&status);
    if (actors_ && details) actors_->AddToStatus(&status);
    return status;
  }

  // What the head tells of itself (ClusterStatusRequest.head_only).
  void AddHeadFields(proto::ClusterStatus* status) const {
    status->set_head_address(Address());
    status->set_dashboard_address(dashboard_address_);
    status->set_session_dir(options_.session_dir);
    status->set_num_jobs(driver_jobs_->num_jobs());
  }

  void OnDisconnect(uint64_t conn) {
    if (std::optional<std::string> job = driver_jobs_->Disconnected(conn)) {
      SHOAL_LOG(INFO) << *job << " finished (its driver disconnected)";
      EndJob(*job,
             "the job's driver ended before the task did (it shut down, "
             "exited, was killed or lost its connection to the head)");
    }
  }

  // A driver's job is over: what it owns ends with it (detached groups and
  // actors stay), and its tasks that had not ended are FAILED for `why`.
  void EndJob(const std::string& job_id, const std::string& why) {
    task_events_.EndJob(job_id, why, NowMs());
    if (pgs_) pgs_->JobEnded(job_id);
    if (actors_) actors_->OnJobEnded(job_id);
    gangs_->JobEnded(job_id);
    driver_jobs_->Ended(job_id);
    SweepJobKeys(job_id, *driver_jobs_, actors_.get(), *kv_);
  }

  // What a head that ran before in this session kept: the nodes (alive
  // ones get a health timeout to be heard from again), the job counter,
  // the drivers' jobs (each gets reattach_grace_ms to reconnect, else it
  // ends), placement groups (pending ones are placed again) and, in the
  // job manager, submitted jobs. The KV store is read from storage as it
  // is used.
  void Restore() {
    const size_t nodes = nodes_->Restore();
    const size_t drivers = driver_jobs_->Restore();
    const size_t pgs = pgs_->Restore();
    jobs_->Restore();
    actors_->Restore();
    gangs_->Restore();
    if (nodes == 0 && pgs == 0 && drivers == 0) return;
    SHOAL_LOG(INFO) << "restarted with the state kept in this session: "
                    << nodes << " node(s), " << drivers
                    << " driver job(s) to come back, " << pgs
                    << " placement group(s)";
    loop_->RunAfter(options_.reattach_grace_ms, [this] {
      for (const std::string& job : driver_jobs_->TakeAwaiting()) {
        SHOAL_LOG(INFO) << job << " finished (its driver did not come back "
                        << "within " << options_.reattach_grace_ms
                        << " ms of the head's restart)";
        EndJob(job, absl::StrCat("the job's driver did not come back within ",
                                 options_.reattach_grace_ms,
                                 " ms of the head's restart"));
      }
    });
  }

  HeadOptions options_;
  std::unique_ptr<rpc::EventLoop> loop_;
  std::unique_ptr<rpc::Server> server_;
  std::unique_ptr<TableStorage> storage_;
  std::map<std::string, std::unique_ptr<rpc::Channel>> agents_;
  BlobStore blobs_;
  TaskEventStore task_events_;
  std::unique_ptr<KvTable> kv_;
  std::string dashboard_address_;  // "" until the dashboard listens
  std::unique_ptr<DriverJobTable> driver_jobs_;
  std::unique_ptr<GangTable> gangs_;
  std::unique_ptr<NodeManager> nodes_;
  std::unique_ptr<PlacementGroupManager> pgs_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<ActorManager> actors_;

  shoal::Mutex stop_mu_;
  shoal::CondVar stop_cv_;
  bool stop_requested_ ABSL_GUARDED_BY(stop_mu_) = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Head>> Head::Create(const HeadOptions& options) {
  ASSIGN_OR_RETURN(auto loop, rpc::EventLoop::Create("shoal-head"));
  auto head = std::make_unique<HeadImpl>(options, std::move(loop));
  RETURN_IF_ERROR(head->Start());
  return head;
}

}  // namespace shoal
