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

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/util.h"
#include "head/actor_manager.h"
#include "head/gang_table.h"
#include "head/head_storage.h"
#include "head/job_manager.h"
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
    ASSIGN_OR_RETURN(storage_, OpenHeadStorage(options_));
    gangs_ = std::make_unique<GangTable>(/*max_gangs=*/100, storage_.get());
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
      actor_options.worker_channels = std::make_shared<rpc::TcpChannelFactory>(
          loop_.get(), options_.token, "head");
      actor_options.agent_channel = [this](const std::string& address) {
        return AgentChannel(address);
      };
      actor_options.alive_nodes = [this] { return ActorNodes(); };
      actor_options.storage = storage_.get();
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
    // The view version of the last change of `info` agents see (0: none
    // yet): see ViewChanged.
    int64_t view_version = 0;
    // `info` as a view entry: the `nodes` field of a HeartbeatReply,
    // encoded (tag, length, slim NodeInfo), so that a reply is copies.
    std::string view_entry;
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
          proto::GangInfo gang = r;
          auto job = job_by_conn_.find(resp.connection_id());
          gang.set_driver_job_id(job != job_by_conn_.end() ? job->second : "");
          gangs_->Update(gang);
          resp.Reply(proto::Empty());
        });
    rpc::RegisterProto<proto::Empty>(s, proto::LIST_GANGS,
                                     [this](const auto&, rpc::Responder resp) {
                                       resp.Reply(gangs_->List());
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
    // A created group whose nodes died, being placed again: the bundles
    // each dead node took (for the error it fails with if they cannot be
    // placed again).
    std::map<std::string, std::set<int>> lost;  // dead node -> bundles
    std::string lost_why;                       // the first death's reason

    // "bundle 3 lost with node n2: <why>", or for many, a summary.
    std::string LostText() const {
      if (lost.empty()) return "";
      std::vector<std::string> each;
      size_t bundles = 0;
      for (const auto& [node, indices] : lost) {
        bundles += indices.size();
        if (each.size() < 8) {
          each.push_back(absl::StrCat(
              indices.size() == 1 ? "bundle " : "bundles ",
              absl::StrJoin(indices, ", "), " lost with node ", node));
        }
      }
      std::string text = absl::StrJoin(each, "; ");
      if (lost.size() > each.size()) {
        absl::StrAppend(&text, "; ", bundles, " bundles lost with ",
                        lost.size(), " dead nodes in all");
      }
      return absl::StrCat(text, " (", lost_why, ")");
    }
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
    // Kept before it is acknowledged.
    if (absl::Status st = PersistPg(entry); !st.ok()) return resp.Error(st);
    if (!spec.name().empty()) pg_by_name_[spec.name()] = id;
    pgs_[id] = entry;
    pending_pgs_.push_back(id);
    resp.Reply(entry.info);
    SchedulePlacementGroups();
  }

  void RemovePlacementGroup(PgEntry& pg) {
    // Created, or pending with the bundles a dead node did not take.
    ReleaseBundles(pg);
    pg.info.set_state(proto::PlacementGroupInfo::REMOVED);
    pg_by_name_.erase(pg.info.spec().name());
    pending_pgs_.erase(
        std::remove(pending_pgs_.begin(), pending_pgs_.end(), pg.info.pg_id()),
        pending_pgs_.end());
    PersistPg(pg).IgnoreError();
  }

  // Cancels the bundles `pg` holds on its nodes and forgets where they were.
  void ReleaseBundles(PgEntry& pg) {
    std::set<std::string> nodes(pg.info.bundle_nodes().begin(),
                                pg.info.bundle_nodes().end());
    nodes.erase("");
    for (const auto& node : nodes) {
      SendBundles(node, proto::CANCEL_BUNDLES, pg.info.pg_id(), {}, nullptr);
    }
    pg.info.clear_bundle_nodes();
  }

  // Keeps the group's state in storage (removed ones are forgotten there).
  absl::Status PersistPg(const PgEntry& pg) {
    absl::Status st = pg.info.state() == proto::PlacementGroupInfo::REMOVED
                          ? storage_->Delete(kPgsTable, pg.info.pg_id())
                          : storage_->Put(kPgsTable, pg.info.pg_id(),
                                          pg.info.SerializeAsString());
    if (!st.ok()) SHOAL_LOG(ERROR) << "cannot store placement group: " << st;
    return st;
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
      ch = std::make_unique<rpc::TcpChannel>(loop_.get(), address,
                                             options_.token, "head");
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

  // Starts placing group `id`, fails it, or puts it back in line. A group
  // that lost bundles with a dead node places only those, on nodes that
  // hold none of its others (an agent keeps one reservation per group).
  // If they fit nowhere, it fails after the grace period like any group
  // that cannot be placed; the bundles it kept stay reserved, and nothing
  // running in them is ended, until its owner removes it (or its job
  // ends): a gang's driver, which sees its own ranks fail, decides.
  void TryPlaceGroup(const std::string& id) {
    auto it = pgs_.find(id);
    if (it == pgs_.end() ||
        it->second.info.state() != proto::PlacementGroupInfo::PENDING) {
      return;
    }
    PgEntry& pg = it->second;
    const auto& spec = pg.info.spec();
    std::vector<std::string> all(spec.bundles_size());
    std::vector<int> to_place;  // bundle indices without a node
    std::set<std::string> kept;
    for (int i = 0; i < spec.bundles_size(); ++i) {
      if (i < pg.info.bundle_nodes_size()) all[i] = pg.info.bundle_nodes(i);
      if (all[i].empty()) {
        to_place.push_back(i);
      } else {
        kept.insert(all[i]);
      }
    }
    std::vector<ResourceSet> bundles;
    for (int i : to_place)
      bundles.push_back(ResourceSet::FromProto(spec.bundles(i)));
    auto candidates = [&](bool use_totals) {
      std::vector<PlacementNode> nodes = PlacementNodes(use_totals);
      std::erase_if(nodes, [&](const PlacementNode& n) {
        return kept.count(n.node_id) > 0;
      });
      return nodes;
    };
    auto strategy = static_cast<PlacementStrategy>(spec.strategy());
    auto placed = PlaceBundles(bundles, strategy, candidates(false));
    if (!placed) {
      bool feasible =
          PlaceBundles(bundles, strategy, candidates(true)).has_value();
      if (!feasible &&
          MonotonicUs() - pg.created_us > options_.infeasible_grace_ms * 1000) {
        pg.info.set_state(proto::PlacementGroupInfo::FAILED);
        pg.info.set_error(absl::StrCat(
            "placement group ", spec.name().empty() ? id : spec.name(), " (",
            StrategyName(strategy), ", ", spec.bundles_size(),
            " bundles) cannot be placed on the cluster's nodes even when "
            "they are idle; ask for smaller bundles, another strategy, or "
            "add nodes",
            pg.lost.empty() ? "" : absl::StrCat(": ", pg.LostText()),
            kept.empty() ? ""
                         : "; its other bundles stay reserved, with the work "
                           "in them, until the group is removed or its job "
                           "ends"));
        pg_by_name_.erase(spec.name());
        PersistPg(pg).IgnoreError();
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
    for (size_t k = 0; k < to_place.size(); ++k) {
      all[to_place[k]] = (*placed)[k];
      by_node[(*placed)[k]].emplace_back(to_place[k],
                                         spec.bundles(to_place[k]));
    }
    placed = std::move(all);
    placing_ = true;
    auto remaining = std::make_shared<size_t>(by_node.size());
    auto ok_nodes = std::make_shared<std::vector<std::string>>();
    auto failure = std::make_shared<absl::Status>();
    for (const auto& [node, node_bundles] : by_node) {
      SendBundles(node, proto::PREPARE_BUNDLES, id, node_bundles,
                  [this, id, node = node, remaining, ok_nodes, failure,
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
    pg.info.clear_error();
    pg.lost.clear();
    pg.info.clear_bundle_nodes();
    for (const auto& node : placed) pg.info.add_bundle_nodes(node);
    PersistPg(pg).IgnoreError();
    SHOAL_LOG(INFO) << "placement group " << id << " created on "
                    << absl::StrJoin(placed, ",");
    // A node it kept may have died while the others were placed.
    for (const std::string& node :
         std::set<std::string>(placed.begin(), placed.end())) {
      auto n = nodes_.find(node);
      if (n != nodes_.end() && !n->second.info.alive()) {
        LoseBundles(id, pg, n->second.info,
                    "it died while the group was being placed");
      }
    }
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
    ViewChanged(entry);
    entry.last_heartbeat_us = MonotonicUs();
    entry.demands.clear();
    node_by_conn_[resp.connection_id()] = info.node_id();
    // Kept before it is acknowledged: the agent registers again.
    if (absl::Status st = Persist(entry); !st.ok()) return resp.Error(st);
    SHOAL_LOG(INFO) << "node " << info.node_id() << " joined from "
                    << info.address() << " with "
                    << ResourceSet::FromProto(info.total()).DebugString();
    proto::RegisterNodeReply reply;
    reply.set_node_id(info.node_id());
    reply.set_heartbeat_interval_ms(options_.heartbeat_interval_ms);
    resp.Reply(reply);
    ReleaseStaleBundles(info);
  }

  // A node that registers again holding bundles of groups that no longer
  // have them there (it was taken for dead, and they were placed again
  // elsewhere; or the group ended meanwhile) is told to let them go.
  void ReleaseStaleBundles(const proto::NodeInfo& info) {
    std::set<std::string> stale;
    for (const auto& [name, amount] : info.total().amounts()) {
      BundleResource b;
      if (!ParseBundleResource(name, &b)) continue;
      auto pg = pgs_.find(b.group_id);
      const bool held =
          pg != pgs_.end() &&
          (pg->second.info.state() == proto::PlacementGroupInfo::CREATED ||
           pg->second.info.state() == proto::PlacementGroupInfo::PENDING) &&
          std::find(pg->second.info.bundle_nodes().begin(),
                    pg->second.info.bundle_nodes().end(),
                    info.node_id()) != pg->second.info.bundle_nodes().end();
      if (!held) stale.insert(b.group_id);
    }
    for (const auto& group : stale) {
      SHOAL_LOG(INFO) << "node " << info.node_id()
                      << " holds bundles of placement group " << group
                      << " that are no longer its; releasing them";
      SendBundles(info.node_id(), proto::CANCEL_BUNDLES, group, {}, nullptr);
    }
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
    bool changed = !SameAmounts(e.info.available(), r.available());
    if (changed) *e.info.mutable_available() = r.available();
    if (r.has_total() && !SameAmounts(e.info.total(), r.total())) {
      *e.info.mutable_total() = r.total();
      changed = true;
    }
    if (changed) ViewChanged(e);
    e.demands.assign(r.demands().begin(), r.demands().end());
    e.leases.assign(r.leases().begin(), r.leases().end());
    if (actors_) actors_->OnNodeLeases(e.info.address(), r.leases());
    std::string body = FillView(r.view_epoch(), r.view_version(), &reply);
    resp.ReplyRaw(reply.SerializeAsString() + body);
  }

  // The view an agent at (`epoch`, `version`) is missing, as the encoded
  // `nodes` of its reply (the rest of which this sets): the nodes changed
  // since `version`, or, when it holds another head's view, none, or one
  // newer than this head's, every node (full_view). Either comes in pages
  // of up to kViewPageBytes, oldest change first, the reply's version the
  // last change it brings, so that the agent's next heartbeat asks for the
  // rest. Every view byte is paced: past kViewBytesPerS in a second, a
  // reply brings no nodes (an agent that needed a whole view is told it
  // holds none, version 0) and the agent asks again at its next heartbeat,
  // scheduling on its own node meanwhile. N nodes that join at once need
  // N views of up to N nodes; unpaced, the head would build them in a
  // burst and fall behind until heartbeats time out.
  std::string FillView(uint64_t epoch, int64_t version,
                       proto::HeartbeatReply* reply) {
    reply->set_view_epoch(view_epoch_);
    const bool whole =
        epoch != view_epoch_ || version <= 0 || version > view_version_;
    const int64_t from = whole ? 0 : version;
    const int64_t now = MonotonicUs();
    if (now - view_bytes_since_us_ >= 1000000) {
      view_bytes_since_us_ = now;
      view_bytes_ = 0;
    }
    std::string body;
    int64_t reached = from;
    auto c = view_changes_.upper_bound(from);
    for (; c != view_changes_.end() && body.size() < kViewPageBytes &&
           view_bytes_ < kViewBytesPerS;
         ++c) {
      const std::string& entry = nodes_.at(c->second).view_entry;
      body += entry;
      view_bytes_ += static_cast<int64_t>(entry.size());
      reached = c->first;
    }
    if (c == view_changes_.end()) reached = view_version_;
    reply->set_view_version(reached);
    reply->set_full_view(whole && reached > 0);
    return body;
  }

  // What an agent's view holds of a node: what its lease policy reads
  // (agent/lease_policy.cc), half of a NodeInfo's bytes. An idle node's
  // available (all of its total) is left out, which halves its entry
  // again: the agent takes a missing available as the total.
  static void AddViewNode(const proto::NodeInfo& info,
                          proto::HeartbeatReply* reply) {
    proto::NodeInfo* n = reply->add_nodes();
    n->set_node_id(info.node_id());
    n->set_address(info.address());
    n->set_alive(info.alive());
    *n->mutable_total() = info.total();
    if (!info.alive() || !SameAmounts(info.available(), info.total())) {
      *n->mutable_available() = info.available();
    }
  }

  // `e.info` changed in what agents see (joined, died, resources): it
  // gets the next view version, so that each agent's next heartbeat brings
  // it that node again.
  void ViewChanged(NodeEntry& e) {
    if (e.view_version != 0) view_changes_.erase(e.view_version);
    e.view_version = ++view_version_;
    view_changes_[e.view_version] = e.info.node_id();
    proto::HeartbeatReply one;
    AddViewNode(e.info, &one);
    e.view_entry = one.SerializeAsString();
  }

  static bool SameAmounts(const proto::ResourceMap& a,
                          const proto::ResourceMap& b) {
    if (a.amounts_size() != b.amounts_size()) return false;
    for (const auto& [name, amount] : a.amounts()) {
      auto it = b.amounts().find(name);
      if (it == b.amounts().end() || it->second != amount) return false;
    }
    return true;
  }

  void MarkDead(const std::string& node_id, const std::string& reason) {
    auto it = nodes_.find(node_id);
    if (it == nodes_.end() || !it->second.info.alive()) return;
    it->second.info.set_alive(false);
    it->second.info.set_death_reason(reason);
    it->second.info.mutable_available()->clear_amounts();
    ViewChanged(it->second);
    it->second.demands.clear();
    it->second.leases.clear();
    Persist(it->second).IgnoreError();
    if (jobs_ != nullptr) jobs_->NodeDied(node_id, reason);
    SHOAL_LOG(WARNING) << "node " << node_id << " ("
                       << it->second.info.address() << ") is dead: " << reason;
    // Null only while stopping.
    if (actors_) actors_->OnNodeDead(node_id, reason);
    GroupsLostNode(it->second.info, reason);
  }

  // Groups with bundles on `dead` lost them: each goes back to PENDING
  // (tasks of its lost bundles wait), its other bundles staying where they
  // are with the work in them, and its lost bundles are placed again on
  // the nodes still alive (TryPlaceGroup). Its error names the lost
  // bundles and hosts, and so does the failure of one that cannot be
  // placed again (a TPU slice with a host gone), after the infeasible
  // grace period.
  void GroupsLostNode(const proto::NodeInfo& dead, const std::string& why) {
    bool any = false;
    for (auto& [id, pg] : pgs_) any |= LoseBundles(id, pg, dead, why);
    // Soon, not now: nodes found dead together (a rack, 1% of a cluster)
    // are marked in one pass, and each placement attempt reads every node.
    if (any) RetryPlacementSoon();
  }

  // True when `pg` had bundles on `dead` (now lost, the group pending).
  bool LoseBundles(const std::string& id, PgEntry& pg,
                   const proto::NodeInfo& dead, const std::string& why) {
    const auto state = pg.info.state();
    if (state != proto::PlacementGroupInfo::CREATED &&
        state != proto::PlacementGroupInfo::PENDING) {
      return false;
    }
    std::vector<int> lost;
    for (int i = 0; i < pg.info.bundle_nodes_size(); ++i) {
      if (!dead.node_id().empty() &&
          pg.info.bundle_nodes(i) == dead.node_id()) {
        lost.push_back(i);
        pg.info.set_bundle_nodes(i, "");
      }
    }
    if (lost.empty()) return false;
    if (pg.lost.empty()) {
      pg.lost_why =
          absl::StrCat(dead.node_id(), " at ", dead.address(), ": ", why);
    }
    pg.lost[dead.node_id()].insert(lost.begin(), lost.end());
    pg.info.set_error(
        absl::StrCat(pg.LostText(), "; being placed again on other nodes"));
    if (state == proto::PlacementGroupInfo::CREATED) {
      pg.info.set_state(proto::PlacementGroupInfo::PENDING);
      pg.created_us = MonotonicUs();
      pending_pgs_.push_back(id);
    }
    PersistPg(pg).IgnoreError();
    SHOAL_LOG(WARNING) << "placement group " << id << ": " << pg.info.error();
    return true;
  }

  void ScheduleHealthCheck() {
    // A node silent for the timeout is found dead within 5% more (a pass
    // over 10,000 nodes takes well under a millisecond).
    int64_t period = std::max<int64_t>(50, options_.health_timeout_ms / 20);
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

  absl::Status Persist(const NodeEntry& e) {
    absl::Status st = storage_->Put(kNodesTable, e.info.node_id(),
                                    e.info.SerializeAsString());
    if (!st.ok()) SHOAL_LOG(ERROR) << "cannot store node: " << st;
    return st;
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
      EndJob(it->second,
             "the job's driver ended before the task did (it shut down, "
             "exited, was killed or lost its connection to the head)");
      job_by_conn_.erase(it);
    }
    node_by_conn_.erase(conn);
  }

  // A driver's job is over: what it owns ends with it (detached groups and
  // actors stay), and its tasks that had not ended are FAILED for `why`.
  void EndJob(const std::string& job_id, const std::string& why) {
    task_events_.EndJob(job_id, why, NowMs());
    RemoveGroupsOfJob(job_id);
    if (actors_) actors_->OnJobEnded(job_id);
    gangs_->JobEnded(job_id);
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
      NodeEntry& kept = nodes_[id] = std::move(entry);
      ViewChanged(kept);
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
    actors_->Restore();
    gangs_->Restore();
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
        EndJob(job, absl::StrCat("the job's driver did not come back within ",
                                 options_.reattach_grace_ms,
                                 " ms of the head's restart"));
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
    // One partial file per uploader: drivers of one program may upload it
    // at once (after a takeover, say), and one that finishes first must
    // not leave the others writing into a file it renamed.
    std::string partial =
        absl::StrCat(final_path, ".partial.", resp.connection_id());
    if (access(final_path.c_str(), F_OK) == 0) {
      // Another upload of it finished: what this one sends is not needed.
      if (r.last()) unlink(partial.c_str());
      return resp.Reply(proto::Empty());
    }
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
      // Uploads of it that did not finish (their driver went away, or they
      // are still under way and will find it done) are not needed.
      std::error_code ec;
      const std::string prefix = r.hash() + ".partial.";
      for (const auto& e : std::filesystem::directory_iterator(BlobDir(), ec)) {
        if (absl::StartsWith(e.path().filename().string(), prefix)) {
          std::filesystem::remove(e.path(), ec);
        }
      }
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
  // The cluster view agents hold, in versions: each change of a node's
  // record takes the next one. The epoch is new with each head, so an
  // agent that holds another head's view gets all of it.
  const uint64_t view_epoch_ = RandomU64();
  int64_t view_version_ = 0;
  // view version -> node, for each node its last change: what an agent
  // at version v lacks is upper_bound(v) onwards.
  std::map<int64_t, std::string> view_changes_;
  // View bytes sent in the second since view_bytes_since_us_ (FillView).
  static constexpr size_t kViewPageBytes = 64 << 10;
  static constexpr int64_t kViewBytesPerS = 128 << 20;
  int64_t view_bytes_since_us_ = 0;
  int64_t view_bytes_ = 0;
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
  std::unique_ptr<GangTable> gangs_;
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
