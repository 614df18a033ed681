// How the node agent decides one lease request: grant it here, point the
// requester to another node (spillback), keep it waiting, or fail it.
//
// DecideLease is a pure function of what it is given (the request, this
// node's resources, the cluster view from the last heartbeat, the time), so
// that every case can be tested without an agent. The agent acts on the
// decision: it grants, replies, asks the head, or queues and retries the
// request when resources change or at the time the decision names.
//
// Order of preference:
//   1. A request the accelerators reject is invalid (e.g. 3 TPU chips).
//   2. A request that fits this node's total is granted when it fits what
//      is free to it (lent CPU only to requests deeper than its lender) and
//      the node is not over-committed; else it spills to a
//      node that has it free now (unless no_spillback), else it waits here.
//   3. A request that does not fit here spills to a node that has it free
//      now, else to one whose total fits.
//   4. A request for a placement group's bundle that no node holds asks the
//      head about the group, and waits while the head says it is being
//      placed (asking again after the grace period).
//   5. A label selector narrows every step to the nodes it matches (a soft
//      one only while some live node matches it).
//   6. Anything else waits for a node that fits to join, for the infeasible
//      grace period, and then fails saying what no node has.
//
// Threading: plain functions; the agent calls them on its event loop.
#ifndef SHOAL_AGENT_LEASE_POLICY_H_
#define SHOAL_AGENT_LEASE_POLICY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "accel/accelerator_manager.h"
#include "agent/node_resources.h"
#include "scheduling/label_selector.h"
#include "scheduling/resource_set.h"
#include "shoal/shoal.pb.h"

namespace shoal::agent {

// What the head said of the placement group a waiting request needs.
enum class GroupCheck {
  kNotAsked,
  kAsking,       // a GET_PLACEMENT_GROUP is in flight
  kBeingPlaced,  // the head said it is being placed (at group_checked_us)
};

// What the policy knows of one lease request; kept with the request while it
// waits, so that each retry copies nothing.
struct LeaseAsk {
  ResourceSet shape;
  std::vector<std::string> excluded_nodes;  // spill to none of these
  bool no_spillback = false;                // queue here if it fits here
  // The accelerators' verdict on the shape (ValidateDevices), or why the
  // request's label selector cannot be read: not OK answers INVALID.
  absl::Status devices_valid;
  int64_t arrival_us = 0;  // steady clock
  GroupCheck group = GroupCheck::kNotAsked;
  int64_t group_checked_us = 0;
  // Only nodes whose labels match it may grant (unless it is soft and no
  // live node matches).
  LabelSelector selector;
};

// This node as the policy sees it. References must outlive the call.
struct LocalNode {
  const std::string& node_id;
  const std::string& address;  // for messages
  const NodeResources& resources;
  // The cluster from the last heartbeat reply (may include this node).
  const std::vector<proto::NodeInfo>& view;
  bool can_ask_head = true;  // false while the agent stops
  int64_t infeasible_grace_us = 0;
  // The CPU that blocked workers lend which this request may not use (it is
  // not deeper than they are: LeaseTable::Withheld).
  ResourceSet withheld = {};
  // This node's labels; null: none.
  const std::map<std::string, std::string>* labels = nullptr;
};

struct LeaseDecision {
  enum class Kind {
    kGrant,
    kSpillback,
    kWait,
    kInfeasible,
    kInvalid,
    kAskHeadAboutGroup,
  };
  Kind kind = Kind::kWait;
  // kSpillback: the node to send the requester to.
  std::string node_id;
  std::string node_address;
  // kInfeasible, kInvalid: the error for the requester.
  std::string message;
  // kAskHeadAboutGroup: the group to ask about (then wait).
  std::string group_id;
  // kWait: whether the request counts as infeasible demand (no node fits).
  bool infeasible = false;
  // kWait, kAskHeadAboutGroup: decide again at this time even if nothing
  // changes; 0: only when resources or the view change.
  int64_t retry_at_us = 0;
};

LeaseDecision DecideLease(const LeaseAsk& ask, const LocalNode& node,
                          int64_t now_us);

// The node resources a shape's bundle resources were carved from: a task
// placed in a bundle asks for "TPU_group_0_<pg>", whose devices are still
// TPU chips. The largest form wins (the indexed and the any-bundle name
// describe the same devices).
ResourceSet BaseShape(const ResourceSet& shape);

// The placement group a shape's bundle resources belong to, or "".
std::string GroupOfShape(const ResourceSet& shape);

// OK when every accelerator kind accepts the amount `shape` asks of it
// (counting bundle resources as their base); else the first refusal.
absl::Status ValidateDevices(
    const std::vector<std::shared_ptr<const accel::AcceleratorManager>>&
        accelerators,
    const ResourceSet& shape);

// What the head's answer about placement group `group` (GET_PLACEMENT_GROUP)
// means for a request waiting for its bundles: why its tasks cannot run (no
// such group, removed, failed), or "" when it may still be placed (or the
// head could not say): the request waits.
std::string GroupGoneMessage(
    const std::string& group,
    const absl::StatusOr<proto::PlacementGroupInfo>& info);

// Counts a spillback of `shape` to `node_id` as taken from that node's
// available resources in `view`, until the next view arrives, so that the
// next request of the same shape goes to another node that fits (tasks that
// must run at once, one per host, then do). Nothing changes when the node
// no longer has it free.
void CountSpillback(const std::string& node_id, const ResourceSet& shape,
                    std::vector<proto::NodeInfo>* view);

}  // namespace shoal::agent

#endif  // SHOAL_AGENT_LEASE_POLICY_H_
