// One thread that owns sockets, timers and the state of the managers that run
// on it. Other threads hand it work with Post().
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
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"

namespace shoal::rpc {

class EventLoop {
 public:
  using FdCallback = std::function<void(uint32_t epoll_events)>;

  // Starts the loop on a new thread.
  static absl::StatusOr<std::unique_ptr<EventLoop>> Create(
      const std::string& name);
  ~EventLoop();

  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  void Post(std::function<void()> fn);
  // Runs `fn` on the loop and waits for it (runs it at once when called on
  // the loop thread). For setup and shutdown steps of the loop's owner.
  void RunSync(const std::function<void()>& fn);
  // Runs `fn` at the end of the current iteration, after every ready event
  // has been handled: connections flush their output here, so that all the
  // frames produced by one iteration leave in one write. Loop thread only.
  void RunAtIterationEnd(std::function<void()> fn);

  uint64_t RunAfter(int64_t delay_ms, std::function<void()> fn);
  void CancelTimer(uint64_t id);

  void AddFd(int fd, uint32_t events, FdCallback callback);
  void ModifyFd(int fd, uint32_t events);
  void RemoveFd(int fd);

  bool InLoop() const;
  // Stops and joins the thread; closures still queued are dropped. Must not
  // be called on the loop thread.
  void Stop();

 private:
  EventLoop(int epoll_fd, int wake_fd);
  void Run();
  void Wake();
  int NextTimeoutMs();
  void RunDueTimers();

  const int epoll_fd_;
  const int wake_fd_;
  std::thread thread_;
  // Written by the loop thread as it starts, read by InLoop() on any thread.
  std::atomic<std::thread::id> thread_id_{};
  std::atomic<bool> stopping_{false};

  std::mutex mu_;
  std::vector<std::function<void()>> posted_;  // guarded by mu_
  bool wake_pending_ = false;                  // guarded by mu_

  // Loop-thread state.
  std::unordered_map<int, std::shared_ptr<FdCallback>> fds_;
  std::map<std::pair<int64_t, uint64_t>, std::function<void()>> timers_;
  std::unordered_map<uint64_t, int64_t> timer_deadlines_;
  uint64_t next_timer_id_ = 1;
  std::vector<std::function<void()>> iteration_end_;
};

}  // namespace shoal::rpc

#endif  // SHOAL_RPC_EVENT_LOOP_H_
