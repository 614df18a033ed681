// Sends the task events of the tasks this process owns (task_event_buffer.h) to
// the head: one batch at a time, every TaskEventsIntervalMs(), and at
// shutdown. A batch the head was away for is kept (up to a bound) and goes
// again ahead of the next one, so that a head that restarts misses nothing.
//
// Threading: the runtime's loop thread only, the send's answer included.
#ifndef SHOAL_API_TASK_EVENT_REPORTER_H_
#define SHOAL_API_TASK_EVENT_REPORTER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "api/task_event_buffer.h"

namespace shoal::internal {

class TaskEventReporter {
 public:
  // What became of a batch sent to the head.
  enum class Delivery {
    kTaken,    // the head has it
    kNotSent,  // never left this process (the head was away)
    kRefused,  // sent, and the head did not take it
  };
  // `done` hears what became of the batch, and the head's error if any.
  using SendFn = std::function<void(
      std::string batch, std::function<void(Delivery, absl::Status)> done)>;
  // A kept batch larger than this is dropped instead.
  static constexpr size_t kMaxUnsentBytes = 16 << 20;

  // interval_ms 0: task events are off (nothing is recorded or sent).
  TaskEventReporter(std::string job_id, int64_t interval_ms, SendFn send);

  // Where the tasks' changes are recorded.
  TaskEventBuffer& buffer() { return buffer_; }

  // The maintenance timer fired, `elapsed_ms` after it last did: sends a
  // batch once the interval has passed.
  void Tick(int64_t elapsed_ms);
  // Sends the events gathered since the last batch, unless a batch is
  // still out (then the next keeps filling); `done`, if set, once the head
  // answered or nothing was to be sent.
  void Flush(std::function<void()> done);

 private:
  TaskEventBuffer buffer_;
  const int64_t interval_ms_;
  const SendFn send_;
  int64_t since_flush_ms_ = 0;
  bool in_flight_ = false;
  std::string unsent_;  // a batch to send again (the head was away)
  bool warned_ = false;
};

}  // namespace shoal::internal

#endif  // SHOAL_API_TASK_EVENT_REPORTER_H_
