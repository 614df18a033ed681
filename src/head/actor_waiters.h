// GET_ACTOR long polls that wait for an actor to change: each is answered
// when the actor next changes (Wake) or when its wait runs out, whichever
// comes first, and only once.
//
// Threading: the head's loop only; not thread-safe. Timers of waits still
// running are canceled when it is destroyed.
#ifndef SHOAL_HEAD_ACTOR_WAITERS_H_
#define SHOAL_HEAD_ACTOR_WAITERS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "rpc/executor.h"
#include "rpc/rpc.h"

namespace shoal {

class ActorWaiters {
 public:
  // Answers a waiter of `actor_id` whose wait ran out.
  using Expired =
      std::function<void(const std::string& actor_id, rpc::Responder)>;

  ActorWaiters(rpc::Executor* loop, Expired expired);
  ~ActorWaiters();
  ActorWaiters(const ActorWaiters&) = delete;
  ActorWaiters& operator=(const ActorWaiters&) = delete;

  // `responder` waits up to `wait_ms` for `actor_id` to change.
  void Wait(const std::string& actor_id, int64_t wait_ms,
            rpc::Responder responder);
  // The actor changed: each of its waiters is handed to `answer`, once.
  void Wake(const std::string& actor_id,
            const std::function<void(rpc::Responder)>& answer);
  size_t waiting(const std::string& actor_id) const;

 private:
  struct Waiter {
    rpc::Responder responder;
    uint64_t timer = 0;
  };
  void Expire(const std::string& actor_id, uint64_t waiter);

  rpc::Executor* const loop_;
  const Expired expired_;
  std::map<std::string, std::map<uint64_t, Waiter>> waiters_;  // by actor
  uint64_t next_waiter_ = 1;
};

}  // namespace shoal

#endif  // SHOAL_HEAD_ACTOR_WAITERS_H_
