// The head's directory of actors (docs/design/actors.md): every actor's state
// (PENDING, ALIVE, RESTARTING, DEAD), restart accounting, and the names of
// live actors.
//
// A pure state machine: no IO, no clock, no timers. Each transition changes
// the table and returns what the IO side (ActorManager) must do about it:
// lease a worker, end the actor's current worker, wake long polls. Every
// change of an actor's ActorInfo grows its `version` by one.
//
// Dead actors stay in the table so that callers learn why they died; only
// the most recent `max_dead_actors` (at least 1) of them are kept.
//
// Threading: thread-compatible; the head uses it from its event loop only.
#ifndef SHOAL_HEAD_ACTOR_TABLE_H_
#define SHOAL_HEAD_ACTOR_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "shoal/shoal.pb.h"

namespace shoal {

// Where an actor's instance was made.
struct ActorPlacement {
  std::string worker_id;
  std::string address;  // the worker's host:port
  std::string node_id;
  int64_t pid = 0;
};

// What the IO side must do after a transition of one actor. All false: the
// transition changed nothing.
struct ActorAction {
  std::string actor_id;
  bool changed = false;  // its version grew: wake GET_ACTOR long polls
  // End its current worker process, if it has one (return the lease with
  // kill_worker); done before lease_worker.
  bool release_worker = false;
  // Lease a worker for it and make its instance there (a first placement or
  // a restart).
  bool lease_worker = false;
};

struct ActorCounts {
  int64_t pending = 0;
  int64_t alive = 0;
  int64_t restarting = 0;
  int64_t dead = 0;
};

class ActorTable {
 public:
  struct Entry {
    proto::ActorInfo info;
    int64_t created_us = 0;  // as given to Create()
  };

  explicit ActorTable(size_t max_dead_actors = 1000);

  // Adds a PENDING actor and asks for a worker. Refuses (AlreadyExists) a
  // name a live actor holds, and (InvalidArgument) a spec without an id or a
  // factory. An id already in the table is a retried request: nothing
  // changes and the action is empty.
  absl::StatusOr<ActorAction> Create(const proto::ActorSpec& spec,
                                     int64_t now_us);

  // An actor as a head that ran before kept it (a head restarting): added
  // as it was, its name held again if it is live. Nothing to do here: the
  // IO side takes up its worker, or places it again. False (and nothing
  // changes) for an info without an id, or an id or live name already held.
  bool Restore(const proto::ActorInfo& info, int64_t now_us);

  // Its instance was made: ALIVE there. An actor that died meanwhile gets
  // release_worker (the new worker is nobody's).
  ActorAction Placed(const std::string& actor_id,
                     const ActorPlacement& placement);

  // Its current worker process ended (`cause`: "killed by signal 9
  // (Killed)"). RESTARTING with a new lease while restarts are left
  // (num_restarts < max_restarts, or max_restarts == -1), else DEAD. The IO
  // side calls this once per lost worker.
  ActorAction WorkerDied(const std::string& actor_id, const std::string& cause);

  // shoal::Kill. no_restart: DEAD. Otherwise its process ends and the actor
  // restarts if it has restarts left, as if its process had died (an actor
  // without a process, PENDING or RESTARTING, is left alone). NotFound for an
  // unknown actor; a dead one stays as it is.
  absl::StatusOr<ActorAction> Kill(const std::string& actor_id,
                                   bool no_restart);

  // The actor called shoal::ExitActor: DEAD. A `worker_id` that is not the
  // actor's current worker (a late report of an older incarnation) changes
  // nothing; an empty one matches any.
  absl::StatusOr<ActorAction> Exiting(const std::string& actor_id,
                                      const std::string& worker_id);

  // The creator sends the arguments of an actor created with args_pending:
  // it is placed (lease_worker). With `failed` set, it is DEAD instead. An
  // actor not waiting for them (dead, or told already) is left as it is.
  absl::StatusOr<ActorAction> ArgsReady(const proto::ActorArgs& args);

  // The job that created them ended: its non-detached actors are DEAD, and
  // its detached ones still waiting for their arguments.
  std::vector<ActorAction> OwnerJobEnded(const std::string& job_id);

  // The process of actor `owner_id` ended (it died, restarts or exited):
  // the non-detached actors it created are DEAD (and detached ones still
  // waiting for their arguments), as Ray's owned actors
  // end with their owner. Their own actors follow when the IO side applies
  // these actions (each is an owner that ended).
  std::vector<ActorAction> OwnerActorEnded(const std::string& owner_id);

  // Node `node_id` died: its ALIVE actors' workers died with `cause`.
  std::vector<ActorAction> NodeDied(const std::string& node_id,
                                    const std::string& cause);

  // The factory threw: DEAD, "the constructor raised: <message>".
  ActorAction ConstructorFailed(const std::string& actor_id,
                                const std::string& message);
  // No node can ever hold it: DEAD with `infeasible` set; `message` is the
  // agent's explanation.
  ActorAction Infeasible(const std::string& actor_id,
                         const std::string& message);
  // Its worker cannot be started (an invalid request, repeated start
  // failures): DEAD with `message`.
  ActorAction CannotStart(const std::string& actor_id,
                          const std::string& message);

  // Null when unknown (or a dead actor no longer kept).
  const proto::ActorInfo* Find(const std::string& actor_id) const;
  const Entry* FindEntry(const std::string& actor_id) const;
  // The live (not DEAD) actor holding `name`; null when none.
  const proto::ActorInfo* FindByName(const std::string& name) const;

  // Whether an actor of job `job_id` (its spec's job) is not DEAD.
  bool HasLiveActorOf(const std::string& job_id) const;

  ActorCounts Counts() const;
  // Every actor, dead ones too, by id.
  const std::map<std::string, Entry>& entries() const { return actors_; }

 private:
  Entry* Mutable(const std::string& actor_id);
  // Grows the version and notes the change in `action`.
  static void Bump(Entry& e, ActorAction& action);
  ActorAction Die(Entry& e, const std::string& cause, bool infeasible);
  // The worker is gone: RESTARTING (restarts left) or DEAD.
  ActorAction Lose(Entry& e, const std::string& cause, bool killed);
  void ForgetOldDead();

  const size_t max_dead_actors_;
  std::map<std::string, Entry> actors_;
  std::map<std::string, std::string> live_names_;  // name -> actor id
  std::deque<std::string> dead_order_;             // oldest death first
};

}  // namespace shoal

#endif  // SHOAL_HEAD_ACTOR_TABLE_H_
