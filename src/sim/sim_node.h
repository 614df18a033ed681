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
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "accel/accelerator_manager.h"
#include "agent/bundle_reservations.h"
#include "agent/lease_queue.h"
#include "agent/lease_table.h"
#include "agent/node_resources.h"
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

class SimNode {
 public:
  // REQUIRES: `shared` outlives this.
  SimNode(SimShared* shared, SimNodeSpec spec);
  ~SimNode();

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

  void RequestLease(const proto::RequestLeaseRequest& r, rpc::Responder resp);
  bool TryPlace(agent::PendingLease& p);
  void Grant(agent::PendingLease& p);
  void Dispatch();
  void EnsureDispatchTimer(int64_t at_us);
  void ReleaseLease(const std::string& lease_id, const std::string& why);
  void OnDisconnect(uint64_t conn);
  absl::Status PrepareBundles(const proto::BundleReservation& r);
  void CancelBundles(const std::string& pg);
  void PushTask(const proto::TaskSpec& spec, rpc::Responder resp);

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

  agent::NodeResources node_;
  agent::LeaseTable leases_;
  agent::BundleReservations bundles_;
  agent::LeaseQueue pending_;
  uint64_t next_request_seq_ = 0;
  uint64_t dispatch_timer_ = 0;
  int64_t dispatch_timer_at_ = 0;
  // Fake workers that ended, for GET_WORKER_EXIT (the last few).
  std::map<std::string, std::string> exits_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace shoal::sim

#endif  // SHOAL_SIM_SIM_NODE_H_
