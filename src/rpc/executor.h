// What a manager that lives on an event loop asks of it: to run a closure on
// the loop's thread later, at once or after a delay, and the loop's clock.
// EventLoop is the real one; rpc/fake_channel.h has one that a test drives
// by hand, so that managers are tested with no thread, no sleep and no
// polling.
#ifndef SHOAL_RPC_EXECUTOR_H_
#define SHOAL_RPC_EXECUTOR_H_

#include <cstdint>
#include <functional>

namespace shoal::rpc {

class Executor {
 public:
  virtual ~Executor() = default;

  // Runs `fn` on the loop's thread, after what is running now. Thread-safe.
  virtual void Post(std::function<void()> fn) = 0;
  // Runs `fn` on the loop's thread once `delay_ms` have passed on NowUs()'s
  // clock; the id cancels it. Loop thread only.
  virtual uint64_t RunAfter(int64_t delay_ms, std::function<void()> fn) = 0;
  virtual void CancelTimer(uint64_t id) = 0;
  // Microseconds of a monotonic clock (MonotonicUs on a real loop).
  virtual int64_t NowUs() const = 0;
};

}  // namespace shoal::rpc

#endif  // SHOAL_RPC_EXECUTOR_H_
