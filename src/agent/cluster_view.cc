#include "agent/cluster_view.h"

#include "agent/lease_policy.h"

namespace shoal::agent {

void ClusterView::FillRequest(proto::HeartbeatRequest* request) const {
  request->set_view_epoch(epoch_);
  request->set_view_version(version_);
}

void ClusterView::Apply(const proto::HeartbeatReply& reply) {
  // A head without versions (epoch 0) sends every node each time.
  const bool full = reply.full_view() || reply.view_epoch() == 0;
  if (full) {
    nodes_.clear();
    index_.clear();
  }
  for (const proto::NodeInfo& n : reply.nodes()) {
    auto [it, added] = index_.emplace(n.node_id(), nodes_.size());
    proto::NodeInfo& held = added ? nodes_.emplace_back() : nodes_[it->second];
    held = n;
    // Left out by the head when the node is idle: all of it is available.
    if (!held.has_available()) *held.mutable_available() = held.total();
  }
  epoch_ = reply.view_epoch();
  version_ = reply.view_version();
  if (full || reply.nodes_size() > 0 || spilled_) {
    adjusted_ = nodes_;
    spilled_ = false;
  }
}

void ClusterView::Reset() {
  epoch_ = 0;
  version_ = 0;
}

void ClusterView::CountSpillback(const std::string& node_id,
                                 const ResourceSet& shape) {
  agent::CountSpillback(node_id, shape, &adjusted_);
  spilled_ = true;
}

}  // namespace shoal::agent
