// The node agent's workers as a LeaseService sees them (WorkerLauncher):
// processes of the WorkerPool, started from the lease's program (found or
// fetched by the BinaryCache) or command, shown exactly the lease's devices,
// reused by later leases of their kind, killed when their lease asks so,
// and reaped, with every process they started, when they exit.
//
// The LeaseService hears from here when a worker it waits for cannot start
// or exits; the agent tells it (Serve) when one has registered.
//
// Threading: lives on the agent's event loop; not thread-safe.
#ifndef SHOAL_AGENT_PROCESS_WORKERS_H_
#define SHOAL_AGENT_PROCESS_WORKERS_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "accel/accelerator_manager.h"
#include "agent/binary_cache.h"
#include "agent/lease_service.h"
#include "agent/worker_pool.h"

namespace shoal::agent {

struct ProcessWorkersOptions {
  WorkerPoolOptions pool;
  std::string node_ip;  // where registered workers listen
  // Each lease's worker sees exactly its devices of these kinds.
  std::vector<std::shared_ptr<const accel::AcceleratorManager>> accelerators;
  // The lock file libtpu takes (LibtpuLockfilePath()), cleared of dead
  // holders before a lease with TPU chips starts a worker.
  std::string libtpu_lockfile;
  // Whether to end, when a worker exits, the processes it started (those
  // that carry its SHOAL_WORKER_ID).
  bool end_leftovers = true;
  // A child of the agent that is not a worker exited (a job's entrypoint).
  std::function<void(pid_t pid, int wait_status)> other_exited;
  std::function<int64_t()> now_us;  // steady clock
};

class ProcessWorkers : public WorkerLauncher {
 public:
  // REQUIRES: `binaries` outlives this.
  ProcessWorkers(ProcessWorkersOptions options,
                 std::unique_ptr<ProcessLauncher> launcher,
                 BinaryCache* binaries);

  // The service whose leases the workers serve. REQUIRES: called before any
  // lease, and `leases` outlives this.
  void set_leases(LeaseService* leases) { leases_ = leases; }

  // REGISTER_WORKER: worker `id` listens at `port`. NotFound when this node
  // did not start it.
  absl::Status Registered(const std::string& id, int port, pid_t pid);
  // Once the worker has its answer: its requester hears GRANTED, or it
  // waits idle when its lease went while it started.
  void Serve(const std::string& id);

  // Worker `worker_id` lends objects (an idle one that does is kept).
  void SetLending(const std::string& worker_id, bool lending) {
    pool_.SetLending(worker_id, lending);
  }
  // The lease worker `worker_id` serves now; "" when none.
  std::string LeaseOf(const std::string& worker_id) const;

  // Reaps the workers and other children that exited (each period, and
  // before GET_WORKER_EXIT answers) and ends idle workers past their time.
  void Reap();
  void EndIdle();
  // Ends every worker and what it started. Blocks up to a second or so.
  void StopAll();
  size_t size() const { return pool_.size(); }

  // WorkerLauncher:
  absl::Status ClaimDevices(const DeviceIds& devices) override;
  std::optional<WorkerAddress> Reuse(
      const Lease& lease, const proto::RequestLeaseRequest& request) override;
  std::string Add(const Lease& lease,
                  const proto::RequestLeaseRequest& request) override;
  void Start(const std::string& worker_id,
             const proto::RequestLeaseRequest& request) override;
  void LeaseEnded(const std::string& worker_id, bool kill,
                  const std::string& why) override;
  bool Knows(const std::string& worker_id) override;
  absl::Status CancelTask(const std::string& worker_id, int32_t token,
                          bool force, bool recursive) override;
  std::optional<std::string> ExitOf(const std::string& worker_id) override;
  void Describe(const std::string& worker_id,
                proto::LeaseInfo* info) const override;

 private:
  void Launch(const std::string& worker_id, std::vector<std::string> argv,
              std::map<std::string, std::string> job_env,
              const std::string& blob_hash = "");
  void FailStart(const std::string& worker_id, const absl::Status& why,
                 bool needs_program = false);
  void EndLeftovers(const std::string& worker_id);

  const ProcessWorkersOptions options_;
  WorkerPool pool_;
  BinaryCache* const binaries_;
  LeaseService* leases_ = nullptr;
};

}  // namespace shoal::agent

#endif  // SHOAL_AGENT_PROCESS_WORKERS_H_
