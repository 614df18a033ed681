#include "agent/lease_policy.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace shoal::agent {
namespace {

using Kind = LeaseDecision::Kind;

LeaseDecision Decision(Kind kind) {
  LeaseDecision d;
  d.kind = kind;
  return d;
}

LeaseDecision Wait(bool infeasible, int64_t retry_at_us) {
  LeaseDecision d = Decision(Kind::kWait);
  d.infeasible = infeasible;
  d.retry_at_us = retry_at_us;
  return d;
}

bool Excluded(const LeaseAsk& ask, const std::string& node_id) {
  return std::find(ask.excluded_nodes.begin(), ask.excluded_nodes.end(),
                   node_id) != ask.excluded_nodes.end();
}

const std::map<std::string, std::string>& LabelsOf(const LocalNode& node) {
  static const std::map<std::string, std::string> kNone;
  return node.labels != nullptr ? *node.labels : kNone;
}

// Whether the ask's selector counts: it is not empty, and it is hard or some
// live node (this one included) matches it.
bool SelectorApplies(const LeaseAsk& ask, const LocalNode& node) {
  if (ask.selector.empty()) return false;
  if (!ask.selector.soft()) return true;
  if (ask.selector.Matches(LabelsOf(node))) return true;
  for (const proto::NodeInfo& n : node.view) {
    if (n.alive() && ask.selector.Matches(n)) return true;
  }
  return false;
}

// The alive node (other than this one and the excluded, matching the
// selector when `selective`) that fits the shape now, preferring the most
// available CPU (the first of equals); with `need_available` false, one
// whose total fits.
const proto::NodeInfo* FindSpillbackNode(const LeaseAsk& ask,
                                         const LocalNode& node, bool selective,
                                         bool need_available) {
  const proto::NodeInfo* best = nullptr;
  int64_t best_cpu = -1;
  for (const proto::NodeInfo& n : node.view) {
    if (!n.alive() || n.node_id() == node.node_id) continue;
    if (Excluded(ask, n.node_id())) continue;
    if (selective && !ask.selector.Matches(n)) continue;
    ResourceSet have =
        ResourceSet::FromProto(need_available ? n.available() : n.total());
    if (!have.Contains(ask.shape)) continue;
    int64_t cpu = ResourceSet::FromProto(n.available()).Get("CPU");
    if (cpu > best_cpu) {
      best = &n;
      best_cpu = cpu;
    }
  }
  return best;
}

LeaseDecision SpillTo(const proto::NodeInfo& n) {
  LeaseDecision d = Decision(Kind::kSpillback);
  d.node_id = n.node_id();
  d.node_address = n.address();
  return d;
}

std::string InfeasibleMessage(const LeaseAsk& ask, const LocalNode& node,
                              bool selective) {
  std::vector<NodeTotals> nodes;
  bool self_in_view = false;
  for (const proto::NodeInfo& n : node.view) {
    if (!n.alive()) continue;
    self_in_view |= n.node_id() == node.node_id;
    if (selective && !ask.selector.Matches(n)) continue;
    nodes.push_back({absl::StrCat(n.node_id(), " (", n.address(), ")"),
                     ResourceSet::FromProto(n.total())});
  }
  if (!self_in_view && (!selective || ask.selector.Matches(LabelsOf(node)))) {
    nodes.push_back({absl::StrCat(node.node_id, " (", node.address, ")"),
                     node.resources.total});
  }
  if (selective && nodes.empty()) {
    return absl::StrCat(
        "infeasible request ", ask.shape.DebugString(),
        ": no live node has "
        "labels matching ",
        ask.selector.DebugString(),
        " (`shoal status` lists the nodes; a node pinned by id must be alive)");
  }
  std::string where = selective ? absl::StrCat(" among the nodes matching ",
                                               ask.selector.DebugString())
                                : "";
  return absl::StrCat("infeasible request ", ask.shape.DebugString(), where,
                      ": ", DescribeInfeasible(ask.shape, nodes));
}

}  // namespace

LeaseDecision DecideLease(const LeaseAsk& ask, const LocalNode& node,
                          int64_t now_us) {
  if (!ask.devices_valid.ok()) {
    LeaseDecision d = Decision(Kind::kInvalid);
    d.message = std::string(ask.devices_valid.message());
    return d;
  }
  const bool selective = SelectorApplies(ask, node);
  const bool here = !selective || ask.selector.Matches(LabelsOf(node));
  if (here && node.resources.total.Contains(ask.shape)) {
    if (node.resources.CanGrant(ask.shape, node.withheld))
      return Decision(Kind::kGrant);
    if (!ask.no_spillback) {
      if (const auto* n = FindSpillbackNode(ask, node, selective, true))
        return SpillTo(*n);
    }
    return Wait(/*infeasible=*/false, /*retry_at_us=*/0);
  }
  if (const auto* n = FindSpillbackNode(ask, node, selective, true))
    return SpillTo(*n);
  if (const auto* n = FindSpillbackNode(ask, node, selective, false))
    return SpillTo(*n);

  // A task of a placement group whose bundle no node holds: a group that was
  // removed (or never existed) fails at once; one still being placed is
  // waited for, as long as the head says it is.
  if (std::string group = GroupOfShape(ask.shape); !group.empty()) {
    GroupCheck check = ask.group;
    if (check == GroupCheck::kBeingPlaced &&
        now_us - ask.group_checked_us >= node.infeasible_grace_us) {
      check = GroupCheck::kNotAsked;  // ask again
    }
    if (check == GroupCheck::kNotAsked && node.can_ask_head) {
      LeaseDecision d = Decision(Kind::kAskHeadAboutGroup);
      d.group_id = std::move(group);
      d.retry_at_us = now_us + node.infeasible_grace_us;
      return d;
    }
    if (check != GroupCheck::kNotAsked) {
      return Wait(/*infeasible=*/false, now_us + node.infeasible_grace_us);
    }
  }
  if (now_us - ask.arrival_us >= node.infeasible_grace_us) {
    LeaseDecision d = Decision(Kind::kInfeasible);
    d.message = InfeasibleMessage(ask, node, selective);
    return d;
  }
  return Wait(/*infeasible=*/true, ask.arrival_us + node.infeasible_grace_us);
}

ResourceSet BaseShape(const ResourceSet& shape) {
  ResourceSet base;
  for (const auto& [name, amount] : shape.amounts()) {
    BundleResource bundle;
    std::string root = ParseBundleResource(name, &bundle) ? bundle.base : name;
    if (amount > base.Get(root)) base.Set(root, amount);
  }
  return base;
}

std::string GroupOfShape(const ResourceSet& shape) {
  for (const auto& [name, amount] : shape.amounts()) {
    BundleResource bundle;
    if (ParseBundleResource(name, &bundle)) return bundle.group_id;
  }
  return "";
}

absl::Status ValidateDevices(
    const std::vector<std::shared_ptr<const accel::AcceleratorManager>>&
        accelerators,
    const ResourceSet& shape) {
  if (accelerators.empty()) return absl::OkStatus();
  ResourceSet base = BaseShape(shape);
  for (const auto& m : accelerators) {
    absl::Status valid = m->ValidateRequest(base.GetDouble(m->ResourceName()));
    if (!valid.ok()) return valid;
  }
  return absl::OkStatus();
}

void CountSpillback(const std::string& node_id, const ResourceSet& shape,
                    std::vector<proto::NodeInfo>* view) {
  for (proto::NodeInfo& n : *view) {
    if (n.node_id() != node_id) continue;
    ResourceSet available = ResourceSet::FromProto(n.available());
    if (!available.Contains(shape)) return;
    available.Subtract(shape);
    n.clear_available();
    available.ToProto(n.mutable_available());
    return;
  }
}

std::string GroupGoneMessage(
    const std::string& group,
    const absl::StatusOr<proto::PlacementGroupInfo>& info) {
  std::string gone;
  if (!info.ok() && absl::IsNotFound(info.status())) {
    gone =
        absl::StrCat("no placement group ", group, " exists on this cluster");
  } else if (info.ok() &&
             (info->state() == proto::PlacementGroupInfo::REMOVED ||
              info->state() == proto::PlacementGroupInfo::FAILED)) {
    gone = absl::StrCat(
        "placement group ", group,
        info->state() == proto::PlacementGroupInfo::FAILED
            ? absl::StrCat(" failed: ", info->error())
            : " was removed (by RemovePlacementGroup, or because the job "
              "that created it ended; create it with Lifetime::kDetached to "
              "keep it)");
  }
  if (gone.empty()) return gone;
  return absl::StrCat(gone, "; its tasks cannot run");
}

}  // namespace shoal::agent
