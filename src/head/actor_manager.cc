#include "head/actor_manager.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/util.h"

namespace shoal {
namespace {

constexpr char kActorsTable[] = "actors";

// "actor 3fa2b1 ("counter", Counter)" for the head's log.
std::string Describe(const proto::ActorSpec& spec) {
  std::string extra;
  if (!spec.name().empty()) extra = absl::StrCat("\"", spec.name(), "\"");
  if (!spec.class_name().empty()) {
    absl::StrAppend(&extra, extra.empty() ? "" : ", ", spec.class_name());
  }
  return absl::StrCat("actor ", spec.actor_id(),
                      extra.empty() ? "" : absl::StrCat(" (", extra, ")"));
}

}  // namespace

std::optional<size_t> ChooseActorNode(const ResourceSet& shape,
                                      const std::vector<ActorNode>& nodes) {
  auto better = [&](size_t i, size_t j) {
    int64_t cpu_i = nodes[i].available.Get("CPU");
    int64_t cpu_j = nodes[j].available.Get("CPU");
    if (cpu_i != cpu_j) return cpu_i > cpu_j;
    return nodes[i].num_actors < nodes[j].num_actors;
  };
  auto best_of = [&](auto fits) {
    std::optional<size_t> best;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (fits(nodes[i]) && (!best || better(i, *best))) best = i;
    }
    return best;
  };
  if (auto b = best_of(
          [&](const ActorNode& n) { return n.available.Contains(shape); })) {
    return b;
  }
  if (auto b = best_of(
          [&](const ActorNode& n) { return n.total.Contains(shape); })) {
    return b;
  }
  std::optional<size_t> fewest;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!fewest || nodes[i].num_actors < nodes[*fewest].num_actors) fewest = i;
  }
  return fewest;
}

ActorManager::ActorManager(rpc::EventLoop* loop, ActorManagerOptions options)
    : loop_(loop),
      options_(std::move(options)),
      table_(options_.max_dead_actors) {}

ActorManager::~ActorManager() {
  *alive_ = false;
  for (auto& [id, waiters] : waiters_) {
    for (auto& [wid, w] : waiters) loop_->CancelTimer(w.timer);
  }
}

void ActorManager::RegisterHandlers(rpc::Server* server) {
  rpc::RegisterProto<proto::ActorSpec>(
      server, proto::CREATE_ACTOR,
      [this](const auto& r, rpc::Responder resp) { Create(r, resp); });
  rpc::RegisterProto<proto::GetActorRequest>(
      server, proto::GET_ACTOR,
      [this](const auto& r, rpc::Responder resp) { Get(r, resp); });
  rpc::RegisterProto<proto::KillActorRequest>(
      server, proto::KILL_ACTOR,
      [this](const auto& r, rpc::Responder resp) { Kill(r, resp); });
  rpc::RegisterProto<proto::ActorExitingRequest>(
      server, proto::ACTOR_EXITING,
      [this](const auto& r, rpc::Responder resp) { Exiting(r, resp); });
}

// ---- Requests ----

void ActorManager::Create(const proto::ActorSpec& spec, rpc::Responder resp) {
  absl::StatusOr<ActorAction> action = table_.Create(spec, MonotonicUs());
  if (!action.ok()) return resp.Error(action.status());
  // Kept before it is acknowledged: a head that restarts knows it.
  if (absl::Status st = Persist(spec.actor_id()); !st.ok()) {
    resp.Error(absl::UnavailableError(absl::StrCat(
        "the head cannot keep actor ", spec.actor_id(), ": ", st.message())));
    return Apply(
        table_.CannotStart(spec.actor_id(), "the head could not keep it"));
  }
  resp.Reply(WithAge(*table_.FindEntry(spec.actor_id())));
  if (action->changed) {
    SHOAL_LOG(INFO) << Describe(spec) << " created by "
                    << (spec.job_id().empty() ? "no job" : spec.job_id())
                    << (spec.detached() ? " (detached)" : "");
  }
  Apply(*action, /*kept=*/true);
}

void ActorManager::Get(const proto::GetActorRequest& r, rpc::Responder resp) {
  const ActorTable::Entry* e = nullptr;
  if (!r.actor_id().empty()) {
    e = table_.FindEntry(r.actor_id());
    if (e == nullptr) {
      return resp.Error(absl::NotFoundError(absl::StrCat(
          "no actor ", r.actor_id(),
          ": the head never had it, or it died long ago (the head keeps the "
          "last ",
          options_.max_dead_actors, " dead actors)")));
    }
  } else if (!r.name().empty()) {
    if (const proto::ActorInfo* info = table_.FindByName(r.name())) {
      e = table_.FindEntry(info->spec().actor_id());
    }
    if (e == nullptr) {
      return resp.Error(absl::NotFoundError(absl::StrCat(
          "no live actor is named \"", r.name(),
          "\"; create it with shoal::Actor(factory).SetName(\"", r.name(),
          "\"), or check the name (`shoal status --verbose` lists actors)")));
    }
  } else {
    return resp.Error(absl::InvalidArgumentError(
        "GET_ACTOR needs an actor id or an actor name"));
  }
  // A dead actor never changes again: no point waiting.
  if (r.wait_ms() <= 0 || e->info.version() > r.after_version() ||
      e->info.state() == proto::ActorInfo::DEAD) {
    return resp.Reply(WithAge(*e));
  }
  // Long poll: answered on the actor's next change, or after wait_ms.
  std::string id = e->info.spec().actor_id();
  uint64_t wid = next_waiter_++;
  Waiter& w = waiters_[id][wid];
  w.responder = std::move(resp);
  std::weak_ptr<bool> alive = alive_;
  w.timer = loop_->RunAfter(r.wait_ms(), [this, alive, id, wid] {
    if (alive.expired()) return;
    auto actor = waiters_.find(id);
    if (actor == waiters_.end()) return;
    auto it = actor->second.find(wid);
    if (it == actor->second.end()) return;
    rpc::Responder responder = std::move(it->second.responder);
    actor->second.erase(it);
    if (actor->second.empty()) waiters_.erase(actor);
    if (const ActorTable::Entry* e = table_.FindEntry(id)) {
      responder.Reply(WithAge(*e));
    } else {
      responder.Error(absl::NotFoundError(
          absl::StrCat("actor ", id, " died long ago and was forgotten")));
    }
  });
}

void ActorManager::Kill(const proto::KillActorRequest& r, rpc::Responder resp) {
  absl::StatusOr<ActorAction> action =
      table_.Kill(r.actor_id(), r.no_restart());
  if (!action.ok()) return resp.Error(action.status());
  if (action->changed) {
    SHOAL_LOG(INFO) << "actor " << r.actor_id() << " killed by " << resp.peer()
                    << (r.no_restart() ? "" : " (restarting if it may)");
  }
  Apply(*action);
  resp.Reply(proto::Empty());
}

void ActorManager::Exiting(const proto::ActorExitingRequest& r,
                           rpc::Responder resp) {
  absl::StatusOr<ActorAction> action =
      table_.Exiting(r.actor_id(), r.worker_id());
  if (!action.ok()) return resp.Error(action.status());
  Apply(*action);
  resp.Reply(proto::Empty());
}

void ActorManager::OnJobEnded(const std::string& job_id) {
  for (const ActorAction& action : table_.OwnerJobEnded(job_id)) {
    Apply(action);
  }
}

void ActorManager::OnNodeDead(const std::string& node_id,
                              const std::string& reason) {
  dead_nodes_[node_id] = reason;
  std::vector<std::pair<std::string, uint64_t>> lost;
  std::vector<std::string> moved;
  for (const auto& [id, a] : attempts_) {
    if (a.node_id != node_id) continue;
    if (!a.lease_id.empty()) {
      lost.emplace_back(id, a.number);
    } else if (a.placing) {
      moved.push_back(id);
    }
  }
  for (const auto& [id, attempt] : lost) {
    LoseWorker(id, attempt,
               absl::UnavailableError(
                   absl::StrCat("node ", node_id, " died: ", reason)));
  }
  // A lease request waiting at the dead node: ask elsewhere (a late grant
  // from there is returned, its worker killed).
  for (const auto& id : moved) StartLease(id);
}

// ---- Restart ----

absl::Status ActorManager::Persist(const std::string& actor_id) {
  if (options_.storage == nullptr) return absl::OkStatus();
  const ActorTable::Entry* e = table_.FindEntry(actor_id);
  if (e == nullptr || e->info.state() == proto::ActorInfo::DEAD) {
    return options_.storage->Delete(kActorsTable, actor_id);
  }
  proto::ActorInfo kept = WithAge(*e);
  if (auto a = attempts_.find(actor_id);
      a != attempts_.end() && e->info.state() == proto::ActorInfo::ALIVE) {
    kept.set_lease_id(a->second.lease_id);
  }
  return options_.storage->Put(kActorsTable, actor_id,
                               kept.SerializeAsString());
}

void ActorManager::Restore() {
  if (options_.storage == nullptr) return;
  const int64_t now = MonotonicUs();
  size_t alive = 0, placing = 0;
  for (const auto& [id, bytes] : options_.storage->Scan(kActorsTable)) {
    proto::ActorInfo info;
    if (!info.ParseFromString(bytes) || !table_.Restore(info, now)) {
      SHOAL_LOG(WARNING) << "ignoring the kept record of actor " << id
                         << ": it does not parse or its name is taken";
      continue;
    }
    if (info.state() == proto::ActorInfo::ALIVE) {
      Adopt(info, info.lease_id());
      ++alive;
    } else if (info.state() != proto::ActorInfo::DEAD) {
      StartLease(id);
      ++placing;
    }
  }
  if (alive + placing > 0) {
    SHOAL_LOG(INFO) << "taking up " << alive << " live actor(s); placing "
                    << placing << " pending or restarting one(s) again";
  }
}

void ActorManager::Adopt(const proto::ActorInfo& info,
                         const std::string& lease_id) {
  const std::string& id = info.spec().actor_id();
  Attempt& a = attempts_[id];
  ++a.number;
  a.node_id = info.node_id();
  a.lease_id = lease_id;
  a.worker_id = info.worker_id();
  a.worker_address = info.address();
  a.worker_pid = info.pid();
  for (const ActorNode& n : options_.alive_nodes()) {
    if (n.node_id == a.node_id) a.agent = n.address;
  }
  if (a.agent.empty()) {
    // Its node is not among the alive ones: the worker went with it.
    return LoseWorker(id, a.number,
                      absl::UnavailableError(
                          absl::StrCat("its node ", a.node_id, " is gone")));
  }
  WatchWorker(id, a);
  proto::ActorExitingRequest req;
  req.set_actor_id(id);
  req.set_worker_id(a.worker_id);
  uint64_t attempt = a.number;
  std::weak_ptr<bool> alive = alive_;
  rpc::CallProto<proto::Empty>(
      a.worker.get(), proto::ADOPT_ACTOR, req,
      [this, alive, id, attempt](absl::StatusOr<proto::Empty> r) {
        if (alive.expired()) return;
        if (r.ok()) {
          SHOAL_LOG(INFO) << "actor " << id << " taken up again";
          return;
        }
        LoseWorker(id, attempt, r.status());
      },
      options_.worker_exit_timeout_ms);
}

void ActorManager::OnNodeLeases(
    const std::string& agent,
    const google::protobuf::RepeatedPtrField<proto::LeaseInfo>& leases) {
  for (const proto::LeaseInfo& l : leases) {
    if (l.actor_id().empty() || returning_.count(l.lease_id())) continue;
    const ActorTable::Entry* e = table_.FindEntry(l.actor_id());
    bool stale = e == nullptr || e->info.state() == proto::ActorInfo::DEAD;
    if (!stale) {
      // A lease being granted is unknown to a placing attempt until the
      // grant arrives; one whose worker is being lost is returned by
      // LoseWorker once its agent says how it ended.
      auto a = attempts_.find(l.actor_id());
      stale = a != attempts_.end() && !a->second.placing &&
              !a->second.lease_id.empty() && a->second.lease_id != l.lease_id();
    }
    if (!stale) continue;
    SHOAL_LOG(INFO) << "returning lease " << l.lease_id() << " of actor "
                    << l.actor_id() << " at " << agent
                    << ": the actor is no longer in it";
    returning_.insert(l.lease_id());
    ReturnLease(agent, l.lease_id());
  }
}

void ActorManager::AddToStatus(proto::ClusterStatus* status) const {
  for (const auto& [id, e] : table_.entries()) {
    *status->add_actors() = WithAge(e);
  }
}

// ---- Transitions ----

void ActorManager::Apply(const ActorAction& action, bool kept) {
  const std::string& id = action.actor_id;
  if (action.release_worker) ReleaseWorker(id);
  const ActorTable::Entry* e = table_.FindEntry(id);
  if (e == nullptr || e->info.state() == proto::ActorInfo::DEAD) {
    if (auto it = attempts_.find(id); it != attempts_.end()) {
      WithdrawRequest(id, it->second);
      DropChannel(it->second);
      attempts_.erase(it);
    }
  }
  if (action.lease_worker) StartLease(id);
  if (!action.changed) return;
  if (absl::Status st = kept ? absl::OkStatus() : Persist(id); !st.ok()) {
    SHOAL_LOG(ERROR) << "cannot keep the state of actor " << id << ": " << st;
  }
  if (e == nullptr) return;
  const proto::ActorInfo& info = e->info;
  switch (info.state()) {
    case proto::ActorInfo::ALIVE:
      SHOAL_LOG(INFO) << Describe(info.spec()) << " is alive on node "
                      << info.node_id() << " at " << info.address() << " (pid "
                      << info.pid() << ", worker " << info.worker_id()
                      << ", restarts " << info.num_restarts() << ")";
      break;
    case proto::ActorInfo::RESTARTING:
      SHOAL_LOG(WARNING) << Describe(info.spec()) << " is restarting ("
                         << info.num_restarts() << " of "
                         << (info.spec().max_restarts() == -1
                                 ? std::string("unlimited")
                                 : std::to_string(info.spec().max_restarts()))
                         << "): " << info.death_cause();
      break;
    case proto::ActorInfo::DEAD:
      SHOAL_LOG(INFO) << Describe(info.spec())
                      << " is dead: " << info.death_cause();
      break;
    default:
      break;
  }
  WakeWaiters(id);
}

// ---- Placement ----

void ActorManager::StartLease(const std::string& actor_id) {
  Attempt& a = attempts_[actor_id];
  WithdrawRequest(actor_id, a);
  a.request_out = false;
  ++a.number;
  if (!a.lease_id.empty()) ReturnLease(a.agent, a.lease_id);
  DropChannel(a);
  a.lease_id.clear();
  a.worker_id.clear();
  a.worker_address.clear();
  a.worker_pid = 0;
  a.placing = true;
  Place(actor_id, a.number);
}

void ActorManager::Place(const std::string& actor_id, uint64_t attempt) {
  Attempt* a = FindAttempt(actor_id, attempt);
  const ActorTable::Entry* e = table_.FindEntry(actor_id);
  if (a == nullptr || e == nullptr) return;
  a->agent.clear();
  a->node_id.clear();
  std::vector<ActorNode> nodes = CandidateNodes();
  if (!a->withdrawn_from.empty()) {
    std::vector<ActorNode> others;
    for (ActorNode& n : nodes) {
      if (n.node_id != a->withdrawn_from) others.push_back(std::move(n));
    }
    if (!others.empty()) nodes.swap(others);
    a->withdrawn_from.clear();
  }
  std::optional<size_t> pick =
      ChooseActorNode(ResourceSet::FromProto(e->info.spec().shape()), nodes);
  if (!pick) {
    // No node yet: the actor waits, as a task does.
    return RetryPlacement(actor_id, attempt);
  }
  SHOAL_LOG(INFO) << "actor " << actor_id << ": asking node "
                  << nodes[*pick].node_id << " for a worker";
  RequestLease(actor_id, attempt, nodes[*pick].address, nodes[*pick].node_id,
               /*no_spillback=*/false);
}

std::vector<ActorNode> ActorManager::CandidateNodes() const {
  std::vector<ActorNode> nodes = options_.alive_nodes();
  std::vector<ActorNode> reachable;
  int64_t now = MonotonicUs();
  for (const ActorNode& n : nodes) {
    auto failed = unreachable_.find(n.address);
    if (failed == unreachable_.end() ||
        now - failed->second > options_.avoid_unreachable_ms * 1000) {
      reachable.push_back(n);
    }
  }
  if (!reachable.empty()) nodes.swap(reachable);
  std::map<std::string, int64_t> per_node;
  for (const auto& [id, other] : attempts_) {
    if (!other.node_id.empty()) ++per_node[other.node_id];
  }
  for (ActorNode& n : nodes) n.num_actors = per_node[n.node_id];
  return nodes;
}

void ActorManager::CheckWaiting(const std::string& actor_id, uint64_t attempt,
                                uint64_t request) {
  Attempt* a = FindAttempt(actor_id, attempt);
  const ActorTable::Entry* e = table_.FindEntry(actor_id);
  if (a == nullptr || e == nullptr || a->request != request ||
      !a->lease_id.empty()) {
    return;
  }
  ResourceSet shape = ResourceSet::FromProto(e->info.spec().shape());
  bool granted = false;  // its worker is starting there
  std::vector<ActorNode> roomy;
  for (ActorNode& n : CandidateNodes()) {
    if (n.node_id == a->node_id) {
      granted = n.leased_actors.count(actor_id) > 0;
    } else if (n.available.Contains(shape)) {
      roomy.push_back(std::move(n));
    }
  }
  std::optional<size_t> pick = ChooseActorNode(shape, roomy);
  if (granted || !pick) {
    After(options_.waiting_check_ms, [this, actor_id, attempt, request] {
      CheckWaiting(actor_id, attempt, request);
    });
    return;
  }
  // Its CANCELED answer places the actor again (OnLeaseReply). A cancel
  // that comes too late (the node granted or spilled the request meanwhile)
  // changes nothing: that answer is followed as usual.
  SHOAL_LOG(INFO) << "actor " << actor_id << ": still waiting at node "
                  << a->node_id << " while node " << roomy[*pick].node_id
                  << " has room; withdrawing the request";
  a->withdrawn_from = a->node_id;
  WithdrawRequest(actor_id, *a);
}

void ActorManager::WithdrawRequest(const std::string& actor_id,
                                   const Attempt& a) {
  if (!a.request_out || a.agent.empty()) return;
  proto::CancelLease req;
  req.set_request_id(absl::StrCat(actor_id, "/", a.request));
  rpc::CallProto<proto::CancelLeaseReply>(
      options_.agent_channel(a.agent), proto::CANCEL_LEASE_REQUEST, req,
      [](absl::StatusOr<proto::CancelLeaseReply>) {},
      options_.worker_exit_timeout_ms);
}

void ActorManager::RequestLease(const std::string& actor_id, uint64_t attempt,
                                const std::string& agent,
                                const std::string& node_id, bool no_spillback) {
  Attempt* a = FindAttempt(actor_id, attempt);
  const ActorTable::Entry* e = table_.FindEntry(actor_id);
  if (a == nullptr || e == nullptr) return;
  a->agent = agent;
  a->node_id = node_id;
  const proto::ActorSpec& spec = e->info.spec();
  proto::RequestLeaseRequest req;
  req.set_job_id(spec.job_id());
  *req.mutable_shape() = spec.shape();
  req.set_binary_path(spec.binary_path());
  req.set_binary_hash(spec.binary_hash());
  req.set_blob_hash(spec.blob_hash());
  if (spec.has_worker_command()) {
    *req.mutable_worker_command() = spec.worker_command();
  }
  req.set_no_spillback(no_spillback);
  req.set_actor_id(actor_id);
  req.set_depth(spec.depth());
  uint64_t request = ++a->request;
  a->request_out = true;
  req.set_request_id(absl::StrCat(actor_id, "/", request));
  After(options_.waiting_check_ms, [this, actor_id, attempt, request] {
    CheckWaiting(actor_id, attempt, request);
  });
  std::weak_ptr<bool> alive = alive_;
  rpc::CallProto<proto::RequestLeaseReply>(
      options_.agent_channel(agent), proto::REQUEST_LEASE, req,
      [this, alive, actor_id, attempt, agent,
       node_id](absl::StatusOr<proto::RequestLeaseReply> reply) {
        if (alive.expired()) return;
        OnLeaseReply(actor_id, attempt, agent, node_id, reply);
      });
}

void ActorManager::OnLeaseReply(
    const std::string& actor_id, uint64_t attempt, const std::string& agent,
    const std::string& node_id,
    const absl::StatusOr<proto::RequestLeaseReply>& reply) {
  Attempt* a = FindAttempt(actor_id, attempt);
  if (a == nullptr) {
    // The actor died or moved on meanwhile: the worker is nobody's.
    if (reply.ok() && reply->outcome() == proto::RequestLeaseReply::GRANTED) {
      ReturnLease(agent, reply->lease_id());
    }
    return;
  }
  a->request_out = false;
  if (!reply.ok()) {
    if (reply.status().code() == absl::StatusCode::kPermissionDenied) {
      return Apply(table_.CannotStart(
          actor_id, absl::StrCat("the agent at ", agent, " refused the head: ",
                                 reply.status().message())));
    }
    SHOAL_LOG(WARNING) << "lease request for actor " << actor_id << " to "
                       << agent << " failed: " << reply.status()
                       << "; trying again";
    unreachable_[agent] = MonotonicUs();
    return RetryPlacement(actor_id, attempt);
  }
  switch (reply->outcome()) {
    case proto::RequestLeaseReply::GRANTED:
      return OnGranted(actor_id, *a, agent, node_id, *reply);
    case proto::RequestLeaseReply::SPILLBACK:
      SHOAL_LOG(INFO) << "actor " << actor_id << ": node " << node_id
                      << " sent its lease request on to node "
                      << reply->spillback_node_id();
      return RequestLease(actor_id, attempt, reply->spillback_address(),
                          reply->spillback_node_id(), /*no_spillback=*/true);
    case proto::RequestLeaseReply::CANCELED:
      // Withdrawn from a node that kept it waiting (CheckWaiting).
      return Place(actor_id, attempt);
    case proto::RequestLeaseReply::INFEASIBLE:
      return Apply(table_.Infeasible(actor_id, reply->error()));
    case proto::RequestLeaseReply::INVALID:
      return Apply(table_.CannotStart(actor_id, reply->error()));
    default:
      if (++a->failures > options_.max_start_retries) {
        return Apply(table_.CannotStart(
            actor_id,
            absl::StrCat("its worker could not be started (", a->failures,
                         " tries, the last on node ", node_id,
                         "): ", reply->error(),
                         "; see the node's agent log in the session folder")));
      }
      SHOAL_LOG(WARNING) << "actor " << actor_id
                         << ": a worker could not be started on node "
                         << node_id << ": " << reply->error()
                         << "; trying again";
      return RetryPlacement(actor_id, attempt);
  }
}

void ActorManager::OnGranted(const std::string& actor_id, Attempt& a,
                             const std::string& agent,
                             const std::string& node_id,
                             const proto::RequestLeaseReply& reply) {
  const ActorTable::Entry* e = table_.FindEntry(actor_id);
  if (e == nullptr) return ReturnLease(agent, reply.lease_id());
  a.placing = false;
  a.agent = agent;
  a.node_id = reply.node_id().empty() ? node_id : reply.node_id();
  a.lease_id = reply.lease_id();
  a.worker_id = reply.worker_id();
  a.worker_address = reply.worker_address();
  a.worker_pid = reply.worker_pid();
  WatchWorker(actor_id, a);
  uint64_t attempt = a.number;
  std::weak_ptr<bool> alive = alive_;
  proto::ActorCreation creation;
  *creation.mutable_spec() = e->info.spec();
  creation.set_num_restarts(e->info.num_restarts());
  rpc::CallProto<proto::TaskResult>(
      a.worker.get(), proto::CREATE_ACTOR_INSTANCE, creation,
      [this, alive, actor_id, attempt](absl::StatusOr<proto::TaskResult> r) {
        if (alive.expired()) return;
        OnInstance(actor_id, attempt, r);
      });
}

void ActorManager::WatchWorker(const std::string& actor_id, Attempt& a) {
  a.worker = std::make_unique<rpc::Channel>(loop_, a.worker_address,
                                            options_.token, "head");
  uint64_t attempt = a.number;
  std::weak_ptr<bool> alive = alive_;
  a.worker->OnDisconnect(
      [this, alive, actor_id, attempt](const absl::Status& why) {
        if (alive.expired()) return;
        LoseWorker(actor_id, attempt, why);
      });
}

void ActorManager::OnInstance(const std::string& actor_id, uint64_t attempt,
                              const absl::StatusOr<proto::TaskResult>& result) {
  Attempt* a = FindAttempt(actor_id, attempt);
  if (a == nullptr) return;
  if (!result.ok()) return LoseWorker(actor_id, attempt, result.status());
  if (!result->ok()) {
    std::string error = result->error();
    if (!result->error_type().empty()) {
      absl::StrAppend(&error, " (", result->error_type(), ")");
    }
    return Apply(table_.ConstructorFailed(actor_id, error));
  }
  a->failures = 0;
  Apply(table_.Placed(
      actor_id, {a->worker_id, a->worker_address, a->node_id, a->worker_pid}));
}

void ActorManager::RetryPlacement(const std::string& actor_id,
                                  uint64_t attempt) {
  Attempt* a = FindAttempt(actor_id, attempt);
  if (a == nullptr) return;
  a->placing = true;
  After(options_.retry_ms,
        [this, actor_id, attempt] { Place(actor_id, attempt); });
}

// ---- Workers ----

void ActorManager::LoseWorker(const std::string& actor_id, uint64_t attempt,
                              const absl::Status& why) {
  Attempt* a = FindAttempt(actor_id, attempt);
  if (a == nullptr) return;
  // Later news of this worker (its channel failing its calls, then its
  // disconnect) is stale from here on.
  uint64_t now = ++a->number;
  std::string agent = a->agent;
  std::string node_id = a->node_id;
  std::string lease_id = a->lease_id;
  std::string worker_id = a->worker_id;
  DropChannel(*a);
  a->lease_id.clear();
  a->worker_id.clear();
  a->worker_address.clear();
  a->worker_pid = 0;
  auto finish = [this, actor_id, now](const std::string& cause) {
    if (FindAttempt(actor_id, now) == nullptr) return;  // killed meanwhile
    Apply(table_.WorkerDied(actor_id, cause));
  };
  if (agent.empty() || worker_id.empty()) return finish(why.ToString());
  proto::GetWorkerExitRequest req;
  req.set_worker_id(worker_id);
  std::weak_ptr<bool> alive = alive_;
  rpc::CallProto<proto::GetWorkerExitReply>(
      options_.agent_channel(agent), proto::GET_WORKER_EXIT, req,
      [this, alive, finish, agent, node_id, lease_id,
       why](absl::StatusOr<proto::GetWorkerExitReply> exit) {
        if (alive.expired()) return;
        std::string cause;
        if (exit.ok()) {
          cause = exit->exited()
                      ? exit->description()
                      : absl::StrCat(
                            "its connection to the head broke (", why.message(),
                            "); its agent says: ", exit->description());
          // A worker still running must not outlive its incarnation.
          ReturnLease(agent, lease_id);
        } else {
          unreachable_[agent] = MonotonicUs();
          auto dead = dead_nodes_.find(node_id);
          cause = dead != dead_nodes_.end()
                      ? absl::StrCat("its node died (", dead->second, ")")
                      : absl::StrCat(
                            "its node died (its agent at ", agent,
                            " is unreachable: ", exit.status().message(), ")");
        }
        finish(cause);
      },
      options_.worker_exit_timeout_ms);
}

void ActorManager::ReleaseWorker(const std::string& actor_id) {
  auto it = attempts_.find(actor_id);
  if (it == attempts_.end()) return;
  Attempt& a = it->second;
  WithdrawRequest(actor_id, a);
  a.request_out = false;
  ++a.number;
  if (!a.lease_id.empty()) ReturnLease(a.agent, a.lease_id);
  DropChannel(a);
  a.placing = false;
  a.lease_id.clear();
  a.worker_id.clear();
  a.worker_address.clear();
  a.worker_pid = 0;
}

void ActorManager::ReturnLease(const std::string& agent,
                               const std::string& lease_id) {
  if (agent.empty() || lease_id.empty()) return;
  proto::ReturnLeaseRequest req;
  req.set_lease_id(lease_id);
  req.set_kill_worker(true);
  rpc::CallProto<proto::Empty>(
      options_.agent_channel(agent), proto::RETURN_LEASE, req,
      [this, alive = std::weak_ptr<bool>(alive_), agent,
       lease_id](absl::StatusOr<proto::Empty> r) {
        if (!alive.expired()) returning_.erase(lease_id);
        if (!r.ok()) {
          SHOAL_LOG(WARNING) << "cannot return lease " << lease_id << " to "
                             << agent << ": " << r.status();
        }
      },
      options_.worker_exit_timeout_ms);
}

void ActorManager::DropChannel(Attempt& a) {
  if (a.worker == nullptr) return;
  // Shared only because a posted closure must be copyable.
  std::shared_ptr<rpc::Channel> channel = std::move(a.worker);
  loop_->Post([channel] {});
}

ActorManager::Attempt* ActorManager::FindAttempt(const std::string& actor_id,
                                                 uint64_t attempt) {
  auto it = attempts_.find(actor_id);
  if (it == attempts_.end() || it->second.number != attempt) return nullptr;
  return &it->second;
}

// ---- Long polls ----

void ActorManager::WakeWaiters(const std::string& actor_id) {
  auto it = waiters_.find(actor_id);
  if (it == waiters_.end()) return;
  std::map<uint64_t, Waiter> waiters = std::move(it->second);
  waiters_.erase(it);
  const ActorTable::Entry* e = table_.FindEntry(actor_id);
  for (auto& [wid, w] : waiters) {
    loop_->CancelTimer(w.timer);
    if (e != nullptr) w.responder.Reply(WithAge(*e));
  }
}

proto::ActorInfo ActorManager::WithAge(const ActorTable::Entry& e) const {
  proto::ActorInfo info = e.info;
  info.set_age_ms((MonotonicUs() - e.created_us) / 1000);
  return info;
}

void ActorManager::After(int64_t ms, std::function<void()> fn) {
  std::weak_ptr<bool> alive = alive_;
  loop_->RunAfter(ms, [alive, fn = std::move(fn)] {
    if (!alive.expired()) fn();
  });
}

}  // namespace shoal
