#include "agent/lease_queue.h"

#include <algorithm>
#include <map>
#include <utility>

namespace shoal::agent {

void LeaseQueue::Push(PendingLease p) {
  // Most requests are as deep as the last one queued: this finds the end
  // in O(log n).
  auto at = std::upper_bound(queue_.begin(), queue_.end(), p.request.depth(),
                             [](int32_t depth, const PendingLease& q) {
                               return depth > q.request.depth();
                             });
  queue_.insert(at, std::move(p));
}

std::deque<PendingLease> LeaseQueue::TakeAll() {
  std::deque<PendingLease> all;
  all.swap(queue_);
  return all;
}

PendingLease* LeaseQueue::Find(uint64_t seq) {
  auto it = std::find_if(queue_.begin(), queue_.end(),
                         [seq](const PendingLease& p) { return p.seq == seq; });
  return it == queue_.end() ? nullptr : &*it;
}

void LeaseQueue::Erase(uint64_t seq) {
  auto it = std::find_if(queue_.begin(), queue_.end(),
                         [seq](const PendingLease& p) { return p.seq == seq; });
  if (it != queue_.end()) queue_.erase(it);
}

std::optional<PendingLease> LeaseQueue::Take(uint64_t conn_id,
                                             const std::string& request_id) {
  if (request_id.empty()) return std::nullopt;
  auto it =
      std::find_if(queue_.begin(), queue_.end(), [&](const PendingLease& p) {
        return p.connection_id() == conn_id &&
               p.request.request_id() == request_id;
      });
  if (it == queue_.end()) return std::nullopt;
  PendingLease p = std::move(*it);
  queue_.erase(it);
  return p;
}

size_t LeaseQueue::DropConnection(uint64_t conn_id) {
  auto kept = std::stable_partition(queue_.begin(), queue_.end(),
                                    [conn_id](const PendingLease& p) {
                                      return p.connection_id() != conn_id;
                                    });
  size_t dropped = static_cast<size_t>(queue_.end() - kept);
  queue_.erase(kept, queue_.end());
  return dropped;
}

void LeaseQueue::FillDemands(proto::HeartbeatRequest* request) const {
  std::map<std::pair<std::string, bool>, proto::ResourceDemand> by_shape;
  for (const PendingLease& p : queue_) {
    auto key = std::make_pair(p.ask.shape.DebugString(), p.infeasible);
    auto [it, added] = by_shape.emplace(key, proto::ResourceDemand());
    if (added) {
      p.ask.shape.ToProto(it->second.mutable_shape());
      it->second.set_infeasible(p.infeasible);
    }
    it->second.set_count(it->second.count() + 1);
  }
  for (auto& [k, d] : by_shape) *request->add_demands() = d;
}

}  // namespace shoal::agent
