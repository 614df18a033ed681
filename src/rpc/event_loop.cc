#include "rpc/event_loop.h"

#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace shoal::rpc {
namespace {
// How long a loop that just had work polls before it sleeps.
constexpr int64_t kBusyPollUs = 100;
}  // namespace

absl::StatusOr<std::unique_ptr<EventLoop>> EventLoop::Create(
    const std::string& name) {
  ASSIGN_OR_RETURN(std::unique_ptr<EventLoop> loop, Open());
  EventLoop* raw = loop.get();
  loop->thread_ = std::thread([raw, name] {
    pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
    raw->Run();
  });
  return loop;
}

absl::StatusOr<std::unique_ptr<EventLoop>> EventLoop::CreateUnstarted() {
  return Open();
}

void EventLoop::RunHere() {
  SHOAL_CHECK(!thread_.joinable()) << "EventLoop::RunHere on a started loop";
  Run();
}

absl::StatusOr<std::unique_ptr<EventLoop>> EventLoop::Open() {
  int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) {
    return absl::InternalError(
        absl::StrCat("epoll_create1: ", strerror(errno)));
  }
  int wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake < 0) {
    close(ep);
    return absl::InternalError(absl::StrCat("eventfd: ", strerror(errno)));
  }
  return std::unique_ptr<EventLoop>(new EventLoop(ep, wake));
}

EventLoop::EventLoop(int epoll_fd, int wake_fd)
    : epoll_fd_(epoll_fd), wake_fd_(wake_fd) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
}

EventLoop::~EventLoop() {
  Stop();
  close(wake_fd_);
  close(epoll_fd_);
}

void EventLoop::Stop() {
  if (!thread_.joinable()) {
    // Never started, or running on its caller's thread (RunHere): that
    // thread returns from RunHere once it sees this.
    stopping_ = true;
    Wake();
    return;
  }
  SHOAL_CHECK(!InLoop()) << "EventLoop::Stop called on its own thread";
  stopping_ = true;
  Wake();
  thread_.join();
}

bool EventLoop::InLoop() const {
  return std::this_thread::get_id() == thread_id_.load();
}

void EventLoop::Post(std::function<void()> fn) {
  bool wake;
  std::function<void()> refused;
  {
    shoal::MutexLock lock(&mu_);
    if (closed_) {
      refused = std::move(fn);
      wake = false;
    } else {
      posted_.push_back(std::move(fn));
      wake = !wake_pending_;
      wake_pending_ = true;
    }
  }
  // `refused` is destroyed here, outside the lock: its captures' destructors
  // may post.
  if (wake) Wake();
}

void EventLoop::RunSync(const std::function<void()>& fn) {
  RunOnLoopAndWait<void>(this, [&fn](const std::function<void()>& done) {
    fn();
    done();
  });
}

void EventLoop::Wake() {
  uint64_t one = 1;
  ssize_t n = write(wake_fd_, &one, sizeof(one));
  (void)n;
}

void EventLoop::RunAtIterationEnd(std::function<void()> fn) {
  iteration_end_.push_back(std::move(fn));
}

uint64_t EventLoop::RunAfter(int64_t delay_ms, std::function<void()> fn) {
  uint64_t id = next_timer_id_++;
  int64_t deadline = MonotonicUs() + delay_ms * 1000;
  timers_.emplace(std::make_pair(deadline, id), std::move(fn));
  timer_deadlines_[id] = deadline;
  return id;
}

int64_t EventLoop::NowUs() const { return MonotonicUs(); }

void EventLoop::CancelTimer(uint64_t id) {
  auto it = timer_deadlines_.find(id);
  if (it == timer_deadlines_.end()) return;
  timers_.erase(std::make_pair(it->second, id));
  timer_deadlines_.erase(it);
}

void EventLoop::AddFd(int fd, uint32_t events, FdCallback callback) {
  fds_[fd] = std::make_shared<FdCallback>(std::move(callback));
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    SHOAL_LOG(ERROR) << "epoll_ctl add fd " << fd << ": " << strerror(errno);
  }
}

void EventLoop::ModifyFd(int fd, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev);
}

void EventLoop::RemoveFd(int fd) {
  fds_.erase(fd);
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
}

int EventLoop::NextTimeoutMs() {
  if (!iteration_end_.empty()) return 0;
  if (timers_.empty()) return 1000;
  int64_t wait_us = timers_.begin()->first.first - MonotonicUs();
  if (wait_us <= 0) return 0;
  return static_cast<int>(std::min<int64_t>((wait_us + 999) / 1000, 1000));
}

void EventLoop::RunDueTimers() {
  int64_t now = MonotonicUs();
  while (!timers_.empty() && timers_.begin()->first.first <= now) {
    auto node = timers_.extract(timers_.begin());
    timer_deadlines_.erase(node.key().second);
    node.mapped()();
  }
}

void EventLoop::Run() {
  thread_id_.store(std::this_thread::get_id());
  constexpr int kMaxEvents = 128;
  epoll_event events[kMaxEvents];
  std::vector<std::function<void()>> batch;
  int64_t active_us = 0;  // when the last iteration had work
  while (!stopping_) {
    int timeout_ms = NextTimeoutMs();
    int n = 0;
    if (timeout_ms != 0 && MonotonicUs() - active_us < kBusyPollUs) {
      // Just busy: the answer to what it sent is likely a round trip away,
      // and waking a sleeping thread costs more than that on a VM. Poll,
      // yielding the core to any thread that can run.
      // (Work posted since the last batch has written the wake fd, so the
      // poll sees it too.)
      n = epoll_wait(epoll_fd_, events, kMaxEvents, 0);
      if (n == 0) {
        sched_yield();
        continue;
      }
    } else {
      n = epoll_wait(epoll_fd_, events, kMaxEvents, timeout_ms);
    }
    if (n < 0 && errno != EINTR) {
      SHOAL_LOG(ERROR) << "epoll_wait: " << strerror(errno);
    }
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == wake_fd_) {
        uint64_t count;
        ssize_t r = read(wake_fd_, &count, sizeof(count));
        (void)r;
        continue;
      }
      auto it = fds_.find(fd);
      if (it == fds_.end()) continue;
      // Keep the callback alive even if it removes its own fd.
      std::shared_ptr<FdCallback> cb = it->second;
      (*cb)(events[i].events);
    }
    {
      shoal::MutexLock lock(&mu_);
      batch.swap(posted_);
      wake_pending_ = false;
    }
    if (n > 0 || !batch.empty()) active_us = MonotonicUs();
    for (auto& fn : batch) fn();
    batch.clear();
    RunDueTimers();
    while (!iteration_end_.empty()) {
      std::vector<std::function<void()>> end;
      end.swap(iteration_end_);
      for (auto& fn : end) fn();
    }
  }
  RunLastClosures();
}

void EventLoop::RunLastClosures() {
  std::vector<std::function<void()>> last;
  {
    shoal::MutexLock lock(&mu_);
    closed_ = true;
    last.swap(posted_);
  }
  for (auto& fn : last) fn();
  last.clear();
  // What they wrote leaves now.
  while (!iteration_end_.empty()) {
    std::vector<std::function<void()>> end;
    end.swap(iteration_end_);
    for (auto& fn : end) fn();
  }
}

}  // namespace shoal::rpc
