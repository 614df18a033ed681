// The head's side of actors (docs/design/actors.md): serves CREATE_ACTOR,
// GET_ACTOR (with long poll), KILL_ACTOR and ACTOR_EXITING; places each actor
// on a node, leases a worker there from the node's agent and makes the
// actor's instance in it; watches that worker's connection and restarts the
// actor or declares it dead when the worker goes.
//
// The state machine is ActorTable, each actor's current attempt is in
// ActorAttempts; this class does their IO: CREATE_ACTOR_INSTANCE,
// RETURN_LEASE with kill_worker, GET_WORKER_EXIT for a death's cause. The
// lease requests (following spillbacks) are ActorPlacer's, the long polls
// ActorWaiters'.
//
// Lifecycle of one placement attempt: choose a node, REQUEST_LEASE to its
// agent, GRANTED, CREATE_ACTOR_INSTANCE over a connection kept for the actor's
// life. Every attempt has a number; a reply or a disconnect that belongs to an
// older attempt is ignored (a lease it brings is returned with its worker
// killed).
//
// Threading: runs on the head's event loop; not thread-safe. Must be
// destroyed on that loop; its callbacks and timers that outlive it do
// nothing.
#ifndef SHOAL_HEAD_ACTOR_MANAGER_H_
#define SHOAL_HEAD_ACTOR_MANAGER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "head/actor_attempts.h"
#include "head/actor_placer.h"
#include "head/actor_table.h"
#include "head/actor_waiters.h"
#include "head/table_storage.h"
#include "rpc/channel.h"
#include "rpc/executor.h"
#include "rpc/rpc.h"
#include "shoal/shoal.pb.h"

namespace shoal {

struct ActorManagerOptions {
  // Makes the connections to actors' workers.
  std::shared_ptr<rpc::ChannelFactory> worker_channels;
  // The head's channel to the agent at `address` (shared with its other
  // calls there: an agent ties leases to the connection that asked).
  std::function<rpc::Channel*(const std::string& address)> agent_channel;
  // The alive nodes, in a stable order (num_actors is filled in here).
  std::function<std::vector<ActorNode>()> alive_nodes;
  // Where live actors are kept (table "actors"), so that a head started
  // again takes them up (Restore). Null: nowhere.
  TableStorage* storage = nullptr;
  size_t max_dead_actors = 1000;
  int64_t retry_ms = 200;  // before another try after a failed lease request
  // Start failures (FAILED) of one actor in a row before it is DEAD.
  int max_start_retries = 3;
  int64_t worker_exit_timeout_ms = 5000;  // GET_WORKER_EXIT
  // An agent that did not answer is not asked for workers for this long
  // (unless no other node is left), so that an actor whose node's agent died
  // moves before the head declares the node dead.
  int64_t avoid_unreachable_ms = 3000;
  // A lease request that has waited this long at a node that has not granted
  // it, while another node has room for the actor, is withdrawn there
  // (CANCEL_LEASE_REQUEST) and the actor placed again (the node it waits at
  // may have been chosen on a stale view).
  int64_t waiting_check_ms = 1000;
  // An actor died for good (DEAD): its id and its job. May be null.
  std::function<void(const std::string& actor_id, const std::string& job_id)>
      on_dead;
};

class ActorManager : private ActorPlacer::Delegate {
 public:
  ActorManager(rpc::Executor* loop, ActorManagerOptions options);
  ~ActorManager() override;
  ActorManager(const ActorManager&) = delete;
  ActorManager& operator=(const ActorManager&) = delete;

  // Serves CREATE_ACTOR, GET_ACTOR, KILL_ACTOR, ACTOR_EXITING and ACTOR_ARGS
  // on `server`.
  // A GET_ACTOR long poll of a dead actor is answered at once: it will not
  // change again.
  void RegisterHandlers(rpc::HandlerRegistry* server);

  // Takes up the live actors a head that ran before kept in storage: an
  // ALIVE one's worker is asked to confirm it still holds the actor
  // (ADOPT_ACTOR) and watched again (one that does not is lost, as a
  // worker that died: restarted if it may be); PENDING and RESTARTING
  // ones are placed again. Call once, before serving.
  void Restore();

  // Node `node_id`'s agent (at `agent`) reported the leases it holds: those
  // that hold a worker for an actor that is dead, unknown, or ALIVE in
  // another lease are returned with their workers killed (leases a head
  // that died was granted, or granted for an attempt it gave up).
  void OnNodeLeases(
      const std::string& agent,
      const google::protobuf::RepeatedPtrField<proto::LeaseInfo>& leases);

  // The job's driver went: its non-detached actors end, their workers are
  // killed at once.
  void OnJobEnded(const std::string& job_id);
  // The head declared the node dead: its actors' workers are lost, lease
  // requests waiting there go elsewhere.
  void OnNodeDead(const std::string& node_id, const std::string& reason);

  // Adds every known actor (dead ones too) with its age to `status`.
  void AddToStatus(proto::ClusterStatus* status) const;

  const ActorTable& table() const { return table_; }

 private:
  void Create(const proto::ActorSpec& spec, rpc::Responder resp);
  void Get(const proto::GetActorRequest& r, rpc::Responder resp);
  void Kill(const proto::KillActorRequest& r, rpc::Responder resp);
  // Applies a transition a request asked for, then answers it (Empty).
  void ApplyAndAnswer(const absl::StatusOr<ActorAction>& action,
                      rpc::Responder resp);

  // Does what a transition asks, and keeps the change in storage unless
  // `kept` (it is there already).
  void Apply(const ActorAction& action, bool kept = false);
  // Writes the actor's info to storage (a dead or unknown one is removed).
  absl::Status Persist(const std::string& actor_id);
  // Takes up a restored ALIVE actor's worker (see Restore).
  void Adopt(const proto::ActorInfo& info, const std::string& lease_id);
  // Opens the attempt's channel to its worker; its loss is LoseWorker's.
  void WatchWorker(const std::string& actor_id, ActorAttempt& a);
  // Starts a new placement attempt.
  void StartLease(const std::string& actor_id);
  void OnInstance(const std::string& actor_id, uint64_t attempt,
                  const absl::StatusOr<proto::TaskResult>& result);
  // The worker's connection broke: learns why from its agent, then tells the
  // table.
  void LoseWorker(const std::string& actor_id, uint64_t attempt,
                  const absl::Status& why);
  // Returns the actor's lease with its worker killed, if it holds one, and
  // withdraws its lease request, if one is out.
  void ReleaseWorker(const std::string& actor_id, ActorAttempt& a);
  // Forgets the attempt's worker (its channel freed on a later loop turn:
  // it may be the one calling us); returns its lease if `return_lease`.
  void ForgetWorker(ActorAttempt& a, bool return_lease);
  proto::ActorInfo WithAge(const ActorTable::Entry& e) const;

  // ActorPlacer::Delegate
  const proto::ActorSpec* SpecOf(const std::string& actor_id) override;
  void Granted(const std::string& actor_id, uint64_t attempt,
               const std::string& agent, const std::string& node_id,
               const proto::RequestLeaseReply& reply) override;
  void CannotPlace(const std::string& actor_id, bool infeasible,
                   const std::string& why) override;
  void ReturnLease(const std::string& agent,
                   const std::string& lease_id) override;

  rpc::Executor* const loop_;
  const ActorManagerOptions options_;
  ActorTable table_;
  ActorAttempts attempts_;  // live actors only
  ActorPlacer placer_;
  ActorWaiters waiters_;
  std::map<std::string, std::string> dead_nodes_;  // node id -> reason
  // Stale leases (see OnNodeLeases) returned and not yet confirmed.
  std::set<std::string> returning_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace shoal

#endif  // SHOAL_HEAD_ACTOR_MANAGER_H_
