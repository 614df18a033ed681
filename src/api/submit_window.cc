#include "api/submit_window.h"

#include <stdlib.h>

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/environment.h"
#include "common/logging.h"

namespace shoal::internal {

SubmitWindow::SubmitWindow(int64_t limit)
    : limit_(std::max<int64_t>(0, limit)) {}

absl::Status SubmitWindow::Acquire(bool may_block) {
  shoal::MutexLock lock(&mu_);
  if (limit_ > 0 && in_flight_ >= limit_ && may_block && !closed_) {
    if (waits_++ == 0) {
      SHOAL_LOG(INFO) << "submitting waits: " << in_flight_
                      << " tasks are in flight, the most this process keeps "
                         "(SHOAL_MAX_PENDING_TASKS); it goes on as they end";
    }
    while (!closed_ && in_flight_ >= limit_) released_.Wait(&mu_);
  }
  if (closed_) {
    return absl::FailedPreconditionError(
        "the runtime is shutting down: no more tasks can be submitted");
  }
  ++in_flight_;
  peak_ = std::max(peak_, in_flight_);
  return absl::OkStatus();
}

void SubmitWindow::Release() {
  shoal::MutexLock lock(&mu_);
  if (in_flight_ > 0) --in_flight_;
  if (limit_ > 0 && in_flight_ < limit_) released_.Signal();
}

void SubmitWindow::Close() {
  shoal::MutexLock lock(&mu_);
  closed_ = true;
  released_.SignalAll();
}

int64_t SubmitWindow::in_flight() const {
  shoal::MutexLock lock(&mu_);
  return in_flight_;
}

int64_t SubmitWindow::waits() const {
  shoal::MutexLock lock(&mu_);
  return waits_;
}

int64_t SubmitWindow::peak() const {
  shoal::MutexLock lock(&mu_);
  return peak_;
}

int64_t MaxPendingTasksFromEnv() {
  return env::GetInt(env::Var::kMaxPendingTasks);
}

}  // namespace shoal::internal
