// One simulated node agent (sim/sim_nodes.h says what is real and what is
// simulated): its server, its connection to the head, its books.
//
// Threading: lives on the SimNodes event loop; not thread-safe. Every
// method is called on that loop.
#ifndef SHOAL_SIM_SIM_NODE_H_
#define SHOAL_SIM_SIM_NODE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "accel/accelerator_manager.h"
#include "agent/lease_service.h"
#include "rpc/event_loop.h"
#include "rpc/rpc.h"
#include "sim/sim_nodes.h"

namespace shoal::sim {

// What every node of one SimNodes shares.
struct SimShared {
  rpc::EventLoop* loop = nullptr;
  SimNodesOptions options;
  // Validates TPU requests (every host of the type has the same chips);
  // empty for CPU hosts.
  std::vector<std::shared_ptr<const accel::AcceleratorManager>> accelerators;
  SimStats stats;  // loop only
};

// Its leases and bundles are the agent's own LeaseService; the node is
// that service's WorkerLauncher, of simulated workers: each lease starts
// one at once, whose address is the node's server.
class SimNode : public agent::WorkerLauncher {
 public:
  // REQUIRES: `shared` outlives this.
  SimNode(SimShared* shared, SimNodeSpec spec);
  ~SimNode() override;

  // Listens (the node's address); registers later, with Register().
  absl::Status Listen();
  // Registers with the head; `done` hears how it went (an unreachable head
  // is tried again by the caller). Starts the heartbeats once registered.
  void Register(std::function<void(absl::Status)> done);
  // Unregisters (answered or not within `timeout_ms`), then `done`.
  void Unregister(int64_t timeout_ms, std::function<void()> done);
  // Stops heartbeats and closes the server and the head connection.
  void Close();

  bool registered() const { return registered_; }
  const std::string& node_id() const { return spec_.node_id; }

 private:
  proto::NodeInfo SelfInfo() const;
  void RegisterHandlers();
  void ScheduleHeartbeat(int64_t delay_ms);
  void ReportSoon();
  void SendHeartbeat(bool periodic);
  void SetViewWhole(bool whole);
  void OnUnknownNode();

  void PushTask(const proto::TaskSpec& spec, rpc::Responder resp);

  // agent::WorkerLauncher, of simulated workers:
  absl::Status ClaimDevices(const agent::DeviceIds& devices) override;
  std::optional<agent::WorkerAddress> Reuse(
      const agent::Lease& lease,
      const proto::RequestLeaseRequest& request) override;
  std::string Add(const agent::Lease& lease,
                  const proto::RequestLeaseRequest& request) override;
  void Start(const std::string& worker_id,
             const proto::RequestLeaseRequest& request) override;
  void LeaseEnded(const std::string& worker_id, bool kill,
                  const std::string& why) override;
  bool Knows(const std::string& worker_id) override;
  std::optional<std::string> ExitOf(const std::string& worker_id) override;
  void Describe(const std::string& worker_id,
                proto::LeaseInfo* info) const override;
  // A simulated worker runs no task code: there is nothing to stop.
  absl::Status CancelTask(const std::string& worker_id, int32_t token,
                          bool force, bool recursive) override;

  SimShared* const shared_;
  const SimNodeSpec spec_;
  std::string address_;
  std::unique_ptr<rpc::Server> server_;
  // Raw frames rather than rpc::HeadClient: the heartbeat reply's cluster
  // view is skipped, not parsed (see sim_nodes.h).
  std::unique_ptr<rpc::Channel> head_;
  bool registered_ = false;
  // The cluster view version of the last heartbeat reply.
  uint64_t view_epoch_ = 0;
  int64_t view_version_ = 0;
  bool registering_ = false;
  bool closed_ = false;
  bool view_whole_ = false;  // counted in stats.views_whole
  bool leaving_ = false;     // unregistered: no beat, no registration again
  int64_t heartbeat_ms_ = 500;
  uint64_t heartbeat_timer_ = 0;
  bool report_scheduled_ = false;

  std::unique_ptr<agent::Clock> clock_;
  std::unique_ptr<agent::LeaseService> leases_;  // made by Listen()
  // Fake workers that ended, for GET_WORKER_EXIT (the last few).
  std::map<std::string, std::string> exits_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace shoal::sim

#endif  // SHOAL_SIM_SIM_NODE_H_
