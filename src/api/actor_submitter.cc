#include "api/actor_submitter.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "api/driver_warnings.h"
#include "common/logging.h"
#include "rpc/rpc.h"

namespace shoal::internal {
namespace {

// How long one long poll of the head waits for a change.
constexpr int64_t kPollWaitMs = 30000;
constexpr int64_t kPollRetryMs = 200;

}  // namespace

ActorSubmitter::ActorSubmitter(rpc::Executor* loop, Delegate* delegate)
    : loop_(loop), delegate_(delegate) {}

ActorSubmitter::~ActorSubmitter() { *alive_ = false; }

ActorSubmitter::Actor& ActorSubmitter::Get(const std::string& actor_id) {
  auto [it, added] = actors_.try_emplace(actor_id);
  if (added) {
    it->second.id = actor_id;
    Poll(it->second, /*wait=*/false);
  }
  return it->second;
}

void ActorSubmitter::Add(const std::string& actor_id,
                         const std::string& task_id) {
  Actor& a = Get(actor_id);
  Call call;
  call.task_id = task_id;
  SetRetries(a, call);
  a.waiting.push_back(std::move(call));
  if (a.waiting.size() + a.in_flight.size() > a.warn_above) {
    PublishWarning(
        "excess_queueing_warning",
        absl::StrCat("Warning: More than ", a.warn_above,
                     " tasks are pending submission to actor ", actor_id,
                     ". To reduce memory use, wait for these calls to "
                     "finish before making more."));
    a.warn_above *= 2;
  }
  if (a.dead) {
    // Failed once the runtime has taken the call in (after this returns).
    loop_->Post([this, alive = alive_, actor_id] {
      if (!*alive) return;
      auto it = actors_.find(actor_id);
      if (it != actors_.end()) Pump(it->second);
    });
  }
}

void ActorSubmitter::Ready(const std::string& actor_id,
                           const std::string& task_id) {
  auto it = actors_.find(actor_id);
  if (it == actors_.end()) return;
  for (Call& c : it->second.waiting) {
    if (c.task_id == task_id) c.ready = true;
  }
  Pump(it->second);
}

void ActorSubmitter::Drop(const std::string& actor_id,
                          const std::string& task_id) {
  auto it = actors_.find(actor_id);
  if (it == actors_.end()) return;
  auto& waiting = it->second.waiting;
  auto gone =
      std::remove_if(waiting.begin(), waiting.end(),
                     [&](const Call& c) { return c.task_id == task_id; });
  if (gone == waiting.end()) return;
  waiting.erase(gone, waiting.end());
  Pump(it->second);
}

void ActorSubmitter::Killed(const std::string& actor_id) {
  auto [it, added] = actors_.try_emplace(actor_id);
  Actor& a = it->second;
  if (added) a.id = actor_id;
  if (a.dead) return;
  Die(a, Failure::kActorDied,
      absl::StrCat(Describe(a), " is dead: killed by shoal::Kill"));
}

void ActorSubmitter::Shutdown() {
  *alive_ = false;
  alive_ = std::make_shared<bool>(false);
  actors_.clear();
}

size_t ActorSubmitter::Outstanding(const std::string& actor_id) const {
  auto it = actors_.find(actor_id);
  if (it == actors_.end()) return 0;
  return it->second.waiting.size() + it->second.in_flight.size();
}

void ActorSubmitter::SetRetries(const Actor& a, Call& call) const {
  if (call.retries_known || !a.known) return;
  call.retries_left = a.info.spec().max_task_retries();
  call.retries_known = true;
}

std::string ActorSubmitter::Describe(const Actor& a) const {
  const proto::ActorSpec& spec = a.info.spec();
  std::string name = spec.name().empty() ? a.id : spec.name();
  std::string out = absl::StrCat("actor ", name);
  if (!spec.class_name().empty()) {
    absl::StrAppend(&out, " (", spec.class_name(),
                    spec.name().empty() ? "" : absl::StrCat(", id ", a.id),
                    ")");
  }
  if (!a.info.node_id().empty()) {
    absl::StrAppend(&out, " on node ", a.info.node_id());
  }
  return out;
}

void ActorSubmitter::Poll(Actor& a, bool wait) {
  if (a.polling) return;
  a.polling = true;
  proto::GetActorRequest req;
  req.set_actor_id(a.id);
  if (wait) {
    req.set_after_version(a.info.version());
    req.set_wait_ms(kPollWaitMs);
  }
  delegate_->GetActor(req, [this, alive = alive_,
                            id = a.id](absl::StatusOr<proto::ActorInfo> info) {
    if (!*alive) return;
    OnInfo(id, std::move(info));
  });
}

void ActorSubmitter::OnInfo(const std::string& actor_id,
                            absl::StatusOr<proto::ActorInfo> info) {
  auto it = actors_.find(actor_id);
  if (it == actors_.end()) return;
  Actor& a = it->second;
  a.polling = false;
  if (a.dead) return;  // killed here meanwhile
  if (!info.ok()) {
    if (absl::IsNotFound(info.status())) {
      a.known = true;
      Die(a, Failure::kActorDied,
          absl::StrCat("no actor ", actor_id,
                       " exists on this cluster (it was made in another "
                       "cluster, or the head forgot it)"));
      return;
    }
    SHOAL_LOG(WARNING) << "cannot ask the head about actor " << actor_id << ": "
                       << info.status() << "; asking again";
    loop_->RunAfter(kPollRetryMs, [this, alive = alive_, actor_id] {
      if (!*alive) return;
      auto again = actors_.find(actor_id);
      if (again != actors_.end()) Poll(again->second, again->second.known);
    });
    return;
  }
  bool address_changed = a.info.address() != info->address();
  a.info = std::move(*info);
  a.known = true;
  for (Call& c : a.waiting) SetRetries(a, c);
  for (Call& c : a.in_flight) SetRetries(a, c);
  switch (a.info.state()) {
    case proto::ActorInfo::ALIVE: {
      if (a.channel != nullptr && !a.lost_connection && !address_changed) {
        break;
      }
      DropChannel(a);
      Connect(a);
      if (a.lost_connection) {
        // The incarnation those calls went to is gone: send again the ones
        // with retries left, in order, ahead of the waiting ones.
        a.lost_connection = false;
        std::deque<Call> lost = std::move(a.in_flight);
        a.in_flight.clear();
        std::deque<Call> again;
        for (Call& c : lost) {
          if (c.unsent) {
            c.unsent = false;
            again.push_back(std::move(c));
            continue;
          }
          if (c.retries_left == 0) {
            delegate_->CallFailed(
                c.task_id, Failure::kActorDied,
                absl::StrCat(Describe(a), ": its process died (",
                             a.info.death_cause(),
                             ") while this call ran; the actor was "
                             "restarted, but the call has no retries left "
                             "(SetMaxTaskRetries)"));
            continue;
          }
          if (c.retries_left > 0) --c.retries_left;
          c.ready = true;
          again.push_back(std::move(c));
        }
        for (auto r = again.rbegin(); r != again.rend(); ++r) {
          a.waiting.push_front(std::move(*r));
        }
      }
      break;
    }
    case proto::ActorInfo::PENDING:
    case proto::ActorInfo::RESTARTING:
      Poll(a, /*wait=*/true);
      return;
    case proto::ActorInfo::DEAD:
    default:
      Die(a, a.info.infeasible() ? Failure::kInfeasible : Failure::kActorDied,
          absl::StrCat(Describe(a), " is dead: ", a.info.death_cause()));
      return;
  }
  Pump(a);
}

void ActorSubmitter::Pump(Actor& a) {
  if (a.dead) return FailAll(a);
  if (!a.known || a.channel == nullptr || a.lost_connection ||
      a.info.state() != proto::ActorInfo::ALIVE) {
    return;
  }
  while (!a.waiting.empty() && a.waiting.front().ready) {
    Call c = std::move(a.waiting.front());
    a.waiting.pop_front();
    Send(a, std::move(c));
  }
}

void ActorSubmitter::Send(Actor& a, Call call) {
  proto::TaskSpec spec;
  if (!delegate_->BuildCall(call.task_id, a.info.node_id(), &spec)) return;
  spec.set_actor_id(a.id);
  std::string task_id = call.task_id;
  SHOAL_LOG(DEBUG) << "actor " << a.id << ": sending " << task_id
                   << " generation " << a.generation;
  a.in_flight.push_back(std::move(call));
  a.channel->Call(proto::PUSH_TASK, spec.SerializeAsString(),
                  [this, alive = alive_, id = a.id, generation = a.generation,
                   task_id](absl::StatusOr<std::string> reply) {
                    if (!*alive) return;
                    OnReply(id, generation, task_id, std::move(reply));
                  });
}

void ActorSubmitter::OnReply(const std::string& actor_id, uint64_t generation,
                             const std::string& task_id,
                             absl::StatusOr<std::string> reply) {
  auto it = actors_.find(actor_id);
  if (it == actors_.end()) return;
  Actor& a = it->second;
  if (!reply.ok() && rpc::NeverSent(reply.status())) {
    for (Call& c : a.in_flight) {
      if (c.task_id == task_id) c.unsent = true;
    }
  }
  if (generation != a.generation) return;  // settled when it was lost
  if (!reply.ok() && absl::IsUnavailable(reply.status())) {
    return OnConnectionLost(a);
  }
  auto pos = std::find_if(a.in_flight.begin(), a.in_flight.end(),
                          [&](const Call& c) { return c.task_id == task_id; });
  if (pos == a.in_flight.end()) return;
  a.in_flight.erase(pos);
  if (!reply.ok()) {
    delegate_->CallFailed(task_id, Failure::kActorDied,
                          absl::StrCat("call to ", Describe(a),
                                       " failed: ", reply.status().message()));
    return;
  }
  proto::TaskResult result;
  if (!result.ParseFromString(*reply)) {
    delegate_->CallFailed(task_id, Failure::kActorDied,
                          absl::StrCat("malformed answer from ", Describe(a)));
    return;
  }
  if (result.error_type() == "shoal::ActorExited" ||
      result.error_type() == "shoal::ActorDied") {
    delegate_->CallFailed(task_id, Failure::kActorDied,
                          absl::StrCat(Describe(a), ": ", result.error()));
    return;
  }
  delegate_->CallReplied(task_id, a.info.node_id(), std::move(result));
}

void ActorSubmitter::Connect(Actor& a) {
  a.channel = delegate_->ConnectTo(a.info.address());
  uint64_t generation = ++a.generation;
  // The actor's process may die while no call is in flight: the next call
  // then waits for the head's word instead of going to a dead address.
  a.channel->OnDisconnect(
      [this, alive = alive_, id = a.id, generation](const absl::Status&) {
        if (!*alive) return;
        auto it = actors_.find(id);
        if (it == actors_.end() || it->second.generation != generation) return;
        OnConnectionLost(it->second);
      });
}

void ActorSubmitter::OnConnectionLost(Actor& a) {
  SHOAL_LOG(DEBUG) << "actor " << a.id << ": connection lost ("
                   << a.in_flight.size() << " calls in flight)";
  if (a.lost_connection) return;
  a.lost_connection = true;
  DropChannel(a);
  ++a.generation;
  Poll(a, /*wait=*/true);
}

void ActorSubmitter::DropChannel(Actor& a) {
  if (a.channel == nullptr) return;
  std::shared_ptr<rpc::Channel> old = std::move(a.channel);
  loop_->Post([old] {});
}

void ActorSubmitter::Die(Actor& a, Failure failure, std::string message) {
  a.dead = true;
  a.failure = failure;
  a.death = std::move(message);
  DropChannel(a);
  FailAll(a);
}

void ActorSubmitter::FailAll(Actor& a) {
  std::deque<Call> calls = std::move(a.in_flight);
  a.in_flight.clear();
  for (Call& c : a.waiting) calls.push_back(std::move(c));
  a.waiting.clear();
  for (const Call& c : calls)
    delegate_->CallFailed(c.task_id, a.failure, a.death);
}

}  // namespace shoal::internal
