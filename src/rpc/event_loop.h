// One thread that owns sockets, timers and the state of the managers that run
// on it. Other threads hand it work with Post().
//
// Every closure Post() accepts runs exactly once, on the loop thread: those
// still queued when Stop() is called run before it returns (they may hold
// the only pointer to what they free). A closure posted once the loop has
// stopped is not run, on a loop that is gone, but destroyed at once, which
// frees what it captured. Timers not yet due at Stop() never run; they are
// destroyed with the loop.
//
// Threading: Post(), InLoop() and Stop() are thread-safe; every other method
// must be called on the loop thread (InLoop()).
#ifndef SHOAL_RPC_EVENT_LOOP_H_
#define SHOAL_RPC_EVENT_LOOP_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "rpc/executor.h"

namespace shoal::rpc {

class EventLoop final : public Executor {
 public:
  using FdCallback = std::function<void(uint32_t epoll_events)>;

  // Starts the loop on a new thread.
  static absl::StatusOr<std::unique_ptr<EventLoop>> Create(
      const std::string& name);
  // A loop that runs on the thread that calls RunHere(): a worker's main
  // thread, which runs its tasks (Python reserves signal handlers and more
  // to the main thread). Post() may be called before it runs.
  static absl::StatusOr<std::unique_ptr<EventLoop>> CreateUnstarted();
  // Runs the loop on this thread until Stop() is called (on another
  // thread; it does not wait for RunHere() to return).
  void RunHere();
  ~EventLoop() override;

  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  void Post(std::function<void()> fn) override;
  // Runs `fn` on the loop and waits for it (runs it at once when called on
  // the loop thread). For setup and shutdown steps of the loop's owner; the
  // same as RunOnLoopAndWait<void> with a `fn` that finishes at once.
  void RunSync(const std::function<void()>& fn);
  // Runs `fn` at the end of the current iteration, after every ready event
  // has been handled: connections flush their output here, so that all the
  // frames produced by one iteration leave in one write. Loop thread only.
  void RunAtIterationEnd(std::function<void()> fn);

  uint64_t RunAfter(int64_t delay_ms, std::function<void()> fn) override;
  void CancelTimer(uint64_t id) override;
  int64_t NowUs() const override;

  void AddFd(int fd, uint32_t events, FdCallback callback);
  void ModifyFd(int fd, uint32_t events);
  void RemoveFd(int fd);

  bool InLoop() const;
  // Runs the closures still queued, stops and joins the thread. Must not
  // be called on the loop thread.
  void Stop();

 private:
  EventLoop(int epoll_fd, int wake_fd);
  static absl::StatusOr<std::unique_ptr<EventLoop>> Open();
  void Run();
  void Wake();
  int NextTimeoutMs();
  void RunDueTimers();
  // Closes Post() and runs what it had accepted (see the class comment).
  void RunLastClosures();

  const int epoll_fd_;
  const int wake_fd_;
  std::thread thread_;
  // Written by the loop thread as it starts, read by InLoop() on any thread.
  std::atomic<std::thread::id> thread_id_{};
  std::atomic<bool> stopping_{false};

  shoal::Mutex mu_;
  std::vector<std::function<void()>> posted_ ABSL_GUARDED_BY(mu_);
  bool wake_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;  // Post() no longer accepts

  // Loop-thread state.
  std::unordered_map<int, std::shared_ptr<FdCallback>> fds_;
  std::map<std::pair<int64_t, uint64_t>, std::function<void()>> timers_;
  std::unordered_map<uint64_t, int64_t> timer_deadlines_;
  uint64_t next_timer_id_ = 1;
  std::vector<std::function<void()>> iteration_end_;
};

// The `done` that RunOnLoopAndWait<T> hands its closure.
template <typename T>
struct LoopDone {
  using Type = std::function<void(T)>;
};
template <>
struct LoopDone<void> {
  using Type = std::function<void()>;
};

// Runs `start` on `loop` and blocks the calling thread until `start`, or the
// work it set going on the loop (an RPC, several), calls the `done` it was
// handed; returns what `done` was given. This is how a user thread gets one
// answer out of state or calls that the loop owns:
//
//   absl::StatusOr<Reply> reply = RunOnLoopAndWait<absl::StatusOr<Reply>>(
//       loop, [&](LoopDone<absl::StatusOr<Reply>>::Type done) {
//         CallProto<Reply>(channel, method, request, std::move(done));
//       });
//
// `done` may be called on any thread; calls after the first are ignored.
// On the loop thread itself `start` runs at once and must call `done` before
// it returns: nothing else could run on the loop while its thread waits.
// REQUIRES: the loop keeps running until `done` is called.
template <typename T>
T RunOnLoopAndWait(EventLoop* loop,
                   std::function<void(typename LoopDone<T>::Type done)> start);

// ---- Implementation details ----

namespace loop_internal {

// The value a waiting thread is given, set once.
template <typename T>
class WaitSlot {
 public:
  void Set(T value) {
    shoal::MutexLock lock(&mu_);
    if (value_.has_value()) return;
    value_.emplace(std::move(value));
    ready_.SignalAll();
  }
  bool has_value() {
    shoal::MutexLock lock(&mu_);
    return value_.has_value();
  }
  T Take() {
    shoal::MutexLock lock(&mu_);
    while (!value_.has_value()) ready_.Wait(&mu_);
    return std::move(*value_);
  }

 private:
  shoal::Mutex mu_;
  shoal::CondVar ready_;
  std::optional<T> value_ ABSL_GUARDED_BY(mu_);
};

}  // namespace loop_internal

template <typename T>
T RunOnLoopAndWait(EventLoop* loop,
                   std::function<void(typename LoopDone<T>::Type done)> start) {
  using Stored = std::conditional_t<std::is_void_v<T>, std::monostate, T>;
  auto slot = std::make_shared<loop_internal::WaitSlot<Stored>>();
  typename LoopDone<T>::Type done;
  if constexpr (std::is_void_v<T>) {
    done = [slot] { slot->Set(std::monostate()); };
  } else {
    done = [slot](T value) { slot->Set(std::move(value)); };
  }
  if (loop->InLoop()) {
    start(std::move(done));
    SHOAL_CHECK(slot->has_value())
        << "RunOnLoopAndWait on the loop thread: the result must be ready "
           "when the closure returns";
  } else {
    loop->Post([start = std::move(start), done = std::move(done)]() mutable {
      start(std::move(done));
    });
  }
  if constexpr (std::is_void_v<T>) {
    slot->Take();
  } else {
    return slot->Take();
  }
}

}  // namespace shoal::rpc

#endif  // SHOAL_RPC_EVENT_LOOP_H_
