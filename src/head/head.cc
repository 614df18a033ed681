#include "head/head.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/util.h"
#include "head/actor_manager.h"
#include "head/gang_table.h"
#include "head/job_manager.h"
#include "head/sqlite_storage.h"
#include "head/table_storage.h"
#include "head/task_event_store.h"
#include "rpc/rpc.h"
#include "scheduling/placement.h"
#include "scheduling/resource_set.h"
#include "shoal/shoal.pb.h"

namespace shoal {
namespace {

constexpr char kNodesTable[] = "nodes";
constexpr char kJobsTable[] = "jobs";
constexpr char kKvTable[] = "kv";
constexpr char kPgsTable[] = "placement_groups";
constexpr char kMetaTable[] = "meta";
constexpr int64_t kMaxBlobChunk = 4 << 20;
// How long the head waits for a node's agent to answer for it.
constexpr int64_t kAgentAskTimeoutMs = 5000;

// Runs on the head's event loop; not thread-safe.
class HeadImpl : public Head {
 public:
  HeadImpl(HeadOptions options, std::unique_ptr<rpc::EventLoop> loop)
      : options_(std::move(options)),
        loop_(std::move(loop)),
        task_events_(options_.max_task_events_per_job) {}

  ~HeadImpl() override { Stop(); }

  absl::Status Start() {
    if (options_.storage == "memory") {
      storage_ = NewInMemoryTableStorage();
    } else {
      std::string path = options_.storage.empty()
                             ? options_.session_dir + "/head.db"
                             : options_.storage;
      ASSIGN_OR_RETURN(storage_, OpenSqliteTableStorage(path));
    }
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
      ActorManagerOptions actor_options;
      actor_options.token = options_.token;
      actor_options.agent_channel = [this](const std::string& address) {
        return AgentChannel(address);
      };
      actor_options.alive_nodes = [this] { return ActorNodes(); };
      actors_ =
          std::make_unique<ActorManager>(loop_.get(), std::move(actor_options));
      JobManagerOptions job_options;
      job_options.log_dir = options_.session_dir + "/logs";
      job_options.head_address =
          absl::StrCat(options_.host, ":", server_->port());
      job_options.agent_channel = [this](const std::string& address) {
        return AgentChannel(address);
      };
      job_options.alive_nodes = [this] { return JobNodes(); };
      job_options.storage = storage_.get();
      jobs_ = std::make_unique<JobManager>(loop_.get(), std::move(job_options));
      Restore();
      RegisterHandlers();
      ScheduleHealthCheck();
    });
    RETURN_IF_ERROR(MakeDirs(BlobDir()));
    RETURN_IF_ERROR(MakeDirs(options_.session_dir + "/logs"));
    return status;
  }

  int port() const override { return server_->port(); }

  void Wait() override {
    std::unique_lock<std::mutex> lock(stop_mu_);
    stop_cv_.wait(lock, [&] { return stop_requested_; });
  }

  void Stop() override {
    if (!loop_) return;
    {
      std::lock_guard<std::mutex> lock(stop_mu_);
      stop_requested_ = true;
      stop_cv_.notify_all();
    }
    loop_->RunSync([&] {
      if (server_) server_->Shutdown();
      actors_.reset();
      jobs_.reset();
      agents_.clear();
    });
    loop_->Stop();
    server_.reset();
    loop_.reset();
  }

 private:
  struct NodeEntry {
    proto::NodeInfo info;
    int64_t last_heartbeat_us = 0;
    std::vector<proto::ResourceDemand> demands;
    std::vector<proto::LeaseInfo> leases;
  };

  std::string BlobDir() const { return options_.session_dir + "/blobs"; }

  void RegisterHandlers() {
    rpc::Server* s = server_.get();
    rpc::RegisterProto<proto::RegisterNodeRequest>(
        s, proto::REGISTER_NODE,
        [this](const auto& r, rpc::Responder resp) { RegisterNode(r, resp); });
    rpc::RegisterProto<proto::HeartbeatRequest>(
        s, proto::HEARTBEAT,
        [this](const auto& r, rpc::Responder resp) { Heartbeat(r, resp); });
    rpc::RegisterProto<proto::UnregisterNodeRequest>(
        s, proto::UNREGISTER_NODE, [this](const auto& r, rpc::Responder resp) {
          MarkDead(r.node_id(), r.reason());
          resp.Reply(proto::Empty());
        });
    rpc::RegisterProto<proto::Empty>(
        s, proto::GET_CLUSTER_STATUS,
        [this](const auto&, rpc::Responder resp) { resp.Reply(Status()); });
    rpc::RegisterProto<proto::RegisterJobRequest>(
        s, proto::REGISTER_JOB,
        [this](const auto& r, rpc::Responder resp) { RegisterJob(r, resp); });
    rpc::RegisterProto<proto::BlobRef>(
        s, proto::HAS_BLOB, [this](const auto& r, rpc::Responder resp) {
          proto::HasBlobReply reply;
          struct stat st;
          if (ValidHash(r.hash()) &&
              stat((BlobDir() + "/" + r.hash()).c_str(), &st) == 0) {
            reply.set_present(true);
            reply.set_size(st.st_size);
          }
          resp.Reply(reply);
        });
    rpc::RegisterProto<proto::BlobChunk>(
        s, proto::PUT_BLOB_CHUNK,
        [this](const auto& r, rpc::Responder resp) { PutBlobChunk(r, resp); });
    rpc::RegisterProto<proto::GetBlobChunkRequest>(
        s, proto::GET_BLOB_CHUNK,
        [this](const auto& r, rpc::Responder resp) { GetBlobChunk(r, resp); });
    rpc::RegisterProto<proto::KvPutRequest>(
        s, proto::KV_PUT, [this](const auto& r, rpc::Responder resp) {
          proto::KvPutReply reply;
          bool exists = storage_->Get(kKvTable, r.key()).has_value();
          if (!exists || r.overwrite()) {
            absl::Status st = storage_->Put(kKvTable, r.key(), r.value());
            if (!st.ok()) return resp.Error(st);
            reply.set_added(!exists);
          }
          resp.Reply(reply);
        });
    rpc::RegisterProto<proto::KvGetRequest>(
        s, proto::KV_GET, [this](const auto& r, rpc::Responder resp) {
          proto::KvGetReply reply;
          if (auto v = storage_->Get(kKvTable, r.key())) {
            reply.set_found(true);
            reply.set_value(*v);
          }
          resp.Reply(reply);
        });
    rpc::RegisterProto<proto::Empty>(
        s, proto::SHUTDOWN_HEAD, [this](const auto&, rpc::Responder resp) {
          SHOAL_LOG(INFO) << "shutdown requested by " << resp.peer();
          resp.Reply(proto::Empty());
          std::lock_guard<std::mutex> lock(stop_mu_);
          stop_requested_ = true;
          stop_cv_.notify_all();
        });
    rpc::RegisterProto<proto::PlacementGroupSpec>(
        s, proto::CREATE_PLACEMENT_GROUP,
        [this](const auto& r, rpc::Responder resp) {
          CreatePlacementGroup(r, resp);
        });
    rpc::RegisterProto<proto::GetPlacementGroupRequest>(
        s, proto::GET_PLACEMENT_GROUP,
        [this](const auto& r, rpc::Responder resp) {
          PgEntry* pg = FindPg(r);
          if (pg == nullptr) {
            return resp.Error(absl::NotFoundError(absl::StrCat(
                "no placement group ",
                r.pg_id().empty() ? "named " + r.name() : r.pg_id())));
          }
          resp.Reply(pg->info);
        });
    rpc::RegisterProto<proto::GetPlacementGroupRequest>(
        s, proto::REMOVE_PLACEMENT_GROUP,
        [this](const auto& r, rpc::Responder resp) {
          PgEntry* pg = FindPg(r);
          if (pg == nullptr) return resp.Reply(proto::Empty());
          RemovePlacementGroup(*pg);
          resp.Reply(proto::Empty());
        });
    actors_->RegisterHandlers(s);
    jobs_->RegisterHandlers(s);
    RegisterStateHandlers(s);
    server_->OnDisconnect([this](uint64_t conn) { OnDisconnect(conn); });
  }

  // ---- Task events, gangs, and what the nodes' agents answer ----

  void RegisterStateHandlers(rpc::Server* s) {
    rpc::RegisterProto<proto::TaskEventBatch>(
        s, proto::REPORT_TASK_EVENTS,
        [this](const auto& r, rpc::Responder resp) {
          task_events_.Add(r);
          resp.Reply(proto::Empty());
        });
    rpc::RegisterProto<proto::ListTasksRequest>(
        s, proto::LIST_TASKS, [this](const auto& r, rpc::Responder resp) {
          auto list = task_events_.List(r);
          if (!list.ok()) return resp.Error(list.status());
          resp.Reply(*list);
        });
    rpc::RegisterProto<proto::GangInfo>(
        s, proto::GANG_UPDATE, [this](const auto& r, rpc::Responder resp) {
          gangs_.Update(r);
          gangs_.SetConnection(r.gang_id(), resp.connection_id());
          resp.Reply(proto::Empty());
        });
    rpc::RegisterProto<proto::Empty>(s, proto::LIST_GANGS,
                                     [this](const auto&, rpc::Responder resp) {
                                       resp.Reply(gangs_.List());
                                     });
    rpc::RegisterProto<proto::ListLogsRequest>(
        s, proto::LIST_LOGS, [this](const auto& r, rpc::Responder resp) {
          AskAgents<proto::LogList>(
              proto::LIST_LOGS, r.node_id(), r, resp,
              [](proto::LogList& all, proto::LogList& one) {
                for (auto& f : *one.mutable_files()) {
                  *all.add_files() = std::move(f);
                }
              });
        });
    rpc::RegisterProto<proto::ListObjectsRequest>(
        s, proto::LIST_OBJECTS, [this](const auto& r, rpc::Responder resp) {
          AskAgents<proto::ObjectList>(
              proto::LIST_OBJECTS, r.node_id(), r, resp,
              [](proto::ObjectList& all, proto::ObjectList& one) {
                for (auto& o : *one.mutable_objects()) {
                  *all.add_objects() = std::move(o);
                }
                all.set_total(all.total() + one.total());
              });
        });
    rpc::RegisterProto<proto::ReadLogRequest>(
        s, proto::READ_LOG, [this](const auto& r, rpc::Responder resp) {
          std::string node_id = r.node_id();
          if (node_id.empty()) {
            for (const auto& [id, n] : nodes_) {
              if (n.info.alive() && n.info.is_head_node()) node_id = id;
            }
          }
          const NodeEntry* node = AliveNode(node_id);
          if (node == nullptr) return resp.Error(NoSuchNode(r.node_id()));
          AgentChannel(node->info.address())
              ->Call(
                  proto::READ_LOG, r.SerializeAsString(),
                  [resp](absl::StatusOr<std::string> reply) {
                    if (!reply.ok()) return resp.Error(reply.status());
                    resp.ReplyRaw(std::move(*reply));
                  },
                  kAgentAskTimeoutMs + r.wait_ms());
        });
  }

  const NodeEntry* AliveNode(const std::string& node_id) const {
    auto it = nodes_.find(node_id);
    if (it == nodes_.end() || !it->second.info.alive()) return nullptr;
    return &it->second;
  }

  static absl::Status NoSuchNode(const std::string& node_id) {
    return absl::NotFoundError(absl::StrCat(
        node_id.empty() ? "the head's node" : "node " + node_id,
        " is not alive in this cluster (`shoal list nodes` shows them)"));
  }

  // Asks the agent of node `node_id` (every alive node when empty) the
  // same `request`, and answers `resp` with their replies merged into one;
  // a node that cannot answer is named in the reply's errors.
  template <typename Reply, typename Request, typename MergeFn>
  void AskAgents(proto::Method method, const std::string& node_id,
                 const Request& request, const rpc::Responder& resp,
                 MergeFn merge) {
    std::vector<std::pair<std::string, std::string>> targets;  // id, agent
    for (const auto& [id, n] : nodes_) {
      if (n.info.alive() && (node_id.empty() || id == node_id)) {
        targets.emplace_back(id, n.info.address());
      }
    }
    if (!node_id.empty() && targets.empty()) {
      return resp.Error(NoSuchNode(node_id));
    }
    auto all = std::make_shared<Reply>();
    auto left = std::make_shared<size_t>(targets.size());
    if (targets.empty()) return resp.Reply(*all);
    const std::string payload = request.SerializeAsString();
    for (const auto& [id, agent] : targets) {
      AgentChannel(agent)->Call(
          method, payload,
          [all, left, resp, merge, id = id](absl::StatusOr<std::string> r) {
            Reply one;
            if (!r.ok()) {
              all->add_errors(
                  absl::StrCat("node ", id, ": ", r.status().message()));
            } else if (!one.ParseFromString(*r)) {
              all->add_errors(
                  absl::StrCat("node ", id, ": a malformed answer"));
            } else {
              merge(*all, one);
            }
            if (--*left == 0) resp.Reply(*all);
          },
          kAgentAskTimeoutMs);
    }
  }

  // ---- Placement groups ----
  //
  // One group is placed at a time: its bundles are prepared on every node
  // they go to, then committed; if any node refuses, the prepared ones are
  // cancelled and the group waits for its next turn. Because no two groups
  // hold partial reservations at once, groups competing for the same nodes
  // never deadlock.

  struct PgEntry {
    proto::PlacementGroupInfo info;
    int64_t created_us = 0;
  };

  PgEntry* FindPg(const proto::GetPlacementGroupRequest& r) {
    std::string id = r.pg_id();
    if (id.empty()) {
      auto n = pg_by_name_.find(r.name());
      if (n == pg_by_name_.end()) return nullptr;
      id = n->second;
    }
    auto it = pgs_.find(id);
    return it == pgs_.end() ? nullptr : &it->second;
  }

  void CreatePlacementGroup(const proto::PlacementGroupSpec& spec,
                            rpc::Responder resp) {
    if (spec.bundles().empty()) {
      return resp.Error(absl::InvalidArgumentError(
          "a placement group needs at least one bundle"));
    }
    for (const auto& b : spec.bundles()) {
      if (ResourceSet::FromProto(b).empty()) {
        return resp.Error(absl::InvalidArgumentError(
            "every bundle of a placement group must ask for some resource, "
            "e.g. {\"CPU\": 1}"));
      }
    }
    if (!spec.name().empty() && pg_by_name_.count(spec.name())) {
      return resp.Error(absl::AlreadyExistsError(
          absl::StrCat("a placement group named \"", spec.name(),
                       "\" exists; remove it first or pick another name")));
    }
    PgEntry entry;
    entry.info.set_pg_id(RandomHex(6));
    *entry.info.mutable_spec() = spec;
    if (auto job = job_by_conn_.find(resp.connection_id());
        job != job_by_conn_.end()) {
      entry.info.set_job_id(job->second);
    }
    entry.info.set_state(proto::PlacementGroupInfo::PENDING);
    entry.created_us = MonotonicUs();
    std::string id = entry.info.pg_id();
    if (!spec.name().empty()) pg_by_name_[spec.name()] = id;
    pgs_[id] = entry;
    PersistPg(entry);
    pending_pgs_.push_back(id);
    resp.Reply(entry.info);
    SchedulePlacementGroups();
  }

  void RemovePlacementGroup(PgEntry& pg) {
    if (pg.info.state() == proto::PlacementGroupInfo::CREATED) {
      std::set<std::string> nodes(pg.info.bundle_nodes().begin(),
                                  pg.info.bundle_nodes().end());
      for (const auto& node : nodes)
        SendBundles(node, proto::CANCEL_BUNDLES, pg.info.pg_id(), {}, nullptr);
    }
    pg.info.set_state(proto::PlacementGroupInfo::REMOVED);
    pg_by_name_.erase(pg.info.spec().name());
    pending_pgs_.erase(
        std::remove(pending_pgs_.begin(), pending_pgs_.end(), pg.info.pg_id()),
        pending_pgs_.end());
    PersistPg(pg);
  }

  // Keeps the group's state in storage (removed ones are forgotten there).
  void PersistPg(const PgEntry& pg) {
    absl::Status st = pg.info.state() == proto::PlacementGroupInfo::REMOVED
                          ? storage_->Delete(kPgsTable, pg.info.pg_id())
                          : storage_->Put(kPgsTable, pg.info.pg_id(),
                                          pg.info.SerializeAsString());
    if (!st.ok()) SHOAL_LOG(ERROR) << "cannot store placement group: " << st;
  }

  // A job's placement groups end with it, as Ray's do, unless detached.
  void RemoveGroupsOfJob(const std::string& job_id) {
    for (auto& [id, pg] : pgs_) {
      if (pg.info.job_id() != job_id || pg.info.spec().detached() ||
          pg.info.state() == proto::PlacementGroupInfo::REMOVED) {
        continue;
      }
      SHOAL_LOG(INFO) << "removing placement group " << id
                      << (pg.info.spec().name().empty()
                              ? ""
                              : " (\"" + pg.info.spec().name() + "\")")
                      << ": its job " << job_id << " ended";
      RemovePlacementGroup(pg);
    }
  }

  rpc::Channel* AgentChannel(const std::string& address) {
    auto& ch = agents_[address];
    if (ch == nullptr) {
      ch = std::make_unique<rpc::Channel>(loop_.get(), address, options_.token,
                                          "head");
    }
    return ch.get();
  }

  // Sends a bundle request to the agent of `node_id`; `done` gets its status.
  void SendBundles(
      const std::string& node_id, int method, const std::string& pg_id,
      const std::vector<std::pair<int, proto::ResourceMap>>& bundles,
      std::function<void(absl::Status)> done) {
    auto node = nodes_.find(node_id);
    if (node == nodes_.end() || !node->second.info.alive()) {
      if (done) done(absl::UnavailableError("node " + node_id + " is dead"));
      return;
    }
    proto::BundleReservation req;
    req.set_pg_id(pg_id);
    for (const auto& [index, shape] : bundles) {
      req.add_indices(index);
      *req.add_bundles() = shape;
    }
    rpc::CallProto<proto::Empty>(
        AgentChannel(node->second.info.address()), method, req,
        [done](absl::StatusOr<proto::Empty> r) {
          if (done) done(r.status());
        },
        3000);
  }

  // Nodes in a stable order: TPU hosts by worker id, others by address.
  std::vector<PlacementNode> PlacementNodes(bool use_totals) const {
    std::vector<std::pair<std::string, const proto::NodeInfo*>> alive;
    for (const auto& [id, n] : nodes_) {
      if (!n.info.alive()) continue;
      auto w = n.info.labels().find("shoal.io/tpu-worker-id");
      std::string key =
          w != n.info.labels().end()
              ? absl::StrCat(
                    "0/",
                    std::string(8 - std::min<size_t>(8, w->second.size()), '0'),
                    w->second)
              : absl::StrCat("1/", n.info.address());
      alive.emplace_back(key, &n.info);
    }
    std::sort(alive.begin(), alive.end());
    std::vector<PlacementNode> out;
    for (const auto& [key, n] : alive) {
      out.push_back(
          {n->node_id(),
           ResourceSet::FromProto(use_totals ? n->total() : n->available())});
    }
    return out;
  }

  // The alive nodes for actor placement, in the order PlacementNodes uses.
  std::vector<JobNode> JobNodes() const {
    std::vector<JobNode> out;
    for (const auto& [id, entry] : nodes_) {
      const proto::NodeInfo& n = entry.info;
      if (!n.alive()) continue;
      out.push_back({n.node_id(), n.address(), n.total(), n.is_head_node(),
                     n.available()});
    }
    return out;
  }

  std::vector<ActorNode> ActorNodes() const {
    std::vector<ActorNode> out;
    for (const PlacementNode& p : PlacementNodes(/*use_totals=*/false)) {
      const NodeEntry& entry = nodes_.at(p.node_id);
      const proto::NodeInfo& n = entry.info;
      ActorNode node{n.node_id(), n.address(),
                     ResourceSet::FromProto(n.total()), p.available};
      for (const auto& l : entry.leases) {
        if (!l.actor_id().empty()) node.leased_actors.insert(l.actor_id());
      }
      out.push_back(std::move(node));
    }
    return out;
  }

  // Gives every pending group one try, in order, until one is being placed.
  void SchedulePlacementGroups() {
    size_t n = pending_pgs_.size();
    for (size_t i = 0; i < n && !placing_ && !pending_pgs_.empty(); ++i) {
      std::string id = pending_pgs_.front();
      pending_pgs_.pop_front();
      TryPlaceGroup(id);
    }
  }

  // Starts placing group `id`, fails it, or puts it back in line.
  void TryPlaceGroup(const std::string& id) {
    auto it = pgs_.find(id);
    if (it == pgs_.end() ||
        it->second.info.state() != proto::PlacementGroupInfo::PENDING) {
      return;
    }
    PgEntry& pg = it->second;
    std::vector<ResourceSet> bundles;
    for (const auto& b : pg.info.spec().bundles()) {
      bundles.push_back(ResourceSet::FromProto(b));
    }
    auto strategy = static_cast<PlacementStrategy>(pg.info.spec().strategy());
    auto placed = PlaceBundles(bundles, strategy, PlacementNodes(false));
    if (!placed) {
      bool feasible =
          PlaceBundles(bundles, strategy, PlacementNodes(true)).has_value();
      if (!feasible &&
          MonotonicUs() - pg.created_us > options_.infeasible_grace_ms * 1000) {
        pg.info.set_state(proto::PlacementGroupInfo::FAILED);
        pg.info.set_error(absl::StrCat(
            "placement group ",
            pg.info.spec().name().empty() ? id : pg.info.spec().name(), " (",
            StrategyName(strategy), ", ", bundles.size(),
            " bundles) cannot be placed on the cluster's nodes even when "
            "they are idle; ask for smaller bundles, another strategy, or "
            "add nodes"));
        pg_by_name_.erase(pg.info.spec().name());
        PersistPg(pg);
        SHOAL_LOG(WARNING) << pg.info.error();
      } else {
        pending_pgs_.push_back(id);
        RetryPlacementSoon();
      }
      return;
    }
    // Two-phase: prepare on every node, then commit.
    std::map<std::string, std::vector<std::pair<int, proto::ResourceMap>>>
        by_node;
    for (size_t i = 0; i < placed->size(); ++i) {
      by_node[(*placed)[i]].emplace_back(static_cast<int>(i),
                                         pg.info.spec().bundles(i));
    }
    placing_ = true;
    auto remaining = std::make_shared<size_t>(by_node.size());
    auto ok_nodes = std::make_shared<std::vector<std::string>>();
    auto failure = std::make_shared<absl::Status>();
    for (const auto& [node, node_bundles] : by_node) {
      SendBundles(node, proto::PREPARE_BUNDLES, id, node_bundles,
                  [this, id, node, remaining, ok_nodes, failure,
                   placed = *placed](absl::Status st) {
                    if (st.ok()) {
                      ok_nodes->push_back(node);
                    } else {
                      *failure = st;
                    }
                    if (--*remaining > 0) return;
                    FinishPlacement(id, placed, *ok_nodes, *failure);
                  });
    }
  }

  void RetryPlacementSoon() {
    if (retry_timer_armed_) return;
    retry_timer_armed_ = true;
    loop_->RunAfter(200, [this] {
      retry_timer_armed_ = false;
      SchedulePlacementGroups();
    });
  }

  void FinishPlacement(const std::string& id,
                       const std::vector<std::string>& placed,
                       const std::vector<std::string>& ok_nodes,
                       const absl::Status& failure) {
    placing_ = false;
    auto it = pgs_.find(id);
    bool still_wanted =
        it != pgs_.end() &&
        it->second.info.state() == proto::PlacementGroupInfo::PENDING;
    if (!failure.ok() || !still_wanted) {
      for (const auto& node : ok_nodes) {
        SendBundles(node, proto::CANCEL_BUNDLES, id, {}, nullptr);
      }
      if (still_wanted) {
        SHOAL_LOG(INFO) << "placement group " << id << ": " << failure
                        << "; will try again";
        pending_pgs_.push_back(id);
        RetryPlacementSoon();
      }
      return SchedulePlacementGroups();
    }
    // Commit everywhere; the group is created once every node confirms.
    placing_ = true;
    auto remaining = std::make_shared<size_t>(ok_nodes.size());
    auto failed = std::make_shared<absl::Status>();
    for (const auto& node : ok_nodes) {
      SendBundles(
          node, proto::COMMIT_BUNDLES, id, {},
          [this, id, placed, ok_nodes, remaining, failed](absl::Status st) {
            if (!st.ok()) *failed = st;
            if (--*remaining > 0) return;
            placing_ = false;
            FinishCommit(id, placed, ok_nodes, *failed);
          });
    }
  }

  void FinishCommit(const std::string& id,
                    const std::vector<std::string>& placed,
                    const std::vector<std::string>& nodes,
                    const absl::Status& failure) {
    auto it = pgs_.find(id);
    bool still_wanted =
        it != pgs_.end() &&
        it->second.info.state() == proto::PlacementGroupInfo::PENDING;
    if (!failure.ok() || !still_wanted) {
      for (const auto& node : nodes) {
        SendBundles(node, proto::CANCEL_BUNDLES, id, {}, nullptr);
      }
      if (still_wanted) {
        pending_pgs_.push_back(id);
        RetryPlacementSoon();
      }
      return SchedulePlacementGroups();
    }
    PgEntry& pg = it->second;
    pg.info.set_state(proto::PlacementGroupInfo::CREATED);
    for (const auto& node : placed) pg.info.add_bundle_nodes(node);
    PersistPg(pg);
    SHOAL_LOG(INFO) << "placement group " << id << " created on "
                    << absl::StrJoin(placed, ",");
    SchedulePlacementGroups();
  }

  void RegisterNode(const proto::RegisterNodeRequest& r, rpc::Responder resp) {
    proto::NodeInfo info = r.node();
    if (info.address().empty()) {
      return resp.Error(absl::InvalidArgumentError(
          "a node must register with the address of its agent"));
    }
    if (info.node_id().empty()) info.set_node_id(RandomHex(6));
    info.set_alive(true);
    info.set_start_time_ms(NowMs());
    if (!info.has_available()) *info.mutable_available() = info.total();
    NodeEntry& entry = nodes_[info.node_id()];
    entry.info = info;
    entry.last_heartbeat_us = MonotonicUs();
    entry.demands.clear();
    node_by_conn_[resp.connection_id()] = info.node_id();
    Persist(entry);
    SHOAL_LOG(INFO) << "node " << info.node_id() << " joined from "
                    << info.address() << " with "
                    << ResourceSet::FromProto(info.total()).DebugString();
    proto::RegisterNodeReply reply;
    reply.set_node_id(info.node_id());
    reply.set_heartbeat_interval_ms(options_.heartbeat_interval_ms);
    resp.Reply(reply);
  }

  void Heartbeat(const proto::HeartbeatRequest& r, rpc::Responder resp) {
    proto::HeartbeatReply reply;
    auto it = nodes_.find(r.node_id());
    if (it == nodes_.end() || !it->second.info.alive()) {
      // Unknown (the head restarted) or declared dead (a long pause): the
      // agent registers again and its view is rebuilt.
      reply.set_unknown_node(true);
      return resp.Reply(reply);
    }
    NodeEntry& e = it->second;
    e.last_heartbeat_us = MonotonicUs();
    *e.info.mutable_available() = r.available();
    if (r.has_total()) *e.info.mutable_total() = r.total();
    e.demands.assign(r.demands().begin(), r.demands().end());
    e.leases.assign(r.leases().begin(), r.leases().end());
    for (const auto& [id, n] : nodes_) *reply.add_nodes() = n.info;
    resp.Reply(reply);
  }

  void MarkDead(const std::string& node_id, const std::string& reason) {
    auto it = nodes_.find(node_id);
    if (it == nodes_.end() || !it->second.info.alive()) return;
    it->second.info.set_alive(false);
    it->second.info.set_death_reason(reason);
    it->second.info.mutable_available()->clear_amounts();
    it->second.demands.clear();
    it->second.leases.clear();
    Persist(it->second);
    if (jobs_ != nullptr) jobs_->NodeDied(node_id, reason);
    SHOAL_LOG(WARNING) << "node " << node_id << " ("
                       << it->second.info.address() << ") is dead: " << reason;
    // Null only while stopping.
    if (actors_) actors_->OnNodeDead(node_id, reason);
  }

  void ScheduleHealthCheck() {
    int64_t period = std::max<int64_t>(50, options_.health_timeout_ms / 10);
    loop_->RunAfter(period, [this] {
      int64_t now = MonotonicUs();
      std::vector<std::string> dead;
      for (const auto& [id, n] : nodes_) {
        if (n.info.alive() &&
            now - n.last_heartbeat_us > options_.health_timeout_ms * 1000) {
          dead.push_back(id);
        }
      }
      for (const auto& id : dead) {
        MarkDead(id,
                 absl::StrCat("no heartbeat for ", options_.health_timeout_ms,
                              " ms: the node agent died or its host is "
                              "unreachable"));
      }
      ScheduleHealthCheck();
    });
  }

  void Persist(const NodeEntry& e) {
    absl::Status st = storage_->Put(kNodesTable, e.info.node_id(),
                                    e.info.SerializeAsString());
    if (!st.ok()) SHOAL_LOG(ERROR) << "cannot store node: " << st;
  }

  proto::ClusterStatus Status() const {
    proto::ClusterStatus status;
    std::map<std::string, proto::ResourceDemand> demands;
    const int64_t now_us = MonotonicUs();
    for (const auto& [id, n] : nodes_) {
      proto::NodeInfo* info = status.add_nodes();
      *info = n.info;
      if (!n.info.alive()) continue;
      info->set_heartbeat_age_ms((now_us - n.last_heartbeat_us) / 1000);
      for (const auto& l : n.leases) *status.add_leases() = l;
      for (const auto& d : n.demands) {
        std::string key = absl::StrCat(
            ResourceSet::FromProto(d.shape()).DebugString(), d.infeasible());
        auto [it, added] = demands.emplace(key, d);
        if (!added) it->second.set_count(it->second.count() + d.count());
      }
    }
    for (auto& [k, d] : demands) *status.add_demands() = d;
    status.set_head_address(absl::StrCat(options_.host, ":", server_->port()));
    status.set_session_dir(options_.session_dir);
    status.set_num_jobs(next_job_ - 1);
    for (const auto& [id, pg] : pgs_) {
      if (pg.info.state() == proto::PlacementGroupInfo::PENDING ||
          pg.info.state() == proto::PlacementGroupInfo::CREATED) {
        proto::PlacementGroupInfo* info = status.add_placement_groups();
        *info = pg.info;
        info->set_age_ms((MonotonicUs() - pg.created_us) / 1000);
      }
    }
    if (actors_) actors_->AddToStatus(&status);
    return status;
  }

  void RegisterJob(const proto::RegisterJobRequest& r, rpc::Responder resp) {
    proto::RegisterJobReply reply;
    if (!r.resume_job_id().empty()) {
      // A driver back after the head restarted: its connection is its job's
      // again, and what the job owns stays.
      reply.set_job_id(r.resume_job_id());
      job_by_conn_[resp.connection_id()] = r.resume_job_id();
      awaiting_drivers_.erase(r.resume_job_id());
      SHOAL_LOG(INFO) << r.resume_job_id() << " is back (driver pid "
                      << r.driver_pid() << " on " << r.driver_host() << ")";
      return resp.Reply(reply);
    }
    reply.set_job_id(absl::StrCat("job", next_job_++));
    absl::Status st =
        storage_->Put(kMetaTable, "next_job", absl::StrCat(next_job_));
    if (st.ok()) {
      st = storage_->Put(kJobsTable, reply.job_id(), r.SerializeAsString());
    }
    if (!st.ok()) return resp.Error(st);
    job_by_conn_[resp.connection_id()] = reply.job_id();
    SHOAL_LOG(INFO) << reply.job_id() << " started by pid " << r.driver_pid()
                    << " on " << r.driver_host() << " (" << r.binary_path()
                    << ")";
    resp.Reply(reply);
  }

  void OnDisconnect(uint64_t conn) {
    if (auto it = job_by_conn_.find(conn); it != job_by_conn_.end()) {
      SHOAL_LOG(INFO) << it->second << " finished (its driver disconnected)";
      EndJob(it->second);
      job_by_conn_.erase(it);
    }
    node_by_conn_.erase(conn);
    gangs_.LauncherLost(conn);
  }

  // A driver's job is over: what it owns ends with it (detached groups and
  // actors stay).
  void EndJob(const std::string& job_id) {
    RemoveGroupsOfJob(job_id);
    if (actors_) actors_->OnJobEnded(job_id);
    absl::Status st = storage_->Delete(kJobsTable, job_id);
    if (!st.ok()) SHOAL_LOG(ERROR) << "cannot store the end of a job: " << st;
  }

  // ---- Restart ----

  // What a head that ran before in this session kept: the nodes (alive
  // ones get a health timeout to be heard from again), the job counter,
  // the drivers' jobs (each gets reattach_grace_ms to reconnect, else it
  // ends), placement groups (pending ones are placed again) and, in the
  // job manager, submitted jobs. The KV store is read from storage as it
  // is used.
  void Restore() {
    const int64_t now = MonotonicUs();
    size_t nodes = 0, pgs = 0;
    for (const auto& [id, bytes] : storage_->Scan(kNodesTable)) {
      NodeEntry entry;
      if (!entry.info.ParseFromString(bytes)) continue;
      entry.last_heartbeat_us = now;
      nodes_[id] = std::move(entry);
      ++nodes;
    }
    if (auto next = storage_->Get(kMetaTable, "next_job")) {
      int64_t n = 0;
      if (absl::SimpleAtoi(*next, &n) && n > next_job_) next_job_ = n;
    }
    for (const auto& [id, bytes] : storage_->Scan(kJobsTable)) {
      awaiting_drivers_.insert(id);
    }
    for (const auto& [id, bytes] : storage_->Scan(kPgsTable)) {
      PgEntry pg;
      if (!pg.info.ParseFromString(bytes)) continue;
      pg.created_us = now;
      if (!pg.info.spec().name().empty() &&
          pg.info.state() != proto::PlacementGroupInfo::FAILED) {
        pg_by_name_[pg.info.spec().name()] = id;
      }
      if (pg.info.state() == proto::PlacementGroupInfo::PENDING) {
        pending_pgs_.push_back(id);
      }
      pgs_[id] = std::move(pg);
      ++pgs;
    }
    jobs_->Restore();
    if (nodes == 0 && pgs == 0 && awaiting_drivers_.empty()) return;
    SHOAL_LOG(INFO) << "restarted with the state kept in this session: "
                    << nodes << " node(s), " << awaiting_drivers_.size()
                    << " driver job(s) to come back, " << pgs
                    << " placement group(s)";
    if (!pending_pgs_.empty()) SchedulePlacementGroups();
    loop_->RunAfter(options_.reattach_grace_ms, [this] {
      for (const std::string& job : awaiting_drivers_) {
        SHOAL_LOG(INFO) << job << " finished (its driver did not come back "
                        << "within " << options_.reattach_grace_ms
                        << " ms of the head's restart)";
        EndJob(job);
      }
      awaiting_drivers_.clear();
    });
  }

  static bool ValidHash(const std::string& hash) {
    if (hash.size() != 64) return false;
    for (char c : hash) {
      if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    }
    return true;
  }

  void PutBlobChunk(const proto::BlobChunk& r, rpc::Responder resp) {
    if (!ValidHash(r.hash())) {
      return resp.Error(absl::InvalidArgumentError(
          "a blob is named by the hex SHA-256 of its contents"));
    }
    std::string final_path = BlobDir() + "/" + r.hash();
    std::string partial = final_path + ".partial";
    std::fstream f(partial, std::ios::in | std::ios::out | std::ios::binary);
    if (!f) f.open(partial, std::ios::out | std::ios::binary);
    if (!f) {
      return resp.Error(absl::InternalError("cannot write " + partial));
    }
    f.seekp(r.offset());
    f.write(r.data().data(), r.data().size());
    f.close();
    if (r.last()) {
      auto hash = Sha256File(partial);
      if (!hash.ok() || *hash != r.hash()) {
        unlink(partial.c_str());
        return resp.Error(absl::DataLossError(
            "uploaded binary does not match its hash; upload it again"));
      }
      rename(partial.c_str(), final_path.c_str());
    }
    resp.Reply(proto::Empty());
  }

  void GetBlobChunk(const proto::GetBlobChunkRequest& r, rpc::Responder resp) {
    if (!ValidHash(r.hash())) {
      return resp.Error(absl::InvalidArgumentError("bad blob hash"));
    }
    std::string path = BlobDir() + "/" + r.hash();
    std::ifstream f(path, std::ios::binary);
    if (!f) {
      return resp.Error(absl::NotFoundError(absl::StrCat(
          "the head has no binary with hash ", r.hash(),
          "; the driver that used it must connect again to upload it")));
    }
    f.seekg(0, std::ios::end);
    int64_t size = f.tellg();
    int64_t want = std::min<int64_t>(
        r.max_bytes() > 0 ? r.max_bytes() : kMaxBlobChunk, kMaxBlobChunk);
    int64_t offset = std::min<int64_t>(r.offset(), size);
    int64_t n = std::min<int64_t>(want, size - offset);
    proto::BlobChunk chunk;
    chunk.set_hash(r.hash());
    chunk.set_offset(offset);
    chunk.set_total_size(size);
    std::string* data = chunk.mutable_data();
    data->resize(n);
    f.seekg(offset);
    f.read(data->data(), n);
    chunk.set_last(offset + n >= size);
    resp.Reply(chunk);
  }

  HeadOptions options_;
  std::unique_ptr<rpc::EventLoop> loop_;
  std::unique_ptr<rpc::Server> server_;
  std::unique_ptr<TableStorage> storage_;
  std::map<std::string, NodeEntry> nodes_;
  std::map<uint64_t, std::string> node_by_conn_;
  std::map<uint64_t, std::string> job_by_conn_;
  // After a restart: drivers' jobs that have not reconnected yet.
  std::set<std::string> awaiting_drivers_;
  int64_t next_job_ = 1;
  std::map<std::string, PgEntry> pgs_;
  std::map<std::string, std::string> pg_by_name_;
  std::deque<std::string> pending_pgs_;
  std::map<std::string, std::unique_ptr<rpc::Channel>> agents_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<ActorManager> actors_;
  TaskEventStore task_events_;
  GangTable gangs_;
  bool placing_ = false;
  bool retry_timer_armed_ = false;

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_requested_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Head>> Head::Create(const HeadOptions& options) {
  ASSIGN_OR_RETURN(auto loop, rpc::EventLoop::Create("shoal-head"));
  auto head = std::make_unique<HeadImpl>(options, std::move(loop));
  RETURN_IF_ERROR(head->Start());
  return head;
}

}  // namespace shoal
