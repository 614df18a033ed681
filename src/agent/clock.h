// Time and timers as the agent's parts see them: the agent's event loop
// (LoopClock), or a test's clock moved by hand (agent/agent_testing.h), so
// that tests fire timers instead of sleeping.
//
// Threading: the loop's; not thread-safe.
#ifndef SHOAL_AGENT_CLOCK_H_
#define SHOAL_AGENT_CLOCK_H_

#include <cstdint>
#include <functional>
#include <memory>

namespace shoal::rpc {
class EventLoop;
}  // namespace shoal::rpc

namespace shoal::agent {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t NowUs() = 0;  // steady clock
  // Runs `fn` on the loop after `delay_ms`; an id for Cancel.
  virtual uint64_t RunAfter(int64_t delay_ms, std::function<void()> fn) = 0;
  virtual void Cancel(uint64_t timer_id) = 0;
};

// MonotonicUs and the loop's timers. REQUIRES: `loop` outlives it.
std::unique_ptr<Clock> LoopClock(rpc::EventLoop* loop);

}  // namespace shoal::agent

#endif  // SHOAL_AGENT_CLOCK_H_
