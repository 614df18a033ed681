// The head's task records (common/task_event_record.h): the latest state of
// each task, folded from the reports of drivers and workers, in bounded memory:
// at most `max_per_job` per job and `max_total` in all, the oldest
// forgotten first (ended ones before those still going, the oldest job's
// first when over `max_total`) and counted. Answers LIST_TASKS: records
// filtered and limited, a summary by function, or counts by state.
//
// Threading: the head's loop; not thread-safe.
#ifndef SHOAL_HEAD_TASK_EVENT_STORE_H_
#define SHOAL_HEAD_TASK_EVENT_STORE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <unordered_map>

#include "absl/status/statusor.h"
#include "common/task_event_record.h"
#include "shoal/shoal.pb.h"

namespace shoal {

class TaskEventStore {
 public:
  explicit TaskEventStore(size_t max_per_job = 10000,
                          size_t max_total = 100000);

  void Add(const proto::TaskEventBatch& batch);
  // The job's driver is gone (it shut down, exited, was killed or lost its
  // connection): each of its tasks that has not ended ends FAILED at
  // `now_ms` with error type WORKER_DIED (as Ray marks them) and `reason`,
  // and so does any reported for the job from now on. The last
  // kMaxEndedJobs ended jobs are remembered.
  void EndJob(const std::string& job_id, const std::string& reason,
              int64_t now_ms);
  // InvalidArgument for a filter that is not KEY=VALUE of a known key.
  absl::StatusOr<proto::TaskList> List(
      const proto::ListTasksRequest& request) const;

  size_t size() const;
  int64_t dropped() const { return dropped_; }

  // The keys `--filter` takes.
  static const char* const kFilterKeys;
  static constexpr size_t kMaxEndedJobs = 4096;

 private:
  struct Job {
    std::unordered_map<std::string, proto::TaskEvent> tasks;
    std::deque<std::string> order;  // task ids, first reported first
  };
  struct EndedJob {
    std::string reason;
    int64_t time_ms = 0;
  };
  void Count(TaskState state, int64_t delta);
  void Evict(Job& job);
  void Fail(const EndedJob& why, proto::TaskEvent* record);

  const size_t max_per_job_;
  const size_t max_total_;
  std::map<std::string, Job> jobs_;
  std::deque<std::string> job_order_;  // job ids, first reported first
  std::unordered_map<std::string, EndedJob> ended_;
  std::deque<std::string> ended_order_;  // ended_'s keys, oldest first
  size_t total_ = 0;                     // records kept
  int64_t counts_[kNumTaskStates] = {};
  int64_t dropped_ = 0;           // records forgotten
  int64_t reporter_dropped_ = 0;  // events reporters could not keep
};

}  // namespace shoal

#endif  // SHOAL_HEAD_TASK_EVENT_STORE_H_
