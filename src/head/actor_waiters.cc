#include "head/actor_waiters.h"

#include <utility>

namespace shoal {

ActorWaiters::ActorWaiters(rpc::Executor* loop, Expired expired)
    : loop_(loop), expired_(std::move(expired)) {}

ActorWaiters::~ActorWaiters() {
  for (auto& [id, waiters] : waiters_) {
    for (auto& [wid, w] : waiters) loop_->CancelTimer(w.timer);
  }
}

void ActorWaiters::Wait(const std::string& actor_id, int64_t wait_ms,
                        rpc::Responder responder) {
  uint64_t wid = next_waiter_++;
  Waiter& w = waiters_[actor_id][wid];
  w.responder = std::move(responder);
  // Canceled by the destructor: `this` outlives the timer.
  w.timer = loop_->RunAfter(wait_ms,
                            [this, actor_id, wid] { Expire(actor_id, wid); });
}

void ActorWaiters::Expire(const std::string& actor_id, uint64_t waiter) {
  auto actor = waiters_.find(actor_id);
  if (actor == waiters_.end()) return;
  auto it = actor->second.find(waiter);
  if (it == actor->second.end()) return;
  rpc::Responder responder = std::move(it->second.responder);
  actor->second.erase(it);
  if (actor->second.empty()) waiters_.erase(actor);
  expired_(actor_id, std::move(responder));
}

void ActorWaiters::Wake(const std::string& actor_id,
                        const std::function<void(rpc::Responder)>& answer) {
  auto it = waiters_.find(actor_id);
  if (it == waiters_.end()) return;
  std::map<uint64_t, Waiter> waiters = std::move(it->second);
  waiters_.erase(it);
  for (auto& [wid, w] : waiters) {
    loop_->CancelTimer(w.timer);
    answer(std::move(w.responder));
  }
}

size_t ActorWaiters::waiting(const std::string& actor_id) const {
  auto it = waiters_.find(actor_id);
  return it == waiters_.end() ? 0 : it->second.size();
}

}  // namespace shoal
