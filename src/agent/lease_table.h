// The leases this node has granted and the resources they hold, including
// the CPU that blocked workers lend back.
//
// A lease takes its shape from the node's available resources while it
// lives. When its worker blocks (WORKER_BLOCKED: it waits in Get or Wait),
// the CPU the lease holds is lent back to the node, so that waiting requests
// may run on it; every resource of the shape whose base name is "CPU" is
// lent ("CPU", or "CPU_group_<i>_<pg>" for a task in a placement group's
// bundle); accelerators and memory never are. When the worker unblocks it
// takes the CPU back even if that leaves the node over-committed (see
// NodeResources). Blocking and unblocking are idempotent, and a lease that
// ends gives back exactly what it still holds, lent or not.
//
// At most `max_blocked_workers` leases lend their CPU at once; beyond that a
// blocked worker keeps its CPU, so that a deep tree of nested tasks cannot
// start workers without bound. It waits for room: when a lending lease
// unblocks or ends, the longest-blocked worker that kept its CPU lends it.
//
// Threading: lives on the agent's event loop with the NodeResources it
// changes; not thread-safe.
#ifndef SHOAL_AGENT_LEASE_TABLE_H_
#define SHOAL_AGENT_LEASE_TABLE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/device_allocator.h"
#include "agent/node_resources.h"
#include "scheduling/resource_set.h"

namespace shoal::agent {

struct Lease {
  std::string id;
  std::string worker_id;
  ResourceSet shape;
  DeviceIds devices;
  uint64_t conn_id = 0;  // the requester's connection
  // For `shoal status --verbose`: who holds it, for which job and actor,
  // since when.
  std::string owner;
  std::string job_id;
  std::string actor_id;
  int64_t granted_us = 0;
  // Its worker waits in Get or Wait.
  bool blocked = false;
  // What it lends now: empty when not blocked, when it holds no CPU, or
  // while max_blocked_workers others lend.
  ResourceSet lent;
};

// True when `lease`'s worker is blocked and its CPU is lent back (or it holds
// none): what `shoal status` shows as blocked (LeaseInfo.blocked).
bool LentBack(const Lease& lease);

// What Block did.
enum class BlockResult {
  kLent,            // the lease's CPU is lent to the node now
  kAlreadyBlocked,  // nothing changed
  kNothingToLend,   // the lease holds no CPU; it is marked blocked
  kCapReached,      // max_blocked_workers leases lend already: it is
                    // marked blocked and keeps its CPU until one of them
                    // stops lending
  kUnknownLease,
};

class LeaseTable {
 public:
  // REQUIRES: `node` outlives this; max_blocked_workers >= 0.
  LeaseTable(NodeResources* node, int max_blocked_workers);

  // Records a granted lease and takes its shape from the node's available
  // resources. REQUIRES: no lease has its id.
  const Lease& Add(Lease lease);

  // Ends a lease, giving back what it still holds (its shape less what it
  // lends); the lease as it was, or nullopt when there is none.
  std::optional<Lease> Remove(const std::string& lease_id);

  BlockResult Block(const std::string& lease_id);
  // Takes back what the lease lent (the node may be over-committed after),
  // letting a lease that waits for room lend instead; true when the lease
  // was blocked.
  bool Unblock(const std::string& lease_id);

  const Lease* Find(const std::string& lease_id) const;
  // The leases granted to the requester on connection `conn_id`.
  std::vector<std::string> HeldBy(uint64_t conn_id) const;
  // The leases that hold bundle resources of placement group `pg`.
  std::vector<std::string> InGroup(const std::string& pg) const;

  const std::map<std::string, Lease>& leases() const { return leases_; }
  size_t size() const { return leases_.size(); }
  // How many leases lend CPU now.
  int lending() const { return lending_; }
  int max_blocked_workers() const { return max_blocked_workers_; }

 private:
  // Lends the CPU of blocked leases that kept it, oldest first, while there
  // is room.
  void LendWaiting();
  void Lend(Lease& lease);
  void StopLending(Lease& lease);

  NodeResources* const node_;
  const int max_blocked_workers_;
  std::map<std::string, Lease> leases_;
  int lending_ = 0;
  // Blocked leases that keep their CPU for want of room, in blocking order.
  std::deque<std::string> waiting_to_lend_;
};

// The part of `shape` a blocked worker lends: the resources whose base name
// is "CPU".
ResourceSet LendableCpu(const ResourceSet& shape);

// max(32, 8 x the node's CPUs): the default cap on lending workers.
int DefaultMaxBlockedWorkers(const ResourceSet& total);

}  // namespace shoal::agent

#endif  // SHOAL_AGENT_LEASE_TABLE_H_
