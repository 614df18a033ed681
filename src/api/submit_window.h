// Bounds how many tasks (and actor calls) one process has submitted and not
// yet seen end, so that a driver submitting a million tasks holds a bounded
// number of them in memory: Submit blocks while the window is full and goes
// on as tasks end (SHOAL_MAX_PENDING_TASKS, default 100,000; 0: no bound).
// Nothing else on the task path grows with the tasks submitted: agents
// hold a bounded number of lease requests per driver, and the head is not
// on the task path (docs/design/backpressure.md).
//
// Threading: thread-safe. Acquire blocks only when told it may (never on
// the runtime's loop thread, which must run for tasks to end).
#ifndef SHOAL_API_SUBMIT_WINDOW_H_
#define SHOAL_API_SUBMIT_WINDOW_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/mutex.h"

namespace shoal::internal {

class SubmitWindow {
 public:
  // `limit` <= 0: no bound.
  explicit SubmitWindow(int64_t limit);
  SubmitWindow(const SubmitWindow&) = delete;
  SubmitWindow& operator=(const SubmitWindow&) = delete;

  // Takes a place for one task. While `limit` are taken it waits for one
  // to be released when `may_block`, else takes it anyway (over the
  // limit). Fails once Close() was called.
  absl::Status Acquire(bool may_block);
  void Release();
  // Wakes every waiter with an error; later Acquires fail.
  void Close();

  int64_t in_flight() const;
  int64_t limit() const { return limit_; }
  // Times a submitter waited for a place, and the most places taken.
  int64_t waits() const;
  int64_t peak() const;

 private:
  const int64_t limit_;
  mutable shoal::Mutex mu_;
  shoal::CondVar released_;
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t waits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

// SHOAL_MAX_PENDING_TASKS, or 100,000.
int64_t MaxPendingTasksFromEnv();

}  // namespace shoal::internal

#endif  // SHOAL_API_SUBMIT_WINDOW_H_
