#include "head/node_table.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/random.h"
#include "scheduling/label_selector.h"
#include "scheduling/resource_set.h"

namespace shoal {
namespace {

// What an agent's view holds of a node: what its lease policy reads
// (agent/lease_policy.cc: resources and labels), about half of a
// NodeInfo's bytes. An idle node's
// available (all of its total) is left out, which halves its entry
// again: the agent takes a missing available as the total.
void AddViewNode(const proto::NodeInfo& info, proto::HeartbeatReply* reply) {
  proto::NodeInfo* n = reply->add_nodes();
  n->set_node_id(info.node_id());
  n->set_address(info.address());
  n->set_alive(info.alive());
  *n->mutable_total() = info.total();
  // For label selectors (agent/lease_policy.cc); the node-id label is the
  // node's id, which the entry has already.
  for (const auto& [key, value] : info.labels()) {
    if (key != kLabelNodeId) (*n->mutable_labels())[key] = value;
  }
  if (!info.alive() ||
      !NodeTable::SameAmounts(info.available(), info.total())) {
    *n->mutable_available() = info.available();
  }
}

}  // namespace

NodeTable::NodeTable(Clock clock, uint64_t view_epoch)
    : clock_(std::move(clock)), view_epoch_(view_epoch) {}

bool NodeTable::SameAmounts(const proto::ResourceMap& a,
                            const proto::ResourceMap& b) {
  if (a.amounts_size() != b.amounts_size()) return false;
  for (const auto& [name, amount] : a.amounts()) {
    auto it = b.amounts().find(name);
    if (it == b.amounts().end() || it->second != amount) return false;
  }
  return true;
}

absl::StatusOr<const NodeTable::Entry*> NodeTable::Register(
    proto::NodeInfo info) {
  if (info.address().empty()) {
    return absl::InvalidArgumentError(
        "a node must register with the address of its agent");
  }
  if (info.node_id().empty()) info.set_node_id(RandomHex(6));
  info.set_alive(true);
  info.set_start_time_ms(NowMs());
  if (!info.has_available()) *info.mutable_available() = info.total();
  Entry& entry = nodes_[info.node_id()];
  entry.info = std::move(info);
  ViewChanged(entry);
  entry.last_heartbeat_us = clock_();
  entry.demands.clear();
  return &entry;
}

void NodeTable::Restore(const proto::NodeInfo& info) {
  Entry& entry = nodes_[info.node_id()] = Entry();
  entry.info = info;
  entry.last_heartbeat_us = clock_();
  ViewChanged(entry);
}

bool NodeTable::Heartbeat(const proto::HeartbeatRequest& r) {
  auto it = nodes_.find(r.node_id());
  if (it == nodes_.end() || !it->second.info.alive()) return false;
  Entry& e = it->second;
  e.last_heartbeat_us = clock_();
  bool changed = !SameAmounts(e.info.available(), r.available());
  if (changed) *e.info.mutable_available() = r.available();
  if (r.has_total() && !SameAmounts(e.info.total(), r.total())) {
    *e.info.mutable_total() = r.total();
    changed = true;
  }
  if (changed) ViewChanged(e);
  e.demands.assign(r.demands().begin(), r.demands().end());
  e.leases.assign(r.leases().begin(), r.leases().end());
  return true;
}

const NodeTable::Entry* NodeTable::MarkDead(const std::string& node_id,
                                            const std::string& reason) {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end() || !it->second.info.alive()) return nullptr;
  Entry& e = it->second;
  e.info.set_alive(false);
  e.info.set_death_reason(reason);
  e.info.mutable_available()->clear_amounts();
  ViewChanged(e);
  e.demands.clear();
  e.leases.clear();
  return &e;
}

std::vector<std::string> NodeTable::Silent(int64_t timeout_ms) const {
  const int64_t now = clock_();
  std::vector<std::string> silent;
  for (const auto& [id, n] : nodes_) {
    if (n.info.alive() && now - n.last_heartbeat_us > timeout_ms * 1000) {
      silent.push_back(id);
    }
  }
  return silent;
}

std::string NodeTable::FillView(uint64_t epoch, int64_t version,
                                proto::HeartbeatReply* reply) {
  reply->set_view_epoch(view_epoch_);
  const bool whole =
      epoch != view_epoch_ || version <= 0 || version > view_version_;
  const int64_t from = whole ? 0 : version;
  const int64_t now = clock_();
  if (now - view_bytes_since_us_ >= 1000000) {
    view_bytes_since_us_ = now;
    view_bytes_ = 0;
  }
  std::string body;
  int64_t reached = from;
  auto c = view_changes_.upper_bound(from);
  for (; c != view_changes_.end() && body.size() < kViewPageBytes &&
         view_bytes_ < kViewBytesPerS;
       ++c) {
    const std::string& entry = nodes_.at(c->second).view_entry;
    body += entry;
    view_bytes_ += static_cast<int64_t>(entry.size());
    reached = c->first;
  }
  if (c == view_changes_.end()) reached = view_version_;
  reply->set_view_version(reached);
  reply->set_full_view(whole && reached > 0);
  return body;
}

void NodeTable::ViewChanged(Entry& e) {
  if (e.view_version != 0) view_changes_.erase(e.view_version);
  e.view_version = ++view_version_;
  view_changes_[e.view_version] = e.info.node_id();
  proto::HeartbeatReply one;
  AddViewNode(e.info, &one);
  e.view_entry = one.SerializeAsString();
}

const NodeTable::Entry* NodeTable::Find(const std::string& node_id) const {
  auto it = nodes_.find(node_id);
  return it == nodes_.end() ? nullptr : &it->second;
}

const NodeTable::Entry* NodeTable::FindAlive(const std::string& node_id) const {
  const Entry* e = Find(node_id);
  return e != nullptr && e->info.alive() ? e : nullptr;
}

std::string NodeTable::HeadNodeId() const {
  std::string id;
  for (const auto& [node_id, n] : nodes_) {
    if (n.info.alive() && n.info.is_head_node()) id = node_id;
  }
  return id;
}

std::vector<std::pair<std::string, std::string>> NodeTable::AliveAgents(
    const std::string& node_id) const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [id, n] : nodes_) {
    if (n.info.alive() && (node_id.empty() || id == node_id)) {
      out.emplace_back(id, n.info.address());
    }
  }
  return out;
}

std::vector<PlacementNode> NodeTable::PlacementNodes(bool use_totals) const {
  std::vector<std::pair<std::string, const proto::NodeInfo*>> alive;
  for (const auto& [id, n] : nodes_) {
    if (!n.info.alive()) continue;
    auto w = n.info.labels().find("shoal.io/tpu-worker-id");
    std::string key =
        w != n.info.labels().end()
            ? absl::StrCat(
                  "0/",
                  std::string(8 - std::min<size_t>(8, w->second.size()), '0'),
                  w->second)
            : absl::StrCat("1/", n.info.address());
    alive.emplace_back(key, &n.info);
  }
  std::sort(alive.begin(), alive.end());
  std::vector<PlacementNode> out;
  for (const auto& [key, n] : alive) {
    out.push_back(
        {n->node_id(),
         ResourceSet::FromProto(use_totals ? n->total() : n->available()), n});
  }
  return out;
}

void NodeTable::AddToStatus(proto::ClusterStatus* status,
                            const LabelSelector* selector, bool details) const {
  std::map<std::string, proto::ResourceDemand> demands;
  const int64_t now_us = clock_();
  for (const auto& [id, n] : nodes_) {
    if (selector != nullptr && !selector->Matches(n.info)) continue;
    proto::NodeInfo* info = status->add_nodes();
    *info = n.info;
    if (!n.info.alive()) continue;
    info->set_heartbeat_age_ms((now_us - n.last_heartbeat_us) / 1000);
    if (!details) continue;
    for (const auto& l : n.leases) *status->add_leases() = l;
    for (const auto& d : n.demands) {
      std::string key = absl::StrCat(
          ResourceSet::FromProto(d.shape()).DebugString(), d.infeasible());
      auto [it, added] = demands.emplace(key, d);
      if (!added) it->second.set_count(it->second.count() + d.count());
    }
  }
  for (auto& [k, d] : demands) *status->add_demands() = d;
}

}  // namespace shoal
