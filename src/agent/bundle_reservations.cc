#include "agent/bundle_reservations.h"

#include "absl/strings/str_cat.h"

namespace shoal::agent {

BundleReservations::BundleReservations(std::string node_id, NodeResources* node)
    : node_id_(std::move(node_id)), node_(node) {}

absl::Status BundleReservations::Prepare(const std::string& pg,
                                         const std::vector<Bundle>& bundles) {
  if (IsPrepared(pg) || IsCommitted(pg)) return absl::OkStatus();  // a retry
  Reservation res;
  res.bundles = bundles;
  for (const auto& [index, shape] : bundles) res.held.Add(shape);
  if (!node_->Unlent().Contains(res.held)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "node ", node_id_, " no longer has ", res.held.DebugString(), " free"));
  }
  node_->available.Subtract(res.held);
  prepared_[pg] = std::move(res);
  return absl::OkStatus();
}

absl::Status BundleReservations::Commit(const std::string& pg) {
  if (IsCommitted(pg)) return absl::OkStatus();
  auto it = prepared_.find(pg);
  if (it == prepared_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "placement group ", pg, " has no prepared bundles on node ", node_id_,
        " (they expired); the head will place it again"));
  }
  Reservation res = std::move(it->second);
  prepared_.erase(it);
  for (const auto& [index, shape] : res.bundles) {
    for (const auto& [name, amount] : shape.amounts()) {
      res.added.Set(absl::StrCat(name, "_group_", index, "_", pg), amount);
      std::string any = absl::StrCat(name, "_group_", pg);
      res.added.Set(any, res.added.Get(any) + amount);
    }
  }
  node_->total.Add(res.added);
  node_->available.Add(res.added);
  committed_[pg] = std::move(res);
  return absl::OkStatus();
}

void BundleReservations::Cancel(const std::string& pg) {
  if (auto it = prepared_.find(pg); it != prepared_.end()) {
    node_->available.Add(it->second.held);
    prepared_.erase(it);
  }
  if (auto it = committed_.find(pg); it != committed_.end()) {
    node_->total.Subtract(it->second.added);
    node_->available.Subtract(it->second.added);
    node_->available.Add(it->second.held);
    committed_.erase(it);
  }
}

}  // namespace shoal::agent
