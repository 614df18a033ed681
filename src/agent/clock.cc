#include "agent/clock.h"

#include <utility>

#include "common/clock.h"
#include "rpc/event_loop.h"

namespace shoal::agent {
namespace {

class EventLoopClock : public Clock {
 public:
  explicit EventLoopClock(rpc::EventLoop* loop) : loop_(loop) {}
  int64_t NowUs() override { return MonotonicUs(); }
  uint64_t RunAfter(int64_t delay_ms, std::function<void()> fn) override {
    return loop_->RunAfter(delay_ms, std::move(fn));
  }
  void Cancel(uint64_t timer_id) override { loop_->CancelTimer(timer_id); }

 private:
  rpc::EventLoop* const loop_;
};

}  // namespace

std::unique_ptr<Clock> LoopClock(rpc::EventLoop* loop) {
  return std::make_unique<EventLoopClock>(loop);
}

}  // namespace shoal::agent
