#include "api/task_event_reporter.h"

#include <memory>
#include <utility>

#include "common/logging.h"

namespace shoal::internal {

TaskEventReporter::TaskEventReporter(std::string job_id, int64_t interval_ms,
                                     SendFn send)
    : buffer_(std::move(job_id), interval_ms > 0),
      interval_ms_(interval_ms),
      send_(std::move(send)) {}

void TaskEventReporter::Tick(int64_t elapsed_ms) {
  if (interval_ms_ <= 0) return;
  since_flush_ms_ += elapsed_ms;
  if (since_flush_ms_ < interval_ms_) return;
  since_flush_ms_ = 0;
  Flush(nullptr);
}

void TaskEventReporter::Flush(std::function<void()> done) {
  std::string batch;
  if (!in_flight_) {
    // A batch the head could not take (it was away) goes again, ahead of
    // the new one: serialized messages of one type concatenate into one.
    batch = std::move(unsent_) + buffer_.Take();
    unsent_.clear();
  }
  if (batch.empty()) {
    if (done) done();
    return;
  }
  in_flight_ = true;
  auto kept = std::make_shared<std::string>(batch);
  send_(std::move(batch), [this, done = std::move(done), kept](
                              Delivery delivery, absl::Status error) {
    in_flight_ = false;
    if (delivery == Delivery::kNotSent && kept->size() <= kMaxUnsentBytes) {
      unsent_ = std::move(*kept);
    } else if (delivery != Delivery::kTaken && !warned_) {
      warned_ = true;
      SHOAL_LOG(WARNING) << "the head did not take a batch of task "
                            "events ("
                         << error << "); shoal list tasks misses them";
    }
    if (done) done();
  });
}

}  // namespace shoal::internal
