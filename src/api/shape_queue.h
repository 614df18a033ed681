// The tasks of one resource shape (and nesting depth) that wait for workers,
// the workers leased for them and the lease requests out for more: the
// state TaskSubmitter keeps per shape, and the decisions taken on it alone
// (how deep to pipeline, which worker takes the next task, which leases are
// idle, what a lost worker's tasks become). No IO: TaskSubmitter sends the
// requests these decisions call for.
//
// Threading: the runtime's loop thread only; not thread-safe.
#ifndef SHOAL_API_SHAPE_QUEUE_H_
#define SHOAL_API_SHAPE_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "scheduling/label_selector.h"
#include "scheduling/resource_set.h"

namespace shoal::rpc {
class Channel;
}

namespace shoal::internal {

// One worker leased for a shape's tasks.
struct LeasedWorker {
  LeasedWorker();
  ~LeasedWorker();
  std::string lease_id;
  std::string worker_id;
  std::string node_id;
  std::string agent;                      // that granted the lease
  std::unique_ptr<rpc::Channel> channel;  // to the worker
  std::deque<std::string> in_flight;      // task ids, in push order
  int64_t idle_since_us = 0;
  int64_t leased_at_us = 0;  // when the lease was granted
};

class ShapeQueue {
 public:
  // Lease requests out at once per shape, and start failures in a row
  // before the queue's tasks fail.
  static constexpr int kMaxPendingLeaseRequests = 10;
  static constexpr int kMaxLeaseFailures = 3;

  ShapeQueue(std::string key, ResourceSet shape, int depth,
             LabelSelector selector = {}, bool pipelined = true);

  const std::string& key() const { return key_; }
  const ResourceSet& shape() const { return shape_; }
  int depth() const { return depth_; }
  // The nodes its leases may come from.
  const LabelSelector& selector() const { return selector_; }

  // ---- Tasks waiting for a worker ----
  void Add(const std::string& task_id, bool front);
  bool empty() const { return queue_.empty(); }
  size_t size() const { return queue_.size(); }
  // Takes the first waiting task. REQUIRES: !empty().
  std::string TakeNext();
  // Takes every waiting task, in order.
  std::deque<std::string> TakeAll();

  // ---- Leased workers ----
  void AddWorker(std::unique_ptr<LeasedWorker> worker);
  LeasedWorker* FindWorker(const std::string& lease_id);
  // The worker that runs or has queued task `task_id`; null if none does.
  const LeasedWorker* WorkerHolding(const std::string& task_id) const;
  const std::vector<std::unique_ptr<LeasedWorker>>& workers() const {
    return workers_;
  }
  // A worker with nothing in flight, or null.
  LeasedWorker* IdleWorker() const;
  // The worker with the fewest tasks in flight below MaxInFlight(), or null.
  LeasedWorker* LeastBusyWorker() const;
  // Tasks pushed to one worker before earlier ones return: about 2 ms of
  // work at the shape's measured run time (1 until one is known, and for a
  // queue that is not pipelined).
  size_t MaxInFlight() const;
  // Task `task_id` came back from `worker` at `now_us`; `exec_us` >= 0 is
  // how long it ran (it moves the shape's average).
  void TaskReturned(LeasedWorker& worker, const std::string& task_id,
                    int64_t now_us, int64_t exec_us);
  // Worker `lease_id` is lost: it is removed and returned (null if unknown).
  // The oldest task in flight was running (unless it is `never_sent`, whose
  // push was never written) and is put in `running`; the others never
  // started and go back to the front of the queue, in order.
  std::unique_ptr<LeasedWorker> RemoveLost(const std::string& lease_id,
                                           const std::string& never_sent,
                                           std::string* running);
  // Removes and returns the workers with nothing in flight since at least
  // `idle_us` before `now_us`, or with nothing in flight and leased at
  // least `max_age_us` before it (none while tasks wait).
  std::vector<std::unique_ptr<LeasedWorker>> TakeIdle(int64_t now_us,
                                                      int64_t idle_us,
                                                      int64_t max_age_us);
  std::vector<std::unique_ptr<LeasedWorker>> TakeAllWorkers();

  // ---- Lease requests ----
  // How many more lease requests the waiting tasks call for.
  int LeaseRequestsWanted() const;
  void RequestSent(uint64_t number, const std::string& agent);
  // Request `number` was answered: forgotten.
  void RequestAnswered(uint64_t number);
  // Requests out and not being withdrawn: the tasks they will take are not
  // pipelined behind running ones.
  int pending_lease_requests() const { return pending_lease_requests_; }
  // Marks every request out as withdrawn and returns those newly so, by
  // number, with their agents.
  std::vector<std::pair<uint64_t, std::string>> Withdraw();
  // Tasks wait and a lease is asked for them.
  bool starving() const {
    return !queue_.empty() && pending_lease_requests_ > 0;
  }

  // ---- Start failures and the program's copy ----
  // A worker could not be started: whether that makes kMaxLeaseFailures in
  // a row (the count then starts over).
  bool CountStartFailure();
  void StartSucceeded() { consecutive_failures_ = 0; }
  // A node had no copy of the program: no lease is asked for until one is
  // sent. `lacking` says what that node said.
  void AwaitProgram(const std::string& lacking);
  // The wait is over; what the node had said.
  std::string EndProgramWait();
  bool awaiting_program() const { return awaiting_program_; }

 private:
  struct RequestOut {
    std::string agent;
    bool canceling = false;
  };

  const std::string key_;  // shape.DebugString() and depth
  const ResourceSet shape_;
  const int depth_;
  const LabelSelector selector_;
  const bool pipelined_;  // else one task per worker at a time
  std::deque<std::string> queue_;
  std::vector<std::unique_ptr<LeasedWorker>> workers_;
  std::map<uint64_t, RequestOut> requests_out_;
  int pending_lease_requests_ = 0;  // those not being withdrawn
  int consecutive_failures_ = 0;
  bool awaiting_program_ = false;
  std::string lacking_;
  double avg_exec_us_ = -1;  // moving average of the tasks' run time
};

}  // namespace shoal::internal

#endif  // SHOAL_API_SHAPE_QUEUE_H_
