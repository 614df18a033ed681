// The lease requests waiting on this node, in the order they are tried:
// deepest first (RequestLeaseRequest.depth: how deeply the requester's task
// is nested), then by arrival. Nested tasks then finish before their
// parents' siblings start (depth-first), which bounds how many workers wait
// blocked on their children (docs/design/actors.md).
//
// Threading: lives on the agent's event loop; not thread-safe.
#ifndef SHOAL_AGENT_LEASE_QUEUE_H_
#define SHOAL_AGENT_LEASE_QUEUE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "agent/lease_policy.h"
#include "shoal/shoal.pb.h"

namespace shoal::agent {

// Who waits for the answer to a lease request: on a node, the request's
// RPC connection (agent/lease_rpc.h); in tests, a recorder.
class LeaseRequester {
 public:
  virtual ~LeaseRequester() = default;
  // Names the requester's connection: its leases end when it closes.
  virtual uint64_t connection_id() const = 0;
  // Who it is (host:port), for `shoal status --verbose`.
  virtual const std::string& peer() const = 0;
  // False once the requester has gone: nothing is granted to it.
  virtual bool connected() const = 0;
  virtual void Reply(const proto::RequestLeaseReply& reply) const = 0;
};

struct PendingLease {
  proto::RequestLeaseRequest request;
  LeaseAsk ask;
  // Where the answer goes; null: nowhere (a request of connection 0).
  std::unique_ptr<LeaseRequester> requester;
  bool infeasible = false;  // counted as infeasible demand
  uint64_t seq = 0;         // the agent's number for it

  uint64_t connection_id() const {
    return requester == nullptr ? 0 : requester->connection_id();
  }
};

class LeaseQueue {
 public:
  // Queues `p` after every request at least as deep and before shallower
  // ones.
  void Push(PendingLease p);

  // Every queued request in order; the queue is empty after. (Requests the
  // caller pushes back keep their order.)
  std::deque<PendingLease> TakeAll();

  // The queued request numbered `seq`; null when it is not queued.
  PendingLease* Find(uint64_t seq);
  void Erase(uint64_t seq);

  // Takes out the request named `request_id` by the requester on connection
  // `conn_id`; nullopt when none waits (an empty id names none).
  std::optional<PendingLease> Take(uint64_t conn_id,
                                   const std::string& request_id);

  // Drops the requests of the requester on connection `conn_id`; how many.
  size_t DropConnection(uint64_t conn_id);

  // Adds the queued requests to a heartbeat as demands: one per shape and
  // infeasibility, with how many ask for it.
  void FillDemands(proto::HeartbeatRequest* request) const;

  const std::deque<PendingLease>& requests() const { return queue_; }
  size_t size() const { return queue_.size(); }

 private:
  std::deque<PendingLease> queue_;
};

}  // namespace shoal::agent

#endif  // SHOAL_AGENT_LEASE_QUEUE_H_
