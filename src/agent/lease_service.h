// A node's worker leases and placement-group bundles: what REQUEST_LEASE,
// CANCEL_LEASE_REQUEST, RETURN_LEASE, PREPARE/COMMIT/CANCEL_BUNDLES and
// GET_WORKER_EXIT do, and the bookkeeping around them (queued requests,
// granted leases, the devices they hold, blocked workers' lent CPU, a
// requester that leaves, a worker that dies mid-lease).
//
// Each request is decided by DecideLease (agent/lease_policy.h): granted
// here, spilled back to a node of the cluster view, failed, or queued and
// tried again whenever resources change or at the time the policy names. A
// grant takes the lease's devices (DeviceAllocator) and a worker from the
// WorkerLauncher: an idle one that fits, or a new one, whose requester hears
// GRANTED once it has started (WorkerStarted) or FAILED if it cannot.
//
// The node agent gives it a launcher of real processes (ProcessWorkers);
// the simulator (`shoal dev sim-nodes`) one of simulated workers. The RPC
// plumbing is in agent/lease_rpc.h, so that this is tested without sockets,
// with a fake launcher and a hand-driven clock.
//
// Threading: lives on the node's event loop; not thread-safe. Timers and
// callbacks that outlive it do nothing.
#ifndef SHOAL_AGENT_LEASE_SERVICE_H_
#define SHOAL_AGENT_LEASE_SERVICE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "agent/bundle_reservations.h"
#include "agent/clock.h"
#include "agent/device_allocator.h"
#include "agent/lease_queue.h"
#include "agent/lease_table.h"
#include "agent/node_resources.h"
#include "scheduling/resource_set.h"
#include "shoal/shoal.pb.h"

namespace shoal::agent {

class ClusterView;
struct LeaseDecision;

// A leased worker as its requester hears of it.
struct WorkerAddress {
  std::string id;
  std::string address;  // host:port, where tasks are pushed
  int64_t pid = 0;
};

// What the service needs of workers: to start one for a lease, reuse an
// idle one, end or keep one when its lease ends, and say how one ended.
class WorkerLauncher {
 public:
  virtual ~WorkerLauncher() = default;
  // Makes `devices` ready for a new lease (the agent clears a libtpu lock a
  // dead process left); an error fails the request (FAILED) with its
  // message.
  virtual absl::Status ClaimDevices(const DeviceIds& devices) = 0;
  // An idle worker that may serve `lease` (same job, program and devices),
  // now leased to it; nullopt when there is none.
  virtual std::optional<WorkerAddress> Reuse(
      const Lease& lease, const proto::RequestLeaseRequest& request) = 0;
  // Records a new worker for `lease`; its id. Start follows.
  virtual std::string Add(const Lease& lease,
                          const proto::RequestLeaseRequest& request) = 0;
  // Starts worker `worker_id`. The launcher's owner then tells the service
  // WorkerStarted or StartFailed, later or within this call.
  virtual void Start(const std::string& worker_id,
                     const proto::RequestLeaseRequest& request) = 0;
  // The worker's lease ended: end the worker (`why`: for its exit) when
  // `kill`, else keep it for the next lease of its kind.
  virtual void LeaseEnded(const std::string& worker_id, bool kill,
                          const std::string& why) = 0;
  // Whether the worker exists (starting, leased or idle).
  virtual bool Knows(const std::string& worker_id) = 0;
  // How the worker ended, if it did and is still remembered.
  virtual std::optional<std::string> ExitOf(const std::string& worker_id) = 0;
  // Adds what a heartbeat tells of the worker (its pid, still starting).
  virtual void Describe(const std::string& worker_id,
                        proto::LeaseInfo* info) const = 0;
  // Stops the task named by `token` (common/cancel_token.h) that the
  // worker runs or has queued: it is asked to (a signal carrying the
  // token), or, with `force`, the worker is ended. With `recursive`, the
  // worker first cancels the tasks that task submitted (a forced one then
  // ends itself). NOT_FOUND for a worker that is not running.
  virtual absl::Status CancelTask(const std::string& worker_id, int32_t token,
                                  bool force, bool recursive) = 0;
};

struct LeaseServiceOptions {
  std::string node_id;
  std::string address;  // the node's, for messages
  ResourceSet resources;
  // Devices per accelerator kind ("TPU" -> 4), numbered 0 .. n-1.
  std::map<std::string, int> devices;
  // Validate the accelerator part of each request.
  std::vector<std::shared_ptr<const accel::AcceleratorManager>> accelerators;
  // The node's labels, which requests' label selectors match.
  std::map<std::string, std::string> labels;
  // How long an infeasible request waits for a node that fits to join.
  int64_t infeasible_grace_ms = 5000;
  // A prepare the head never commits or cancels is released after this.
  int64_t prepare_expiry_ms = 10000;
  // GET_WORKER_EXIT of a running worker waits this long for its exit,
  // asking every 100 ms (0: answers "still running" at once).
  int64_t worker_exit_wait_ms = 2000;
  // Logs infeasible requests, departed requesters and expired prepares
  // (the simulator's thousands of nodes stay quiet).
  bool log_events = true;
  // The cluster as the last heartbeat reply told it, for spillback; null:
  // nothing spills back. REQUIRES: outlives the service.
  ClusterView* view = nullptr;
  // Tells the head about a change soon (coalesced by the caller).
  std::function<void()> report_soon;
  // Asks the head about a placement group no node holds. Null, or
  // can_ask_head() false (the node is stopping): nobody to ask.
  std::function<bool()> can_ask_head;
  std::function<void(
      const std::string& pg,
      std::function<void(absl::StatusOr<proto::PlacementGroupInfo>)> done)>
      ask_group;
};

class LeaseService {
 public:
  // REQUIRES: `clock` and `launcher` outlive this.
  LeaseService(LeaseServiceOptions options, Clock* clock,
               WorkerLauncher* launcher);
  ~LeaseService();
  LeaseService(const LeaseService&) = delete;
  LeaseService& operator=(const LeaseService&) = delete;

  // ---- Lease requests ----

  // REQUEST_LEASE: grants, spills back or fails the request, or queues it.
  void RequestLease(const proto::RequestLeaseRequest& request,
                    std::unique_ptr<LeaseRequester> requester);
  // CANCEL_LEASE_REQUEST: the request `request_id` of connection `conn_id`
  // that waits here is answered CANCELED; true when one was.
  bool CancelRequest(uint64_t conn_id, const std::string& request_id);
  // RETURN_LEASE (and the leases of a removed group, a departed driver):
  // the lease ends; its worker is killed (`why`) or kept for reuse.
  void ReturnLease(const std::string& lease_id, bool kill_worker,
                   const std::string& why = "its lease was returned");
  // The requester on `conn_id` left: its queued requests go and its leases
  // end with their workers (an actor's lease is the head's and stays).
  void OnDisconnect(uint64_t conn_id);
  // Tries every queued request again (resources or the view changed).
  void Dispatch();

  // ---- Workers ----

  // Worker `w.id` registered. kGranted: its requester has the lease;
  // kLeaseGone: its lease ended while it started (it may wait idle);
  // kNotAwaited: no request waits for it.
  enum class Started { kGranted, kLeaseGone, kNotAwaited };
  Started WorkerStarted(const WorkerAddress& w);
  // Worker `worker_id` (started for `lease_id`) could not start: its
  // requester hears why (needs_program: this node has no copy of its
  // program), and the lease ends.
  void StartFailed(const std::string& worker_id, const std::string& lease_id,
                   const absl::Status& why, bool needs_program = false);
  // Worker `worker_id` exited while it served (or started for) `lease_id`.
  void WorkerExited(const std::string& worker_id, const std::string& lease_id,
                    const std::string& description);
  // The worker of `lease_id` waits in Get or Wait in a task nested `depth`
  // deep (its CPU goes to deeper requests), or runs again.
  void WorkerBlocked(const std::string& lease_id, const std::string& worker_id,
                     int depth);
  void WorkerUnblocked(const std::string& lease_id,
                       const std::string& worker_id);
  // GET_WORKER_EXIT: `done` hears how the worker ended (waiting up to
  // worker_exit_wait_ms for a running one).
  void GetWorkerExit(const std::string& worker_id,
                     std::function<void(const proto::GetWorkerExitReply&)> done,
                     int attempt = 0);

  // ---- Bundles (two phases: prepare, then commit) ----

  absl::Status PrepareBundles(const proto::BundleReservation& r);
  absl::Status CommitBundles(const std::string& pg);
  // Gives the group's resources back; leases in its bundles end with their
  // workers.
  void CancelBundles(const std::string& pg);

  // ---- Resources held outside leases (a job's entrypoint) ----

  // ResourceExhausted when `need` is not free now.
  absl::Status Reserve(const ResourceSet& need);
  void Unreserve(const ResourceSet& held);

  // Adds the demands (queued requests by shape) and the leases.
  void FillHeartbeat(proto::HeartbeatRequest* request) const;
  const NodeResources& resources() const { return node_; }
  const LeaseTable& leases() const { return leases_; }
  size_t queued() const { return pending_.size(); }

 private:
  struct PendingGrant {  // a lease granted before its worker started
    std::string lease_id;
    std::unique_ptr<LeaseRequester> requester;
  };

  bool TryPlace(PendingLease& p);
  bool Wait(PendingLease& p, const LeaseDecision& d);
  void Grant(PendingLease& p);
  void ReplyGranted(const LeaseRequester& requester, const Lease& lease,
                    const WorkerAddress& w);
  void Fail(const PendingLease& p, proto::RequestLeaseReply::Outcome outcome,
            const std::string& error);
  void ReplyStartFailed(const std::string& worker_id, const absl::Status& why,
                        bool needs_program);
  void AskAboutGroup(uint64_t seq, const std::string& group);
  void GroupAnswered(uint64_t seq, const std::string& group,
                     const absl::StatusOr<proto::PlacementGroupInfo>& info);
  void DropLease(const std::string& lease_id);
  void EnsureDispatchTimer(int64_t at_us);
  void ReportSoon();

  const LeaseServiceOptions options_;
  Clock* const clock_;
  WorkerLauncher* const launcher_;
  NodeResources node_;
  LeaseTable leases_;           // changes node_
  BundleReservations bundles_;  // changes node_
  DeviceAllocator devices_;
  LeaseQueue pending_;
  uint64_t next_request_seq_ = 0;
  std::map<std::string, PendingGrant> starting_;  // by worker id
  uint64_t dispatch_timer_ = 0;
  int64_t dispatch_timer_at_ = 0;
  std::map<std::string, uint64_t> prepare_timers_;  // by group
  // Timers and the head's answers check it: they may outlive the service.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace shoal::agent

#endif  // SHOAL_AGENT_LEASE_SERVICE_H_
