// The leases this node has granted and the resources they hold, including
// the CPU that blocked workers lend back.
//
// A lease takes its shape from the node's available resources while it
// lives. When its worker blocks (WORKER_BLOCKED: it waits in Get or Wait),
// the CPU the lease holds is lent back to the node: every resource of the
// shape whose base name is "CPU" ("CPU", or "CPU_group_<i>_<pg>" for a task
// in a placement group's bundle); accelerators and memory never are. When
// the worker unblocks it takes the CPU back even if that leaves the node
// over-committed (see NodeResources). Blocking and unblocking are
// idempotent, and a lease that ends gives back exactly what it still holds,
// lent or not.
//
// Lent CPU serves only deeper requests. A blocked worker says how deeply
// the task it waits in is nested (its depth d; the shallowest, when several
// of its threads wait), and what it lends may be granted only to requests
// of depth > d (Withheld). What a task waits for is deeper than it, so the
// wait can always be served and a tree of nested tasks never stalls; and a
// CPU passes only down a chain of strictly deeper tasks, so at most
// CPUs x (levels of nesting) workers hold CPU on the node at once
// (docs/design/actors.md, "Blocked workers").
//
// Threading: lives on the agent's event loop with the NodeResources it
// changes; not thread-safe.
#ifndef SHOAL_AGENT_LEASE_TABLE_H_
#define SHOAL_AGENT_LEASE_TABLE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/device_allocator.h"
#include "agent/node_resources.h"
#include "scheduling/resource_set.h"

namespace shoal::proto {
class HeartbeatRequest;
}  // namespace shoal::proto

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
  // Its worker waits in Get or Wait, in a task nested `blocked_depth` deep.
  bool blocked = false;
  int blocked_depth = 0;
  // What it lends now: empty when not blocked or when it holds no CPU.
  ResourceSet lent;
};

// What Block did.
enum class BlockResult {
  kLent,            // the lease's CPU is lent now, or to other depths
  kAlreadyBlocked,  // nothing changed
  kNothingToLend,   // the lease holds no CPU; it is marked blocked
  kUnknownLease,
};

class LeaseTable {
 public:
  // REQUIRES: `node` outlives this.
  explicit LeaseTable(NodeResources* node);

  // Records a granted lease and takes its shape from the node's available
  // resources. REQUIRES: no lease has its id.
  const Lease& Add(Lease lease);

  // Ends a lease, giving back what it still holds (its shape less what it
  // lends); the lease as it was, or nullopt when there is none.
  std::optional<Lease> Remove(const std::string& lease_id);

  // The lease's worker waits in a task nested `depth` deep: its CPU is lent
  // to requests deeper than that. Blocking a blocked lease again moves what
  // it lends to the new depth.
  BlockResult Block(const std::string& lease_id, int depth);
  // Takes back what the lease lent (the node may be over-committed after);
  // true when the lease was blocked.
  bool Unblock(const std::string& lease_id);

  // The lent CPU a request nested `depth` deep may not use: what leases
  // blocked at that depth or deeper lend. O(depths that lend), not
  // O(leases): the agent asks once per queued request per dispatch.
  ResourceSet Withheld(int depth) const;

  const Lease* Find(const std::string& lease_id) const;
  // The leases granted to the requester on connection `conn_id`.
  std::vector<std::string> HeldBy(uint64_t conn_id) const;
  // The leases that hold bundle resources of placement group `pg`.
  std::vector<std::string> InGroup(const std::string& pg) const;

  // Adds every lease to a heartbeat (`shoal status --verbose`, and the
  // head's check of actor leases), aged as of `now_us`.
  void FillLeases(const std::string& node_id, int64_t now_us,
                  proto::HeartbeatRequest* request) const;

  const std::map<std::string, Lease>& leases() const { return leases_; }
  size_t size() const { return leases_.size(); }

 private:
  void StopLending(Lease& lease);
  // Adds `lent` to (or takes it from) what leases blocked at `depth` lend.
  void CountLent(int depth, const ResourceSet& lent, bool add);

  NodeResources* const node_;
  std::map<std::string, Lease> leases_;
  // What blocked leases lend, by the depth they are blocked at.
  std::map<int, ResourceSet> lent_by_depth_;
};

// The part of `shape` a blocked worker lends: the resources whose base name
// is "CPU".
ResourceSet LendableCpu(const ResourceSet& shape);

}  // namespace shoal::agent

#endif  // SHOAL_AGENT_LEASE_TABLE_H_
