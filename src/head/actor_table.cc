#include "head/actor_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/utf8.h"

namespace shoal {

ActorTable::ActorTable(size_t max_dead_actors)
    : max_dead_actors_(std::max<size_t>(1, max_dead_actors)) {}

absl::StatusOr<ActorAction> ActorTable::Create(const proto::ActorSpec& spec,
                                               int64_t now_us) {
  if (spec.actor_id().empty()) {
    return absl::InvalidArgumentError(
        "an actor needs an id chosen by its creator (ActorSpec.actor_id)");
  }
  if (spec.factory().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "actor ", spec.actor_id(),
        " names no factory; register one with SHOAL_REMOTE and create the "
        "actor with shoal::Actor(factory)"));
  }
  if (spec.max_restarts() < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_restarts of actor ", spec.actor_id(), " is ", spec.max_restarts(),
        "; use -1 for no limit, or a count >= 0"));
  }
  if (actors_.count(spec.actor_id())) return ActorAction{spec.actor_id()};
  if (!spec.name().empty()) {
    auto held = live_names_.find(spec.name());
    if (held != live_names_.end()) {
      const proto::ActorInfo& other = actors_.at(held->second).info;
      return absl::AlreadyExistsError(absl::StrCat(
          "a live actor named \"", spec.name(), "\" exists already (actor ",
          other.spec().actor_id(),
          other.spec().class_name().empty()
              ? ""
              : absl::StrCat(", class ", other.spec().class_name()),
          ", ", proto::ActorInfo::State_Name(other.state()),
          "); pick another name, or GetActor(\"", spec.name(),
          "\") to use that one"));
    }
    live_names_[spec.name()] = spec.actor_id();
  }
  Entry& e = actors_[spec.actor_id()];
  *e.info.mutable_spec() = spec;
  e.info.set_state(proto::ActorInfo::PENDING);
  e.info.set_version(1);
  e.created_us = now_us;
  ActorAction action{spec.actor_id()};
  action.changed = true;
  // One whose arguments are still coming is placed once they are here.
  action.lease_worker = !spec.args_pending();
  return action;
}

absl::StatusOr<ActorAction> ActorTable::ArgsReady(
    const proto::ActorArgs& args) {
  Entry* e = Mutable(args.actor_id());
  if (e == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("no actor ", args.actor_id(), " waits for its arguments"));
  }
  // Dead meanwhile (killed, its owner ended), or told already: nothing to do.
  if (e->info.state() == proto::ActorInfo::DEAD ||
      !e->info.spec().args_pending()) {
    return ActorAction{args.actor_id()};
  }
  if (!args.failed().empty()) {
    return Die(
        *e,
        absl::StrCat("an argument of its constructor failed: ", args.failed()),
        false);
  }
  proto::ActorSpec* spec = e->info.mutable_spec();
  spec->set_args_pending(false);
  *spec->mutable_args() = args.args();
  *spec->mutable_stored_args() = args.stored_args();
  ActorAction action{args.actor_id()};
  action.lease_worker = true;
  Bump(*e, action);
  return action;
}

bool ActorTable::Restore(const proto::ActorInfo& info, int64_t now_us) {
  const std::string& id = info.spec().actor_id();
  if (id.empty() || actors_.count(id)) return false;
  const std::string& name = info.spec().name();
  const bool live = info.state() != proto::ActorInfo::DEAD;
  if (live && !name.empty()) {
    if (!live_names_.emplace(name, id).second) return false;
  }
  Entry& e = actors_[id];
  e.info = info;
  e.info.clear_lease_id();
  e.info.clear_age_ms();
  e.created_us = now_us - info.age_ms() * 1000;
  if (!live) {
    dead_order_.push_back(id);
    ForgetOldDead();
  }
  return true;
}

ActorAction ActorTable::Placed(const std::string& actor_id,
                               const ActorPlacement& placement) {
  ActorAction action{actor_id};
  Entry* e = Mutable(actor_id);
  if (e == nullptr || e->info.state() == proto::ActorInfo::DEAD) {
    action.release_worker = true;
    return action;
  }
  if (e->info.state() == proto::ActorInfo::ALIVE) return action;
  e->info.set_state(proto::ActorInfo::ALIVE);
  e->info.set_worker_id(placement.worker_id);
  e->info.set_address(placement.address);
  e->info.set_node_id(placement.node_id);
  e->info.set_pid(placement.pid);
  Bump(*e, action);
  return action;
}

ActorAction ActorTable::WorkerDied(const std::string& actor_id,
                                   const std::string& cause) {
  Entry* e = Mutable(actor_id);
  if (e == nullptr || e->info.state() == proto::ActorInfo::DEAD) {
    return ActorAction{actor_id};
  }
  return Lose(*e, cause, /*killed=*/false);
}

absl::StatusOr<ActorAction> ActorTable::Kill(const std::string& actor_id,
                                             bool no_restart) {
  Entry* e = Mutable(actor_id);
  if (e == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("no actor ", actor_id, " (a dead actor is forgotten once ",
                     max_dead_actors_, " others have died after it)"));
  }
  switch (e->info.state()) {
    case proto::ActorInfo::DEAD:
      return ActorAction{actor_id};
    case proto::ActorInfo::ALIVE:
      if (no_restart) return Die(*e, "killed by shoal::Kill", false);
      return Lose(*e, "killed by shoal::Kill", /*killed=*/true);
    default: {
      if (no_restart) return Die(*e, "killed by shoal::Kill", false);
      // Not running yet, so no process to end: as in Ray, the kill still
      // takes one of its restarts (its placement goes on as that
      // restart), and with none left it dies.
      const int32_t max = e->info.spec().max_restarts();
      if (max != -1 && e->info.num_restarts() >= max) {
        return Die(*e,
                   absl::StrCat("killed by shoal::Kill before it ran, and its "
                                "restarts are used up (max_restarts=",
                                max, ")"),
                   false);
      }
      ActorAction action{actor_id};
      e->info.set_num_restarts(e->info.num_restarts() + 1);
      Bump(*e, action);
      return action;
    }
  }
}

absl::StatusOr<ActorAction> ActorTable::Exiting(const std::string& actor_id,
                                                const std::string& worker_id) {
  Entry* e = Mutable(actor_id);
  if (e == nullptr) {
    return absl::NotFoundError(absl::StrCat("no actor ", actor_id));
  }
  if (e->info.state() == proto::ActorInfo::DEAD ||
      (!worker_id.empty() && worker_id != e->info.worker_id())) {
    return ActorAction{actor_id};
  }
  return Die(*e, "the actor exited: it called exit_actor() (shoal::ExitActor)",
             false);
}

std::vector<ActorAction> ActorTable::OwnerJobEnded(const std::string& job_id) {
  std::vector<ActorAction> actions;
  for (auto& [id, e] : actors_) {
    if (e.info.state() == proto::ActorInfo::DEAD ||
        e.info.spec().job_id() != job_id) {
      continue;
    }
    if (e.info.spec().args_pending()) {
      // Detached or not: nobody is left to send its arguments.
      actions.push_back(Die(e,
                            absl::StrCat("its owner, ", job_id,
                                         ", ended before the arguments of "
                                         "its constructor were ready"),
                            false));
    } else if (!e.info.spec().detached()) {
      actions.push_back(
          Die(e, absl::StrCat("its owner, ", job_id, ", ended"), false));
    }
  }
  return actions;
}

std::vector<ActorAction> ActorTable::OwnerActorEnded(
    const std::string& owner_id) {
  std::vector<ActorAction> actions;
  if (owner_id.empty()) return actions;
  for (auto& [id, e] : actors_) {
    if (e.info.state() == proto::ActorInfo::DEAD ||
        (e.info.spec().detached() && !e.info.spec().args_pending()) ||
        e.info.spec().owner_actor_id() != owner_id) {
      continue;
    }
    actions.push_back(
        Die(e,
            absl::StrCat("its owner, actor ", owner_id,
                         ", ended (an actor's non-detached actors end with its "
                         "process; create it detached to keep it)"),
            false));
  }
  return actions;
}

std::vector<ActorAction> ActorTable::NodeDied(const std::string& node_id,
                                              const std::string& cause) {
  std::vector<ActorAction> actions;
  for (auto& [id, e] : actors_) {
    if (e.info.state() == proto::ActorInfo::ALIVE &&
        e.info.node_id() == node_id) {
      actions.push_back(Lose(e, cause, /*killed=*/false));
    }
  }
  return actions;
}

ActorAction ActorTable::ConstructorFailed(const std::string& actor_id,
                                          const std::string& message) {
  Entry* e = Mutable(actor_id);
  if (e == nullptr || e->info.state() == proto::ActorInfo::DEAD) {
    return ActorAction{actor_id};
  }
  return Die(*e, "the constructor raised: " + message, false);
}

ActorAction ActorTable::Infeasible(const std::string& actor_id,
                                   const std::string& message) {
  Entry* e = Mutable(actor_id);
  if (e == nullptr || e->info.state() == proto::ActorInfo::DEAD) {
    return ActorAction{actor_id};
  }
  return Die(*e, message, /*infeasible=*/true);
}

ActorAction ActorTable::CannotStart(const std::string& actor_id,
                                    const std::string& message) {
  Entry* e = Mutable(actor_id);
  if (e == nullptr || e->info.state() == proto::ActorInfo::DEAD) {
    return ActorAction{actor_id};
  }
  return Die(*e, message, false);
}

const proto::ActorInfo* ActorTable::Find(const std::string& actor_id) const {
  const Entry* e = FindEntry(actor_id);
  return e == nullptr ? nullptr : &e->info;
}

const ActorTable::Entry* ActorTable::FindEntry(
    const std::string& actor_id) const {
  auto it = actors_.find(actor_id);
  return it == actors_.end() ? nullptr : &it->second;
}

const proto::ActorInfo* ActorTable::FindByName(const std::string& name) const {
  auto it = live_names_.find(name);
  return it == live_names_.end() ? nullptr : Find(it->second);
}

ActorCounts ActorTable::Counts() const {
  ActorCounts counts;
  for (const auto& [id, e] : actors_) {
    switch (e.info.state()) {
      case proto::ActorInfo::PENDING:
        ++counts.pending;
        break;
      case proto::ActorInfo::ALIVE:
        ++counts.alive;
        break;
      case proto::ActorInfo::RESTARTING:
        ++counts.restarting;
        break;
      default:
        ++counts.dead;
        break;
    }
  }
  return counts;
}

ActorTable::Entry* ActorTable::Mutable(const std::string& actor_id) {
  auto it = actors_.find(actor_id);
  return it == actors_.end() ? nullptr : &it->second;
}

void ActorTable::Bump(Entry& e, ActorAction& action) {
  e.info.set_version(e.info.version() + 1);
  action.changed = true;
}

ActorAction ActorTable::Die(Entry& e, const std::string& cause,
                            bool infeasible) {
  ActorAction action{e.info.spec().actor_id()};
  // Only a worker that exists ends; the node it was on stays in the info
  // for messages ("... on node n2").
  action.release_worker = true;
  e.info.set_state(proto::ActorInfo::DEAD);
  e.info.set_death_cause(ToValidUtf8(cause));
  e.info.set_infeasible(infeasible);
  e.info.clear_address();
  e.info.clear_pid();
  Bump(e, action);
  const std::string& name = e.info.spec().name();
  if (auto it = live_names_.find(name);
      !name.empty() && it != live_names_.end() &&
      it->second == e.info.spec().actor_id()) {
    live_names_.erase(it);
  }
  dead_order_.push_back(e.info.spec().actor_id());
  // Never the actor that just died: at least one dead actor is kept.
  ForgetOldDead();
  return action;
}

ActorAction ActorTable::Lose(Entry& e, const std::string& cause, bool killed) {
  int32_t max = e.info.spec().max_restarts();
  if (max == -1 || e.info.num_restarts() < max) {
    ActorAction action{e.info.spec().actor_id()};
    action.release_worker = killed;
    action.lease_worker = true;
    e.info.set_state(proto::ActorInfo::RESTARTING);
    e.info.set_num_restarts(e.info.num_restarts() + 1);
    e.info.set_death_cause(ToValidUtf8(cause));
    e.info.clear_address();
    e.info.clear_worker_id();
    e.info.clear_node_id();
    e.info.clear_pid();
    Bump(e, action);
    return action;
  }
  std::string why =
      killed ? cause : absl::StrCat("its process died (", cause, ")");
  ActorAction action =
      Die(e,
          absl::StrCat(why, " and its restarts are used up (max_restarts=", max,
                       ")"),
          false);
  action.release_worker = killed;  // a dead process needs no ending
  return action;
}

bool ActorTable::HasLiveActorOf(const std::string& job_id) const {
  for (const auto& [id, e] : actors_) {
    if (e.info.state() != proto::ActorInfo::DEAD &&
        e.info.spec().job_id() == job_id) {
      return true;
    }
  }
  return false;
}

void ActorTable::ForgetOldDead() {
  while (dead_order_.size() > max_dead_actors_) {
    std::string id = std::move(dead_order_.front());
    dead_order_.pop_front();
    actors_.erase(id);
  }
}

}  // namespace shoal
