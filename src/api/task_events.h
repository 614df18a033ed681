// The task events of the tasks this process owns (common/task_events.h):
// each state change folds into the task's record in the batch being
// filled, found through the task's entry without a lookup; the runtime
// takes the batch every TaskEventsIntervalMs() and sends it to the head.
// Past max_tasks records a batch takes no more, and counts what it drops.
//
// Threading: the runtime's loop thread only.
#ifndef SHOAL_API_TASK_EVENTS_H_
#define SHOAL_API_TASK_EVENTS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "api/task_entry.h"
#include "common/task_events.h"

namespace shoal::internal {

class TaskEventBuffer {
 public:
  // enabled false (task events off): Record does nothing.
  TaskEventBuffer(std::string job_id, bool enabled, size_t max_tasks = 100000);

  struct Change {
    TaskState state = proto::TaskEvent::STATE_UNKNOWN;
    int64_t time_ms = 0;  // 0: now
    std::string_view node_id;
    std::string_view worker_id;
    std::string_view error;
    std::string_view error_type;
  };
  void Record(TaskEntry& task, const Change& change);

  // The batch to send; null when nothing happened since the last one.
  std::unique_ptr<proto::TaskEventBatch> Take();

  bool enabled() const { return enabled_; }
  size_t pending() const { return pending_.size(); }

 private:
  struct Pending {
    std::string task_id;
    std::string name;
    std::string actor_id;
    std::string node_id;
    std::string worker_id;
    std::string error;
    std::string error_type;
    int attempt = 0;
    TaskState state = proto::TaskEvent::STATE_UNKNOWN;
    int64_t times[kNumTaskStates] = {};
  };

  const std::string job_id_;
  const bool enabled_;
  const size_t max_tasks_;
  std::vector<Pending> pending_;
  uint64_t batch_ = 1;  // numbers the batch being filled
  int64_t dropped_ = 0;
};

}  // namespace shoal::internal

#endif  // SHOAL_API_TASK_EVENTS_H_
