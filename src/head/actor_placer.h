// Finds a worker for an actor (docs/design/actors.md): chooses a node
// (ChooseActorNode, leaving out agents that did not answer lately), asks its
// agent for a lease (REQUEST_LEASE, following spillbacks), withdraws a
// request left waiting at a node while another has room
// (CANCEL_LEASE_REQUEST), and asks again after failures. Each try belongs to
// an attempt (ActorAttempts); an answer for an attempt that is over is
// ignored, a lease it brings returned.
//
// Threading: the head's loop only; not thread-safe. Must be destroyed on
// that loop; its callbacks and timers that outlive it do nothing.
#ifndef SHOAL_HEAD_ACTOR_PLACER_H_
#define SHOAL_HEAD_ACTOR_PLACER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "head/actor_attempts.h"
#include "rpc/executor.h"
#include "scheduling/resource_set.h"
#include "shoal/shoal.pb.h"

namespace shoal::rpc {
class Channel;
}

namespace shoal {

// An alive node as the actor placement sees it.
struct ActorNode {
  std::string node_id;
  std::string address;  // its agent
  ResourceSet total;
  ResourceSet available;
  int64_t num_actors = 0;  // live actors placed there or being placed there
  // Actors whose worker lease the node reported in its last heartbeat.
  std::set<std::string> leased_actors;
  std::map<std::string, std::string> labels;
};

// The node to ask first for a worker of `shape`: among the nodes whose
// available resources contain it, the one with the most free CPU, then the
// fewest actors; else the same among those whose total contains it; else the
// first with the fewest actors (its agent answers INFEASIBLE after the grace
// period). Ties keep the nodes' order. nullopt when `nodes` is empty.
std::optional<size_t> ChooseActorNode(const ResourceSet& shape,
                                      const std::vector<ActorNode>& nodes);

struct ActorPlacerOptions {
  // The head's channel to the agent at `address` (shared with its other
  // calls there: an agent ties leases to the connection that asked).
  std::function<rpc::Channel*(const std::string& address)> agent_channel;
  // The alive nodes, in a stable order (num_actors is filled in here).
  std::function<std::vector<ActorNode>()> alive_nodes;
  int64_t retry_ms = 200;  // before another try after a failed lease request
  // Start failures (FAILED) of one actor in a row before it is DEAD.
  int max_start_retries = 3;
  int64_t cancel_timeout_ms = 5000;  // CANCEL_LEASE_REQUEST
  // An agent that did not answer is not asked for workers for this long
  // (unless no other node is left).
  int64_t avoid_unreachable_ms = 3000;
  // A lease request that has waited this long at a node that has not
  // granted it, while another node has room, is withdrawn there.
  int64_t waiting_check_ms = 1000;
};

class ActorPlacer {
 public:
  // What becomes of a placement.
  class Delegate {
   public:
    virtual ~Delegate() = default;
    // The actor's spec; null once it is gone.
    virtual const proto::ActorSpec* SpecOf(const std::string& actor_id) = 0;
    // Attempt `attempt` got a lease from `agent` on node `node_id`.
    virtual void Granted(const std::string& actor_id, uint64_t attempt,
                         const std::string& agent, const std::string& node_id,
                         const proto::RequestLeaseReply& reply) = 0;
    // No worker can be had: no node can ever fit it (`infeasible`), or it
    // was refused or kept failing to start; `why` says which.
    virtual void CannotPlace(const std::string& actor_id, bool infeasible,
                             const std::string& why) = 0;
    // A lease granted to an attempt that is over: nobody's worker.
    virtual void ReturnLease(const std::string& agent,
                             const std::string& lease_id) = 0;
  };

  ActorPlacer(rpc::Executor* loop, ActorPlacerOptions options,
              ActorAttempts* attempts, Delegate* delegate);
  ~ActorPlacer();
  ActorPlacer(const ActorPlacer&) = delete;
  ActorPlacer& operator=(const ActorPlacer&) = delete;

  // Places attempt `attempt` of the actor (if it is still the current one).
  void Place(const std::string& actor_id, uint64_t attempt);
  // Withdraws the lease request the attempt waits for, if any: a request
  // nobody wants must not hold a place in the agent's queue (and show as
  // demand) or start a worker. Its CANCELED answer, or a grant that crossed
  // the cancel, comes back to an attempt that then asks again, or to an
  // older one, which returns the lease.
  void WithdrawRequest(const std::string& actor_id, const ActorAttempt& a);
  // A call to `agent` went unanswered: it is left out for a while.
  void NoteUnreachable(const std::string& agent);
  // The alive nodes, without those whose agent did not answer lately
  // (unless that leaves none), with their actor counts.
  std::vector<ActorNode> CandidateNodes() const;

 private:
  void RequestLease(const std::string& actor_id, uint64_t attempt,
                    const std::string& agent, const std::string& node_id,
                    bool no_spillback);
  void OnLeaseReply(const std::string& actor_id, uint64_t attempt,
                    const std::string& agent, const std::string& node_id,
                    const absl::StatusOr<proto::RequestLeaseReply>& reply);
  // A FAILED answer: a worker that could not start.
  void OnStartFailed(const std::string& actor_id, ActorAttempt& a,
                     const std::string& node_id, const std::string& error);
  void RetryPlacement(const std::string& actor_id, uint64_t attempt);
  // Withdraws lease request `request` when it still waits, the node it
  // waits at has not granted it and another node has room.
  void CheckWaiting(const std::string& actor_id, uint64_t attempt,
                    uint64_t request);
  // Runs `fn` after `ms` unless this placer is gone by then.
  void After(int64_t ms, std::function<void()> fn);

  rpc::Executor* const loop_;
  const ActorPlacerOptions options_;
  ActorAttempts* const attempts_;
  Delegate* const delegate_;
  // Agent address -> when a call to it last failed (loop_->NowUs()).
  std::map<std::string, int64_t> unreachable_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace shoal

#endif  // SHOAL_HEAD_ACTOR_PLACER_H_
