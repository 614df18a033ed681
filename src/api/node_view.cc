#include "api/node_view.h"

#include "common/clock.h"
#include "common/net.h"

namespace shoal::internal {

NodeView::NodeView(rpc::EventLoop* loop, Options options)
    : loop_(loop), options_(std::move(options)) {
  if (!options_.now_us) options_.now_us = MonotonicUs;
  if (!options_.is_local) options_.is_local = IsLocalAddress;
}

void NodeView::Update(const proto::ClusterStatus& status) {
  int64_t now = options_.now_us();
  for (const auto& n : status.nodes()) {
    auto bad = bad_agents_.find(n.address());
    if (n.alive() && bad != bad_agents_.end() &&
        now - bad->second > options_.bad_agent_retry_us) {
      bad_agents_.erase(bad);
    }
  }
  nodes_.assign(status.nodes().begin(), status.nodes().end());
  for (const auto& n : nodes_) {
    agent_of_node_[n.node_id()] = n.address();
    transfer_of_node_[n.node_id()] = n.object_transfer_address();
  }
  ChooseLeaseAgent();
}

void NodeView::ChooseLeaseAgent() {
  auto usable = [&](const proto::NodeInfo& n) {
    return n.alive() && !bad_agents_.count(n.address());
  };
  // Keep the one in use while it is usable.
  for (const auto& n : nodes_) {
    if (n.address() == lease_agent_ && usable(n)) return;
  }
  lease_agent_.clear();
  for (const auto& n : nodes_) {
    if (usable(n) && options_.is_local(n.node_ip())) {
      lease_agent_ = n.address();
      return;
    }
  }
  for (const auto& n : nodes_) {
    if (usable(n)) {
      lease_agent_ = n.address();
      return;
    }
  }
}

std::string NodeView::LocalAgent() const {
  for (const auto& n : nodes_) {
    if (n.alive() && options_.is_local(n.node_ip())) return n.address();
  }
  return "";
}

void NodeView::MarkBad(const std::string& agent) {
  bad_agents_[agent] = options_.now_us();
  if (lease_agent_ == agent) ChooseLeaseAgent();
}

std::set<std::string> NodeView::DeadAgents() const {
  std::set<std::string> dead;
  for (const auto& n : nodes_) {
    if (!n.alive()) dead.insert(n.address());
  }
  return dead;
}

std::string NodeView::AgentOf(const std::string& node_id) const {
  auto it = agent_of_node_.find(node_id);
  return it == agent_of_node_.end() ? "" : it->second;
}

std::string NodeView::TransferAddressOf(const std::string& node_id) const {
  auto it = transfer_of_node_.find(node_id);
  return it == transfer_of_node_.end() ? "" : it->second;
}

void NodeView::NoteAgent(const std::string& node_id, const std::string& agent) {
  agent_of_node_[node_id] = agent;
}

rpc::Channel* NodeView::Channel(const std::string& agent) {
  auto& channel = channels_[agent];
  if (channel == nullptr) channel = Connect(agent);
  return channel.get();
}

std::unique_ptr<rpc::Channel> NodeView::Connect(const std::string& address) {
  if (options_.channels != nullptr) return options_.channels->Connect(address);
  return std::make_unique<rpc::TcpChannel>(loop_, address, options_.token,
                                           options_.peer_name);
}

}  // namespace shoal::internal
