#include "head/placement_group_table.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/random.h"
#include "head/table_storage.h"
#include "scheduling/label_selector.h"
#include "scheduling/placement.h"
#include "scheduling/resource_set.h"

namespace shoal {
namespace {

constexpr char kPgsTable[] = "placement_groups";

bool Live(const proto::PlacementGroupInfo& info) {
  return info.state() == proto::PlacementGroupInfo::CREATED ||
         info.state() == proto::PlacementGroupInfo::PENDING;
}

// "bundle 1's label_selector {...} matches no live node; " for each bundle
// (index in `indices`) whose selector no node matches; "" when none.
std::string UnmatchedSelectors(const std::vector<int>& indices,
                               const std::vector<LabelSelector>& selectors,
                               const std::vector<PlacementNode>& nodes) {
  std::string out;
  for (size_t k = 0; k < selectors.size(); ++k) {
    const bool any = std::any_of(
        nodes.begin(), nodes.end(),
        [&](const PlacementNode& n) { return NodeMatches(selectors[k], n); });
    if (!any) {
      absl::StrAppend(&out, "bundle ", indices[k], "'s label_selector ",
                      selectors[k].DebugString(), " matches no live node; ");
    }
  }
  return out;
}

absl::StatusOr<std::vector<LabelSelector>> BundleSelectors(
    const proto::PlacementGroupSpec& spec) {
  std::vector<LabelSelector> out;
  if (spec.bundle_label_selector().empty()) return out;
  if (spec.bundle_label_selector_size() != spec.bundles_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bundle_label_selector has ", spec.bundle_label_selector_size(),
        " selectors for ", spec.bundles_size(),
        " bundles; give one per bundle (an empty one for any node)"));
  }
  for (int i = 0; i < spec.bundle_label_selector_size(); ++i) {
    auto parsed = LabelSelector::FromProto(spec.bundle_label_selector(i));
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("bundle_label_selector of bundle ", i, ": ",
                       parsed.status().message()));
    }
    out.push_back(*std::move(parsed));
  }
  return out;
}

}  // namespace

std::string PlacementGroupEntry::LostText() const {
  if (lost.empty()) return "";
  std::vector<std::string> each;
  size_t bundles = 0;
  for (const auto& [node, indices] : lost) {
    bundles += indices.size();
    if (each.size() < 8) {
      each.push_back(absl::StrCat(indices.size() == 1 ? "bundle " : "bundles ",
                                  absl::StrJoin(indices, ", "),
                                  " lost with node ", node));
    }
  }
  std::string text = absl::StrJoin(each, "; ");
  if (lost.size() > each.size()) {
    absl::StrAppend(&text, "; ", bundles, " bundles lost with ", lost.size(),
                    " dead nodes in all");
  }
  return absl::StrCat(text, " (", lost_why, ")");
}

size_t PlacementGroupTable::Restore(int64_t now_us) {
  if (storage_ == nullptr) return 0;
  size_t n = 0;
  for (const auto& [id, bytes] : storage_->Scan(kPgsTable)) {
    PlacementGroupEntry pg;
    if (!pg.info.ParseFromString(bytes)) continue;
    pg.created_us = now_us;
    if (!pg.info.spec().name().empty() &&
        pg.info.state() != proto::PlacementGroupInfo::FAILED) {
      by_name_[pg.info.spec().name()] = id;
    }
    if (pg.info.state() == proto::PlacementGroupInfo::PENDING) {
      pending_.push_back(id);
    }
    pgs_[id] = std::move(pg);
    ++n;
  }
  return n;
}

absl::Status PlacementGroupTable::Persist(const PlacementGroupEntry& pg) {
  if (storage_ == nullptr) return absl::OkStatus();
  absl::Status st = pg.info.state() == proto::PlacementGroupInfo::REMOVED
                        ? storage_->Delete(kPgsTable, pg.info.pg_id())
                        : storage_->Put(kPgsTable, pg.info.pg_id(),
                                        pg.info.SerializeAsString());
  if (!st.ok()) SHOAL_LOG(ERROR) << "cannot store placement group: " << st;
  return st;
}

absl::StatusOr<proto::PlacementGroupInfo> PlacementGroupTable::Create(
    const proto::PlacementGroupSpec& spec, const std::string& job_id,
    int64_t now_us) {
  if (spec.bundles().empty()) {
    return absl::InvalidArgumentError(
        "a placement group needs at least one bundle");
  }
  for (const auto& b : spec.bundles()) {
    if (ResourceSet::FromProto(b).empty()) {
      return absl::InvalidArgumentError(
          "every bundle of a placement group must ask for some resource, "
          "e.g. {\"CPU\": 1}");
    }
  }
  if (absl::Status st = BundleSelectors(spec).status(); !st.ok()) return st;
  if (!spec.name().empty() && by_name_.count(spec.name())) {
    return absl::AlreadyExistsError(
        absl::StrCat("a placement group named \"", spec.name(),
                     "\" exists; remove it first or pick another name"));
  }
  PlacementGroupEntry entry;
  entry.info.set_pg_id(RandomHex(6));
  *entry.info.mutable_spec() = spec;
  entry.info.set_job_id(job_id);
  entry.info.set_state(proto::PlacementGroupInfo::PENDING);
  entry.info.set_created_ms(NowMs());
  entry.created_us = now_us;
  const std::string id = entry.info.pg_id();
  // Kept before it is acknowledged.
  if (absl::Status st = Persist(entry); !st.ok()) return st;
  if (!spec.name().empty()) by_name_[spec.name()] = id;
  pgs_[id] = entry;
  pending_.push_back(id);
  return entry.info;
}

PlacementGroupEntry* PlacementGroupTable::Find(
    const proto::GetPlacementGroupRequest& r) {
  std::string id = r.pg_id();
  if (id.empty()) {
    auto n = by_name_.find(r.name());
    if (n == by_name_.end()) return nullptr;
    id = n->second;
  }
  return Find(id);
}

PlacementGroupEntry* PlacementGroupTable::Find(const std::string& pg_id) {
  auto it = pgs_.find(pg_id);
  return it == pgs_.end() ? nullptr : &it->second;
}

std::set<std::string> PlacementGroupTable::Remove(PlacementGroupEntry& pg) {
  // Created, or pending with the bundles a dead node did not take.
  std::set<std::string> nodes(pg.info.bundle_nodes().begin(),
                              pg.info.bundle_nodes().end());
  nodes.erase("");
  pg.info.clear_bundle_nodes();
  pg.info.set_state(proto::PlacementGroupInfo::REMOVED);
  by_name_.erase(pg.info.spec().name());
  pending_.erase(std::remove(pending_.begin(), pending_.end(), pg.info.pg_id()),
                 pending_.end());
  Persist(pg).IgnoreError();
  return nodes;
}

std::vector<std::string> PlacementGroupTable::GroupsOfJob(
    const std::string& job_id) const {
  std::vector<std::string> out;
  for (const auto& [id, pg] : pgs_) {
    if (pg.info.job_id() != job_id || pg.info.spec().detached() ||
        pg.info.state() == proto::PlacementGroupInfo::REMOVED) {
      continue;
    }
    out.push_back(id);
  }
  return out;
}

std::vector<std::string> PlacementGroupTable::LiveGroups() const {
  std::vector<std::string> out;
  for (const auto& [id, pg] : pgs_) {
    if (Live(pg.info)) out.push_back(id);
  }
  return out;
}

bool PlacementGroupTable::LoseBundles(const std::string& id,
                                      const proto::NodeInfo& dead,
                                      const std::string& why, int64_t now_us) {
  PlacementGroupEntry* pg = Find(id);
  if (pg == nullptr || !Live(pg->info) || dead.node_id().empty()) return false;
  std::vector<int> lost;
  for (int i = 0; i < pg->info.bundle_nodes_size(); ++i) {
    if (pg->info.bundle_nodes(i) == dead.node_id()) {
      lost.push_back(i);
      pg->info.set_bundle_nodes(i, "");
    }
  }
  if (lost.empty()) return false;
  if (pg->lost.empty()) {
    pg->lost_why =
        absl::StrCat(dead.node_id(), " at ", dead.address(), ": ", why);
  }
  pg->lost[dead.node_id()].insert(lost.begin(), lost.end());
  pg->info.set_error(
      absl::StrCat(pg->LostText(), "; being placed again on other nodes"));
  if (pg->info.state() == proto::PlacementGroupInfo::CREATED) {
    pg->info.set_state(proto::PlacementGroupInfo::PENDING);
    pg->created_us = now_us;
    pending_.push_back(id);
  }
  Persist(*pg).IgnoreError();
  SHOAL_LOG(WARNING) << "placement group " << id << ": " << pg->info.error();
  return true;
}

std::set<std::string> PlacementGroupTable::StaleGroups(
    const proto::NodeInfo& node) const {
  std::set<std::string> stale;
  for (const auto& [name, amount] : node.total().amounts()) {
    BundleResource b;
    if (!ParseBundleResource(name, &b)) continue;
    auto pg = pgs_.find(b.group_id);
    const bool held =
        pg != pgs_.end() && Live(pg->second.info) &&
        std::find(pg->second.info.bundle_nodes().begin(),
                  pg->second.info.bundle_nodes().end(),
                  node.node_id()) != pg->second.info.bundle_nodes().end();
    if (!held) stale.insert(b.group_id);
  }
  return stale;
}

std::optional<std::string> PlacementGroupTable::NextPending() {
  if (pending_.empty()) return std::nullopt;
  std::string id = pending_.front();
  pending_.pop_front();
  return id;
}

PlacementPlan PlacementGroupTable::Plan(const std::string& id,
                                        const NodesFn& nodes, int64_t now_us,
                                        int64_t grace_us) {
  PlacementPlan plan;
  PlacementGroupEntry* pg = Find(id);
  if (pg == nullptr || pg->info.state() != proto::PlacementGroupInfo::PENDING) {
    return plan;
  }
  const auto& spec = pg->info.spec();
  plan.bundle_nodes.resize(spec.bundles_size());
  std::vector<int> to_place;  // bundle indices without a node
  std::set<std::string> kept;
  std::vector<ResourceSet> bundles;
  // Checked when the group was made.
  const std::vector<LabelSelector> all_selectors =
      BundleSelectors(spec).value_or(std::vector<LabelSelector>());
  std::vector<LabelSelector> selectors;
  for (int i = 0; i < spec.bundles_size(); ++i) {
    if (i < pg->info.bundle_nodes_size()) {
      plan.bundle_nodes[i] = pg->info.bundle_nodes(i);
    }
    if (plan.bundle_nodes[i].empty()) {
      to_place.push_back(i);
      bundles.push_back(ResourceSet::FromProto(spec.bundles(i)));
      if (!all_selectors.empty()) selectors.push_back(all_selectors[i]);
    } else {
      kept.insert(plan.bundle_nodes[i]);
    }
  }
  auto candidates = [&](bool use_totals) {
    std::vector<PlacementNode> out = nodes(use_totals);
    std::erase_if(
        out, [&](const PlacementNode& n) { return kept.count(n.node_id) > 0; });
    return out;
  };
  const auto strategy = static_cast<PlacementStrategy>(spec.strategy());
  auto placed = PlaceBundles(bundles, strategy, candidates(false), selectors);
  if (placed) {
    plan.kind = PlacementPlan::kReserve;
    for (size_t k = 0; k < to_place.size(); ++k) {
      plan.bundle_nodes[to_place[k]] = (*placed)[k];
      plan.by_node[(*placed)[k]].emplace_back(to_place[k],
                                              spec.bundles(to_place[k]));
    }
    return plan;
  }
  const std::vector<PlacementNode> idle = candidates(true);
  const bool feasible =
      PlaceBundles(bundles, strategy, idle, selectors).has_value();
  if (feasible || now_us - pg->created_us <= grace_us) {
    plan.kind = PlacementPlan::kWait;
    pending_.push_back(id);
    return plan;
  }
  plan.kind = PlacementPlan::kFailed;
  pg->info.set_state(proto::PlacementGroupInfo::FAILED);
  pg->info.set_error(absl::StrCat(
      "placement group ", spec.name().empty() ? id : spec.name(), " (",
      StrategyName(strategy), ", ", spec.bundles_size(),
      " bundles) cannot be placed on the cluster's nodes even when "
      "they are idle; ",
      UnmatchedSelectors(to_place, selectors, idle),
      "ask for smaller bundles, another strategy, or add nodes",
      pg->lost.empty() ? "" : absl::StrCat(": ", pg->LostText()),
      kept.empty() ? ""
                   : "; its other bundles stay reserved, with the work "
                     "in them, until the group is removed or its job "
                     "ends"));
  by_name_.erase(spec.name());
  Persist(*pg).IgnoreError();
  SHOAL_LOG(WARNING) << pg->info.error();
  return plan;
}

void PlacementGroupTable::Created(
    const std::string& id, const std::vector<std::string>& bundle_nodes) {
  PlacementGroupEntry* pg = Find(id);
  if (pg == nullptr) return;
  pg->info.set_state(proto::PlacementGroupInfo::CREATED);
  pg->info.clear_error();
  pg->lost.clear();
  pg->info.clear_bundle_nodes();
  for (const auto& node : bundle_nodes) pg->info.add_bundle_nodes(node);
  Persist(*pg).IgnoreError();
}

void PlacementGroupTable::AddToStatus(proto::ClusterStatus* status,
                                      int64_t now_us) const {
  for (const auto& [id, pg] : pgs_) {
    if (!Live(pg.info)) continue;
    proto::PlacementGroupInfo* info = status->add_placement_groups();
    *info = pg.info;
    info->set_age_ms((now_us - pg.created_us) / 1000);
  }
}

}  // namespace shoal
