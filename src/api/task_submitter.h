// Sends ready tasks to leased workers. Tasks wait in one queue per resource
// shape; each queue leases workers from node agents (following their
// spillbacks to other nodes), pushes tasks straight to the workers,
// pipelines short tasks, returns idle leases, and notices lost workers.
// What a reply means for the task (done, failed, retried) is the
// delegate's call. A node that has no copy of the program (a host that
// joined after the program started, when none was sent) makes the queue
// wait for the runtime to send the head one (Options::program_wanted,
// SetProgramCopy), then lease again. Runs on the runtime's loop thread only.
#ifndef SHOAL_API_TASK_SUBMITTER_H_
#define SHOAL_API_TASK_SUBMITTER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "api/node_view.h"
#include "api/shape_queue.h"
#include "api/worker_command.h"
#include "rpc/executor.h"
#include "scheduling/resource_set.h"
#include "shoal/shoal.pb.h"

namespace shoal::internal {

class TaskSubmitter {
 public:
  class Delegate {
   public:
    virtual ~Delegate() = default;
    // Fills the spec of `task_id` for worker `worker_id` on `node_id`;
    // false when the task is gone (it is then skipped).
    virtual bool BuildSpec(const std::string& task_id,
                           const std::string& node_id,
                           const std::string& worker_id,
                           proto::TaskSpec* spec) = 0;
    // The worker answered: its result, or why there is none (never
    // Unavailable: a lost worker comes to WorkerDied).
    virtual void TaskReplied(const std::string& task_id,
                             const std::string& node_id,
                             absl::StatusOr<proto::TaskResult> result) = 0;
    // The worker running `task_id` died; `how` says why, as its agent
    // tells it. The delegate retries it (Enqueue, front) or fails it.
    virtual void WorkerDied(const std::string& task_id,
                            const std::string& how) = 0;
    // No worker can be had for the task: infeasible, invalid, refused, or
    // workers keep failing to start.
    virtual void TaskFailed(const std::string& task_id, absl::Status error) = 0;
    // Asks the head for the cluster's nodes.
    virtual void FetchNodes(
        std::function<void(absl::StatusOr<proto::ClusterStatus>)> done) = 0;
  };

  struct Options {
    std::string job_id;  // the job whose workers are leased
    std::string binary_path;
    std::string binary_hash;       // names worker_command when that is set
    std::string blob_hash;         // the head's copy, when not binary_hash
    WorkerCommand worker_command;  // empty: workers run the binary
    // How long a lease with no work is kept for further tasks of its shape.
    int64_t lease_idle_ms = 500;
    // A lease held this long is returned as soon as it has no work, even
    // if its next task comes at once: that task then asks its agent anew,
    // behind the other owners' requests there, so that an owner running
    // one task after another cannot keep the resources from them (a lease
    // that is never idle, its shape's queue never empty, is kept).
    int64_t lease_reuse_ms = 1000;
    // Called (on the loop thread, once until answered) when a node has no
    // copy of the program and the head holds none this submitter knows
    // of: the runtime sends one and answers with SetProgramCopy, later
    // (never from inside this call). Unset: such a lease failure counts
    // like any other.
    std::function<void()> program_wanted;
  };

  // Agents are reached through `nodes` (NodeView::Channel), workers over
  // channels it makes (NodeView::Connect); `loop` runs retries and keeps
  // the clock of idle leases.
  TaskSubmitter(rpc::Executor* loop, NodeView* nodes, Delegate* delegate,
                Options options);
  ~TaskSubmitter();
  TaskSubmitter(const TaskSubmitter&) = delete;
  TaskSubmitter& operator=(const TaskSubmitter&) = delete;

  // Queues `task_id` for a worker of `shape` on a node `selector` matches
  // (`shape_key`: both as a string, computed once per task); `front` puts it
  // ahead of the
  // others (a retry). `depth` is how deeply it is nested: agents grant the
  // deepest first, and lend a blocked worker's CPU only to requests deeper
  // than its task, so tasks of each depth have a queue and leases of their
  // own (a lease asked for at one depth never runs a task of another).
  // Without `pipelined`, a worker of the shape runs one task at a time (a
  // function with max_calls, whose worker may end after any call).
  void Enqueue(const std::string& task_id, const ResourceSet& shape,
               const LabelSelector& selector, const std::string& shape_key,
               int depth, bool front = false, bool pipelined = true);
  // Every 100 ms: returns idle leases; every second asks for the nodes.
  void Tick();
  // Asks the head for the nodes now; workers on dead nodes are lost.
  void RefreshNodes();
  // Returns every lease; `done` once the agents answered (1 s at most).
  void ReturnAll(std::function<void()> done);
  // The head's copy of the program: the hash lease requests carry from now
  // on (queues waiting for it lease again), or why none could be sent (the
  // tasks of those queues fail, saying so). May come unasked: a copy sent
  // for another reason.
  void SetProgramCopy(absl::StatusOr<std::string> blob_hash);
  // Has task `task_id`'s worker stopped (by force: ended), and with
  // `recursive` cancel what the task submitted; false if no worker has it.
  bool CancelPushed(const std::string& task_id, bool force, bool recursive);
  void Clear() { shapes_.clear(); }

  // For tests and status.
  size_t queued() const;
  size_t leased_workers() const;

 private:
  void Pump(ShapeQueue& q);
  void Push(ShapeQueue& q, LeasedWorker& w, const std::string& task_id);
  void OnReply(const std::string& key, const std::string& lease_id,
               const std::string& task_id, absl::StatusOr<std::string> reply);
  // A worker's connection broke: the task it was running (unless it is
  // `never_sent`, whose push was never written) is the delegate's to retry
  // or fail once its agent says how the worker ended.
  void OnWorkerLost(ShapeQueue& q, const std::string& lease_id,
                    const absl::Status& why,
                    const std::string& never_sent = "");
  void LoseWorkersOnDeadNodes();
  void RequestLease(ShapeQueue& q, const std::string& agent, bool no_spillback);
  void OnLeaseReply(const std::string& key, const std::string& agent,
                    uint64_t number, bool named_copy,
                    absl::StatusOr<proto::RequestLeaseReply> reply);
  // A lease request failed to reach `agent` (or was refused).
  void OnLeaseRequestFailed(ShapeQueue& q, const std::string& agent,
                            const absl::Status& error);
  // A FAILED answer: a node without the program, or a worker that could
  // not start.
  void OnLeaseFailed(ShapeQueue& q, bool named_copy,
                     const proto::RequestLeaseReply& reply);
  // The agent of a lease request that named no copy of the program
  // answered that it has none: `q` waits for one (asked for once).
  void AwaitProgram(ShapeQueue& q, const std::string& error);
  // Withdraws the queue's lease requests (CANCEL_LEASE_REQUEST): it has no
  // task left for them, and a grant would only start a worker to be
  // returned.
  void WithdrawRequests(ShapeQueue& q);
  void AddWorker(ShapeQueue& q, const std::string& agent,
                 const proto::RequestLeaseReply& reply);
  void ReturnIdleLeases();
  void FailQueue(ShapeQueue& q, const absl::Status& error);
  // Frees a worker's channel on a later turn (it may be failing its calls).
  void DropWorker(std::unique_ptr<LeasedWorker> w);

  rpc::Executor* const loop_;
  NodeView* const nodes_;
  Delegate* const delegate_;
  const Options options_;
  // The head's copy of the program (Options::blob_hash, then
  // SetProgramCopy's); empty while none is known.
  std::string blob_hash_;
  bool program_asked_ = false;  // program_wanted called, not yet answered
  std::map<std::string, ShapeQueue> shapes_;  // by ShapeQueue::key()
  int64_t ticks_ = 0;
  uint64_t next_request_ = 0;  // names lease requests (request_id)
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace shoal::internal

#endif  // SHOAL_API_TASK_SUBMITTER_H_
