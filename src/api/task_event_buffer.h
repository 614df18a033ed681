// The task events of the tasks this process owns (common/task_event_record.h).
// Each task's record lives in its entry (TaskEntry::events): a state
// change updates it there, with no lookup and no copy, and lists the task
// as changed. When a task ends its record is written into the batch at
// once (its entry is about to go); the runtime takes the batch every
// TaskEventsIntervalMs(), which also writes the records of the tasks that
// changed and still go on. Past max_tasks records (the head keeps as many
// of a job) a batch takes no more, and counts what it drops, the tasks that
// ended by how they ended, so that the head's counts stay whole.
//
// Threading: the runtime's loop thread only. A listed entry must stay
// alive until Ended() or Clear().
#ifndef SHOAL_API_TASK_EVENT_BUFFER_H_
#define SHOAL_API_TASK_EVENT_BUFFER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "api/task_entry.h"
#include "common/task_event_record.h"

namespace shoal::internal {

class TaskEventBuffer {
 public:
  // enabled false (task events off): nothing is recorded.
  TaskEventBuffer(std::string job_id, bool enabled, size_t max_tasks = 10000);

  struct Change {
    TaskState state = proto::TaskEvent::STATE_UNKNOWN;
    int64_t time_ms = 0;  // 0: now
    std::string_view node_id;
    std::string_view worker_id;
    std::string_view error;
    std::string_view error_type;
  };
  void Record(TaskEntry& task, const Change& change);
  // The task has ended, or its entry goes away: its record joins the batch
  // now.
  void Ended(TaskEntry& task);
  // Forgets the tasks listed as changed (their entries are going away
  // unsent).
  void Clear();

  // The batch to send, serialized (a proto::TaskEventBatch, written
  // straight from the records: no message is built); "" when nothing
  // happened since the last one. `*events` says how many records it holds.
  std::string Take(int* events = nullptr);

  bool enabled() const { return enabled_; }

 private:
  // Appends `task`'s record to the batch (or counts it dropped).
  void Write(const TaskEntry& task);

  const std::string job_id_;
  const bool enabled_;
  const size_t max_tasks_;
  std::vector<TaskEntry*> changed_;  // live tasks; null: ended since
  std::string batch_;                // the records written so far
  int records_ = 0;
  int64_t dropped_ = 0;
  int64_t dropped_finished_ = 0;
  int64_t dropped_failed_ = 0;
};

}  // namespace shoal::internal

#endif  // SHOAL_API_TASK_EVENT_BUFFER_H_
