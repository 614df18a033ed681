// The head's side of each live actor's placement and worker: which attempt
// is current (replies and disconnects of older ones are ignored), the lease
// request out, the lease and worker it holds. State only: ActorPlacer and
// ActorManager do the IO.
//
// Threading: the head's loop only; not thread-safe.
#ifndef SHOAL_HEAD_ACTOR_ATTEMPTS_H_
#define SHOAL_HEAD_ACTOR_ATTEMPTS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace shoal::rpc {
class Channel;
}

namespace shoal {

// The IO side of one live actor.
struct ActorAttempt {
  ActorAttempt();
  ~ActorAttempt();
  ActorAttempt(ActorAttempt&&);
  ActorAttempt& operator=(ActorAttempt&&);

  uint64_t number = 0;       // grows whenever older replies must be ignored
  bool placing = false;      // a lease request is out (or waiting to retry)
  uint64_t request = 0;      // grows with each lease request sent
  bool request_out = false;  // request `request` waits for its answer
  // The node a request was withdrawn from for keeping it waiting: the next
  // placement tries the other nodes first.
  std::string withdrawn_from;
  std::string agent;     // the agent asked, or holding the lease
  std::string node_id;   // its node
  std::string lease_id;  // once granted
  std::string worker_id;
  std::string worker_address;
  int64_t worker_pid = 0;
  std::unique_ptr<rpc::Channel> worker;  // to the actor's worker
  int failures = 0;                      // FAILED replies in a row
};

class ActorAttempts {
 public:
  // The actor's attempt, made (number 0) if it has none.
  ActorAttempt& Get(const std::string& actor_id);
  // The actor's attempt, or null.
  ActorAttempt* Find(const std::string& actor_id);
  // The actor's attempt if it is still number `number`, else null.
  ActorAttempt* Find(const std::string& actor_id, uint64_t number);
  bool Has(const std::string& actor_id) const {
    return attempts_.count(actor_id) > 0;
  }
  void Erase(const std::string& actor_id) { attempts_.erase(actor_id); }

  // Moves the attempt on (older replies are stale from now) and forgets its
  // worker: its lease, ids and pid. Returns the channel to the worker (the
  // caller frees it later: it may be failing its calls) and, in `lease`,
  // the agent and lease it held (empty if none).
  static std::unique_ptr<rpc::Channel> ForgetWorker(
      ActorAttempt& a, std::pair<std::string, std::string>* lease);

  // Live actors placed or being placed on each node.
  std::map<std::string, int64_t> ActorsPerNode() const;
  // The actors of node `node_id`: those holding a lease there (with their
  // attempt numbers), and those whose lease request waits there.
  void OnNode(const std::string& node_id,
              std::vector<std::pair<std::string, uint64_t>>* leased,
              std::vector<std::string>* placing) const;
  // Whether `actor_id` holds a lease other than `lease_id` (and is not
  // being placed): an agent's report of `lease_id` for it is stale.
  bool HoldsAnotherLease(const std::string& actor_id,
                         const std::string& lease_id) const;
  // The lease the actor holds ("" when none).
  std::string LeaseOf(const std::string& actor_id) const;

 private:
  std::map<std::string, ActorAttempt> attempts_;  // live actors only
};

}  // namespace shoal

#endif  // SHOAL_HEAD_ACTOR_ATTEMPTS_H_
