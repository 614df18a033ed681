#include "head/actor_attempts.h"

#include "rpc/channel.h"

namespace shoal {

ActorAttempt::ActorAttempt() = default;
ActorAttempt::~ActorAttempt() = default;
ActorAttempt::ActorAttempt(ActorAttempt&&) = default;
ActorAttempt& ActorAttempt::operator=(ActorAttempt&&) = default;

ActorAttempt& ActorAttempts::Get(const std::string& actor_id) {
  return attempts_[actor_id];
}

ActorAttempt* ActorAttempts::Find(const std::string& actor_id) {
  auto it = attempts_.find(actor_id);
  return it == attempts_.end() ? nullptr : &it->second;
}

ActorAttempt* ActorAttempts::Find(const std::string& actor_id,
                                  uint64_t number) {
  auto it = attempts_.find(actor_id);
  if (it == attempts_.end() || it->second.number != number) return nullptr;
  return &it->second;
}

std::unique_ptr<rpc::Channel> ActorAttempts::ForgetWorker(
    ActorAttempt& a, std::pair<std::string, std::string>* lease) {
  ++a.number;
  *lease = {a.agent, a.lease_id};
  if (a.lease_id.empty()) lease->first.clear();
  a.lease_id.clear();
  a.worker_id.clear();
  a.worker_address.clear();
  a.worker_pid = 0;
  return std::move(a.worker);
}

std::map<std::string, int64_t> ActorAttempts::ActorsPerNode() const {
  std::map<std::string, int64_t> per_node;
  for (const auto& [id, a] : attempts_) {
    if (!a.node_id.empty()) ++per_node[a.node_id];
  }
  return per_node;
}

void ActorAttempts::OnNode(
    const std::string& node_id,
    std::vector<std::pair<std::string, uint64_t>>* leased,
    std::vector<std::string>* placing) const {
  for (const auto& [id, a] : attempts_) {
    if (a.node_id != node_id) continue;
    if (!a.lease_id.empty()) {
      leased->emplace_back(id, a.number);
    } else if (a.placing) {
      placing->push_back(id);
    }
  }
}

bool ActorAttempts::HoldsAnotherLease(const std::string& actor_id,
                                      const std::string& lease_id) const {
  auto a = attempts_.find(actor_id);
  return a != attempts_.end() && !a->second.placing &&
         !a->second.lease_id.empty() && a->second.lease_id != lease_id;
}

std::string ActorAttempts::LeaseOf(const std::string& actor_id) const {
  auto a = attempts_.find(actor_id);
  return a == attempts_.end() ? "" : a->second.lease_id;
}

}  // namespace shoal
