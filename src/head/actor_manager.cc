#include "head/actor_manager.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

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

// Logs an actor's new state.
void LogChange(const proto::ActorInfo& info) {
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
}

}  // namespace

namespace {

ActorPlacerOptions PlacerOptions(const ActorManagerOptions& o) {
  ActorPlacerOptions p;
  p.agent_channel = o.agent_channel;
  p.alive_nodes = o.alive_nodes;
  p.retry_ms = o.retry_ms;
  p.max_start_retries = o.max_start_retries;
  p.cancel_timeout_ms = o.worker_exit_timeout_ms;
  p.avoid_unreachable_ms = o.avoid_unreachable_ms;
  p.waiting_check_ms = o.waiting_check_ms;
  return p;
}

}  // namespace

ActorManager::ActorManager(rpc::Executor* loop, ActorManagerOptions options)
    : loop_(loop),
      options_(std::move(options)),
      table_(options_.max_dead_actors),
      placer_(loop, PlacerOptions(options_), &attempts_, this),
      waiters_(loop, [this](const std::string& id, rpc::Responder r) {
        if (const ActorTable::Entry* e = table_.FindEntry(id)) {
          r.Reply(WithAge(*e));
        } else {
          r.Error(absl::NotFoundError(
              absl::StrCat("actor ", id, " died long ago and was forgotten")));
        }
      }) {}

ActorManager::~ActorManager() { *alive_ = false; }

void ActorManager::RegisterHandlers(rpc::HandlerRegistry* server) {
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
      server, proto::ACTOR_EXITING, [this](const auto& r, rpc::Responder resp) {
        ApplyAndAnswer(table_.Exiting(r.actor_id(), r.worker_id()), resp);
      });
  rpc::RegisterProto<proto::ActorArgs>(
      server, proto::ACTOR_ARGS, [this](const auto& r, rpc::Responder resp) {
        ApplyAndAnswer(table_.ArgsReady(r), resp);
      });
}

// ---- Requests ----

void ActorManager::Create(const proto::ActorSpec& spec, rpc::Responder resp) {
  absl::StatusOr<ActorAction> action = table_.Create(spec, loop_->NowUs());
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
  waiters_.Wait(e->info.spec().actor_id(), r.wait_ms(), std::move(resp));
}

void ActorManager::Kill(const proto::KillActorRequest& r, rpc::Responder resp) {
  absl::StatusOr<ActorAction> action =
      table_.Kill(r.actor_id(), r.no_restart());
  if (action.ok() && action->changed) {
    SHOAL_LOG(INFO) << "actor " << r.actor_id() << " killed by " << resp.peer()
                    << (r.no_restart() ? "" : " (restarting if it may)");
  }
  ApplyAndAnswer(action, resp);
}

void ActorManager::ApplyAndAnswer(const absl::StatusOr<ActorAction>& action,
                                  rpc::Responder resp) {
  if (!action.ok()) return resp.Error(action.status());
  Apply(*action);  // kept before it is acknowledged
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
  attempts_.OnNode(node_id, &lost, &moved);
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
  if (e->info.state() == proto::ActorInfo::ALIVE && attempts_.Has(actor_id)) {
    kept.set_lease_id(attempts_.LeaseOf(actor_id));
  }
  return options_.storage->Put(kActorsTable, actor_id,
                               kept.SerializeAsString());
}

void ActorManager::Restore() {
  if (options_.storage == nullptr) return;
  const int64_t now = loop_->NowUs();
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
    } else if (info.state() != proto::ActorInfo::DEAD &&
               !info.spec().args_pending()) {  // else its creator sends them
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
  ActorAttempt& a = attempts_.Get(id);
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
    // A lease being granted is unknown to a placing attempt until the grant
    // arrives; one whose worker is being lost is returned by LoseWorker
    // once its agent says how it ended.
    bool stale = e == nullptr || e->info.state() == proto::ActorInfo::DEAD ||
                 attempts_.HoldsAnotherLease(l.actor_id(), l.lease_id());
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
  if (action.release_worker) {
    if (ActorAttempt* a = attempts_.Find(id)) ReleaseWorker(id, *a);
  }
  const ActorTable::Entry* e = table_.FindEntry(id);
  if (e == nullptr || e->info.state() == proto::ActorInfo::DEAD) {
    if (ActorAttempt* a = attempts_.Find(id)) {
      placer_.WithdrawRequest(id, *a);
      if (a->worker != nullptr) {
        std::shared_ptr<rpc::Channel> channel = std::move(a->worker);
        loop_->Post([channel] {});
      }
      attempts_.Erase(id);
    }
  }
  if (action.lease_worker) StartLease(id);
  if (!action.changed) return;
  if (absl::Status st = kept ? absl::OkStatus() : Persist(id); !st.ok()) {
    SHOAL_LOG(ERROR) << "cannot keep the state of actor " << id << ": " << st;
  }
  if (e == nullptr) return;
  LogChange(e->info);
  waiters_.Wake(id, [&](rpc::Responder r) { r.Reply(WithAge(*e)); });
  if (e->info.state() == proto::ActorInfo::DEAD ||
      e->info.state() == proto::ActorInfo::RESTARTING) {
    // Its process ended: so do the actors it owns.
    for (const ActorAction& owned : table_.OwnerActorEnded(id)) {
      Apply(owned, kept);
    }
  }
  if (e->info.state() == proto::ActorInfo::DEAD && options_.on_dead) {
    options_.on_dead(id, e->info.spec().job_id());
  }
}

// ---- Placement ----

void ActorManager::StartLease(const std::string& actor_id) {
  ActorAttempt& a = attempts_.Get(actor_id);
  placer_.WithdrawRequest(actor_id, a);
  a.request_out = false;
  ForgetWorker(a, /*return_lease=*/true);
  a.placing = true;
  placer_.Place(actor_id, a.number);
}

const proto::ActorSpec* ActorManager::SpecOf(const std::string& actor_id) {
  const ActorTable::Entry* e = table_.FindEntry(actor_id);
  return e == nullptr ? nullptr : &e->info.spec();
}

void ActorManager::CannotPlace(const std::string& actor_id, bool infeasible,
                               const std::string& why) {
  Apply(infeasible ? table_.Infeasible(actor_id, why)
                   : table_.CannotStart(actor_id, why));
}

void ActorManager::Granted(const std::string& actor_id, uint64_t attempt,
                           const std::string& agent, const std::string& node_id,
                           const proto::RequestLeaseReply& reply) {
  const ActorTable::Entry* e = table_.FindEntry(actor_id);
  ActorAttempt* a = attempts_.Find(actor_id, attempt);
  if (e == nullptr || a == nullptr) return ReturnLease(agent, reply.lease_id());
  a->placing = false;
  a->agent = agent;
  a->node_id = reply.node_id().empty() ? node_id : reply.node_id();
  a->lease_id = reply.lease_id();
  a->worker_id = reply.worker_id();
  a->worker_address = reply.worker_address();
  a->worker_pid = reply.worker_pid();
  WatchWorker(actor_id, *a);
  std::weak_ptr<bool> alive = alive_;
  proto::ActorCreation creation;
  *creation.mutable_spec() = e->info.spec();
  creation.set_num_restarts(e->info.num_restarts());
  rpc::CallProto<proto::TaskResult>(
      a->worker.get(), proto::CREATE_ACTOR_INSTANCE, creation,
      [this, alive, actor_id, attempt](absl::StatusOr<proto::TaskResult> r) {
        if (alive.expired()) return;
        OnInstance(actor_id, attempt, r);
      });
}

void ActorManager::WatchWorker(const std::string& actor_id, ActorAttempt& a) {
  a.worker = options_.worker_channels->Connect(a.worker_address);
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
  ActorAttempt* a = attempts_.Find(actor_id, attempt);
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

// ---- Workers ----

void ActorManager::LoseWorker(const std::string& actor_id, uint64_t attempt,
                              const absl::Status& why) {
  ActorAttempt* a = attempts_.Find(actor_id, attempt);
  if (a == nullptr) return;
  std::string agent = a->agent;
  std::string node_id = a->node_id;
  std::string lease_id = a->lease_id;
  std::string worker_id = a->worker_id;
  // Later news of this worker (its channel failing its calls, then its
  // disconnect) is stale from here on.
  ForgetWorker(*a, /*return_lease=*/false);
  uint64_t now = a->number;
  auto finish = [this, actor_id, now](const std::string& cause) {
    if (attempts_.Find(actor_id, now) == nullptr) return;  // killed meanwhile
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
          placer_.NoteUnreachable(agent);
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

void ActorManager::ReleaseWorker(const std::string& actor_id, ActorAttempt& a) {
  placer_.WithdrawRequest(actor_id, a);
  a.request_out = false;
  ForgetWorker(a, /*return_lease=*/true);
  a.placing = false;
}

void ActorManager::ForgetWorker(ActorAttempt& a, bool return_lease) {
  std::pair<std::string, std::string> lease;
  // Shared only because a posted closure must be copyable.
  std::shared_ptr<rpc::Channel> channel =
      ActorAttempts::ForgetWorker(a, &lease);
  if (return_lease) ReturnLease(lease.first, lease.second);
  if (channel != nullptr) loop_->Post([channel] {});
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

proto::ActorInfo ActorManager::WithAge(const ActorTable::Entry& e) const {
  proto::ActorInfo info = e.info;
  info.set_age_ms((loop_->NowUs() - e.created_us) / 1000);
  return info;
}

}  // namespace shoal
