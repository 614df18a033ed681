#include "agent/lease_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"

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

bool LentBack(const Lease& lease) {
  return lease.blocked &&
         (!lease.lent.empty() || LendableCpu(lease.shape).empty());
}

int DefaultMaxBlockedWorkers(const ResourceSet& total) {
  int64_t cpus = total.Get("CPU") / kResourceUnit;
  return static_cast<int>(std::clamp<int64_t>(8 * cpus, 32, 1 << 20));
}

LeaseTable::LeaseTable(NodeResources* node, int max_blocked_workers)
    : node_(node), max_blocked_workers_(max_blocked_workers) {}

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
  std::erase(waiting_to_lend_, lease_id);
  // What it lends is on the node already.
  node_->available.Add(lease.shape);
  node_->available.Subtract(lease.lent);
  if (!lease.lent.empty()) {
    --lending_;
    LendWaiting();
  }
  return lease;
}

BlockResult LeaseTable::Block(const std::string& lease_id) {
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return BlockResult::kUnknownLease;
  Lease& lease = it->second;
  if (lease.blocked) return BlockResult::kAlreadyBlocked;
  lease.blocked = true;
  if (LendableCpu(lease.shape).empty()) return BlockResult::kNothingToLend;
  if (lending_ >= max_blocked_workers_) {
    waiting_to_lend_.push_back(lease_id);
    return BlockResult::kCapReached;
  }
  Lend(lease);
  return BlockResult::kLent;
}

bool LeaseTable::Unblock(const std::string& lease_id) {
  auto it = leases_.find(lease_id);
  if (it == leases_.end() || !it->second.blocked) return false;
  Lease& lease = it->second;
  lease.blocked = false;
  std::erase(waiting_to_lend_, lease_id);
  if (!lease.lent.empty()) {
    StopLending(lease);
    LendWaiting();
  }
  return true;
}

void LeaseTable::Lend(Lease& lease) {
  lease.lent = LendableCpu(lease.shape);
  node_->available.Add(lease.lent);
  ++lending_;
}

void LeaseTable::StopLending(Lease& lease) {
  node_->available.Subtract(lease.lent);
  lease.lent = ResourceSet();
  --lending_;
}

void LeaseTable::LendWaiting() {
  while (lending_ < max_blocked_workers_ && !waiting_to_lend_.empty()) {
    auto it = leases_.find(waiting_to_lend_.front());
    waiting_to_lend_.pop_front();
    if (it != leases_.end() && it->second.blocked && it->second.lent.empty()) {
      Lend(it->second);
    }
  }
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

}  // namespace shoal::agent
