// A caller's side of actors: one ordered queue of calls per actor, pushed
// straight to the actor's worker; restarts and deaths learned from the head
// (a long poll of GET_ACTOR), calls in flight retried or failed.
//
// Threading: everything runs on the owning runtime's event loop.
#ifndef SHOAL_API_ACTOR_SUBMITTER_H_
#define SHOAL_API_ACTOR_SUBMITTER_H_

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "rpc/executor.h"
#include "shoal/shoal.pb.h"

namespace shoal::rpc {
class Channel;
}

namespace shoal::internal {

class ActorSubmitter {
 public:
  enum class Failure { kActorDied, kInfeasible };
  // Calls outstanding to one actor past which the driver is warned (Ray's
  // excess queueing warning), then past twice that, and so on.
  static constexpr size_t kExcessQueueWarning = 5000;

  // What the submitter needs from the runtime that owns the calls' results.
  class Delegate {
   public:
    virtual ~Delegate() = default;
    // Fills the spec of call `task_id` for a worker on `node_id` (its
    // arguments are resolved); false when the call is gone.
    virtual bool BuildCall(const std::string& task_id,
                           const std::string& node_id,
                           proto::TaskSpec* spec) = 0;
    // The actor answered (the method returned or threw).
    virtual void CallReplied(const std::string& task_id,
                             const std::string& node_id,
                             proto::TaskResult result) = 0;
    virtual void CallFailed(const std::string& task_id, Failure failure,
                            const std::string& message) = 0;
    // GET_ACTOR to the head.
    virtual void GetActor(
        const proto::GetActorRequest& request,
        std::function<void(absl::StatusOr<proto::ActorInfo>)> done) = 0;
    virtual std::unique_ptr<rpc::Channel> ConnectTo(
        const std::string& address) = 0;
  };

  ActorSubmitter(rpc::Executor* loop, Delegate* delegate);
  ~ActorSubmitter();

  // A new call, in submission order; it leaves once Ready() and every call
  // before it has left.
  void Add(const std::string& actor_id, const std::string& task_id);
  // Its arguments are resolved.
  void Ready(const std::string& actor_id, const std::string& task_id);
  // It failed before leaving (an argument failed): forget it.
  void Drop(const std::string& actor_id, const std::string& task_id);
  // The caller killed the actor for good: its calls queued, in flight and
  // later fail at once (its worker may still answer until it is ended).
  void Killed(const std::string& actor_id);
  // Closes every connection; calls still queued are forgotten.
  void Shutdown();

  // For tests and status: calls queued or in flight to `actor_id`.
  size_t Outstanding(const std::string& actor_id) const;

 private:
  struct Call {
    std::string task_id;
    bool ready = false;
    int retries_left = 0;  // set when the actor's spec is known
    bool retries_known = false;
    // Its request never reached the connection: sending it again costs no
    // retry.
    bool unsent = false;
  };
  struct Actor {
    std::string id;
    proto::ActorInfo info;
    bool known = false;  // info came from the head at least once
    bool dead = false;
    // When dead: what every call fails with.
    Failure failure = Failure::kActorDied;
    std::string death;
    bool polling = false;
    // Calls sent to an incarnation that went away: resent or failed once
    // the head says what became of it.
    bool lost_connection = false;
    std::unique_ptr<rpc::Channel> channel;
    uint64_t generation = 0;     // of `channel`
    std::deque<Call> waiting;    // not sent yet, in order
    std::deque<Call> in_flight;  // sent, in order
    // More calls than this outstanding: warn the driver (and double it).
    size_t warn_above = kExcessQueueWarning;
  };

  Actor& Get(const std::string& actor_id);
  void Poll(Actor& a, bool wait);
  void OnInfo(const std::string& actor_id, absl::StatusOr<proto::ActorInfo>);
  void Pump(Actor& a);
  void Send(Actor& a, Call call);
  void OnReply(const std::string& actor_id, uint64_t generation,
               const std::string& task_id, absl::StatusOr<std::string> reply);
  void OnConnectionLost(Actor& a);
  void Connect(Actor& a);
  // The actor is dead for good: every call, now and later, fails so.
  void Die(Actor& a, Failure failure, std::string message);
  void FailAll(Actor& a);
  void SetRetries(const Actor& a, Call& call) const;
  std::string Describe(const Actor& a) const;
  // Frees the actor's channel on a later turn (it may be failing its
  // calls).
  void DropChannel(Actor& a);

  rpc::Executor* loop_;
  Delegate* delegate_;
  std::map<std::string, Actor> actors_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace shoal::internal

#endif  // SHOAL_API_ACTOR_SUBMITTER_H_
