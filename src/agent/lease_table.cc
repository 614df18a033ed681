#include "agent/lease_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "shoal/shoal.pb.h"

namespace shoal::agent {

ResourceSet LendableCpu(const ResourceSet& shape) {
  ResourceSet cpu;
  for (const auto& [name, amount] : shape.amounts()) {
    BundleResource bundle;
    std::string base = ParseBundleResource(name, &bundle) ? bundle.base : name;
    if (base == "CPU") cpu.Set(name, amount);
  }
  return cpu;
}

LeaseTable::LeaseTable(NodeResources* node) : node_(node) {}

const Lease& LeaseTable::Add(Lease lease) {
  lease.blocked = false;
  lease.lent = ResourceSet();
  node_->available.Subtract(lease.shape);
  std::string id = lease.id;
  return leases_[id] = std::move(lease);
}

std::optional<Lease> LeaseTable::Remove(const std::string& lease_id) {
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return std::nullopt;
  Lease lease = std::move(it->second);
  leases_.erase(it);
  // What it lends is on the node already.
  node_->available.Add(lease.shape);
  node_->available.Subtract(lease.lent);
  node_->lent.Subtract(lease.lent);
  CountLent(lease.blocked_depth, lease.lent, /*add=*/false);
  return lease;
}

BlockResult LeaseTable::Block(const std::string& lease_id, int depth) {
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return BlockResult::kUnknownLease;
  Lease& lease = it->second;
  if (lease.blocked) {
    if (lease.blocked_depth == depth) return BlockResult::kAlreadyBlocked;
    CountLent(lease.blocked_depth, lease.lent, /*add=*/false);
    CountLent(depth, lease.lent, /*add=*/true);
    lease.blocked_depth = depth;
    return lease.lent.empty() ? BlockResult::kAlreadyBlocked
                              : BlockResult::kLent;
  }
  lease.blocked = true;
  lease.blocked_depth = depth;
  lease.lent = LendableCpu(lease.shape);
  if (lease.lent.empty()) return BlockResult::kNothingToLend;
  node_->available.Add(lease.lent);
  node_->lent.Add(lease.lent);
  CountLent(depth, lease.lent, /*add=*/true);
  return BlockResult::kLent;
}

bool LeaseTable::Unblock(const std::string& lease_id) {
  auto it = leases_.find(lease_id);
  if (it == leases_.end() || !it->second.blocked) return false;
  Lease& lease = it->second;
  lease.blocked = false;
  StopLending(lease);
  return true;
}

void LeaseTable::StopLending(Lease& lease) {
  node_->available.Subtract(lease.lent);
  node_->lent.Subtract(lease.lent);
  CountLent(lease.blocked_depth, lease.lent, /*add=*/false);
  lease.lent = ResourceSet();
}

void LeaseTable::CountLent(int depth, const ResourceSet& lent, bool add) {
  if (lent.empty()) return;
  ResourceSet& at = lent_by_depth_[depth];
  if (add) {
    at.Add(lent);
  } else {
    at.Subtract(lent);
  }
  if (at.empty()) lent_by_depth_.erase(depth);
}

ResourceSet LeaseTable::Withheld(int depth) const {
  ResourceSet withheld;
  for (auto it = lent_by_depth_.lower_bound(depth); it != lent_by_depth_.end();
       ++it) {
    withheld.Add(it->second);
  }
  return withheld;
}

const Lease* LeaseTable::Find(const std::string& lease_id) const {
  auto it = leases_.find(lease_id);
  return it == leases_.end() ? nullptr : &it->second;
}

std::vector<std::string> LeaseTable::HeldBy(uint64_t conn_id) const {
  std::vector<std::string> ids;
  for (const auto& [id, lease] : leases_) {
    if (lease.conn_id == conn_id) ids.push_back(id);
  }
  return ids;
}

std::vector<std::string> LeaseTable::InGroup(const std::string& pg) const {
  std::vector<std::string> ids;
  for (const auto& [id, lease] : leases_) {
    for (const auto& [name, amount] : lease.shape.amounts()) {
      if (absl::EndsWith(name, "_" + pg)) {
        ids.push_back(id);
        break;
      }
    }
  }
  return ids;
}

void LeaseTable::FillLeases(const std::string& node_id, int64_t now_us,
                            proto::HeartbeatRequest* request) const {
  for (const auto& [id, lease] : leases_) {
    proto::LeaseInfo* info = request->add_leases();
    info->set_lease_id(id);
    info->set_node_id(node_id);
    info->set_job_id(lease.job_id);
    info->set_worker_id(lease.worker_id);
    info->set_owner(lease.owner);
    info->set_age_ms((now_us - lease.granted_us) / 1000);
    info->set_actor_id(lease.actor_id);
    info->set_blocked(lease.blocked);
    lease.shape.ToProto(info->mutable_shape());
  }
}

}  // namespace shoal::agent
