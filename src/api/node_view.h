// The driver's view of the cluster's nodes: which agent to ask for leases
// (one on this host when there is one), agents that stopped answering, and
// one channel per agent. Runs on the runtime's loop thread only.
#ifndef SHOAL_API_NODE_VIEW_H_
#define SHOAL_API_NODE_VIEW_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "rpc/rpc.h"
#include "shoal/shoal.pb.h"

namespace shoal::internal {

class NodeView {
 public:
  struct Options {
    std::string token;
    std::string peer_name;  // how agents name this process in their logs
    // How long an agent that failed stays out of use while the head still
    // reports it alive.
    int64_t bad_agent_retry_us = 2000000;
    // Seams for tests.
    rpc::ChannelFactory* channels = nullptr;  // null: TcpChannels on the loop
    std::function<int64_t()> now_us;          // MonotonicUs
    std::function<bool(const std::string& ip)> is_local;  // IsLocalAddress
  };
  NodeView(rpc::EventLoop* loop, Options options);
  NodeView(const NodeView&) = delete;
  NodeView& operator=(const NodeView&) = delete;

  // The head's answer: the nodes, alive or dead. Agents that failed but
  // are alive to the head get another chance once bad_agent_retry_us has
  // passed.
  void Update(const proto::ClusterStatus& status);
  // The agent to ask for leases ("" when no node is usable): on this host
  // when one runs here, else any alive one.
  const std::string& lease_agent() const { return lease_agent_; }
  // An agent on this host, whose object store this process uses ("" for
  // none).
  std::string LocalAgent() const;
  // `agent` did not answer: out of use until the head says it is alive
  // again (and the retry time has passed).
  void MarkBad(const std::string& agent);
  // Agents of nodes the head declared dead.
  std::set<std::string> DeadAgents() const;

  // Addresses by node id ("" when unknown).
  std::string AgentOf(const std::string& node_id) const;
  std::string TransferAddressOf(const std::string& node_id) const;
  // A lease from `agent` named its node.
  void NoteAgent(const std::string& node_id, const std::string& agent);

  // The channel to `agent`, made on first use.
  rpc::Channel* Channel(const std::string& agent);
  // A new channel to `address` (a worker), the caller's own.
  std::unique_ptr<rpc::Channel> Connect(const std::string& address);
  void CloseChannels() { channels_.clear(); }

 private:
  void ChooseLeaseAgent();

  rpc::EventLoop* const loop_;
  Options options_;
  std::vector<proto::NodeInfo> nodes_;
  std::string lease_agent_;
  std::map<std::string, int64_t> bad_agents_;            // -> when it failed
  std::map<std::string, std::string> agent_of_node_;     // node id -> address
  std::map<std::string, std::string> transfer_of_node_;  // -> transfer port
  std::map<std::string, std::unique_ptr<rpc::Channel>> channels_;
};

}  // namespace shoal::internal

#endif  // SHOAL_API_NODE_VIEW_H_
