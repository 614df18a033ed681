// Fakes for the node agent's unit tests: processes, time and lease
// requesters in memory, so that tests need no sockets, children or sleeps.
#ifndef SHOAL_AGENT_AGENT_TESTING_H_
#define SHOAL_AGENT_AGENT_TESTING_H_

#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "agent/lease_queue.h"
#include "agent/lease_service.h"
#include "agent/worker_pool.h"

namespace shoal::agent {

// Processes in memory: Start hands out pids, Exit() makes one exit with a
// wait status that the next ReapAny reports.
class FakeProcessLauncher : public ProcessLauncher {
 public:
  struct State {
    std::vector<SpawnOptions> started;
    std::vector<std::pair<pid_t, int>> signals;
    std::deque<Exit> exited;  // not reaped yet
    std::set<pid_t> running;
    absl::Status start_error = absl::OkStatus();
    bool exit_on_sigterm = true;
    pid_t next_pid = 100;
  };

  explicit FakeProcessLauncher(State* state) : s_(state) {}

  absl::StatusOr<pid_t> Start(const SpawnOptions& options) override {
    if (!s_->start_error.ok()) return s_->start_error;
    s_->started.push_back(options);
    s_->running.insert(s_->next_pid);
    return s_->next_pid++;
  }
  absl::Status Signal(pid_t pid, int signal) override {
    if (!s_->running.count(pid)) return absl::NotFoundError("no process");
    s_->signals.emplace_back(pid, signal);
    if (signal == SIGKILL || (signal == SIGTERM && s_->exit_on_sigterm)) {
      Exit(pid, signal == SIGKILL ? 9 : 15);
    }
    return absl::OkStatus();
  }
  std::optional<ProcessLauncher::Exit> ReapAny() override {
    if (s_->exited.empty()) return std::nullopt;
    ProcessLauncher::Exit e = s_->exited.front();
    s_->exited.pop_front();
    return e;
  }
  bool Reap(pid_t pid, bool wait) override {
    for (auto it = s_->exited.begin(); it != s_->exited.end(); ++it) {
      if (it->pid == pid) {
        s_->exited.erase(it);
        return true;
      }
    }
    return !s_->running.count(pid);
  }

  // The process ends (killed by `signal`, or exits with `code` when signal
  // is 0).
  void Exit(pid_t pid, int signal, int code = 0) {
    s_->running.erase(pid);
    int status = signal != 0 ? signal : (code << 8);  // as waitpid encodes
    s_->exited.push_back({pid, status});
  }

 private:
  State* s_;
};

// Time moved by hand: Advance runs the timers that come due, in order.
class FakeClock : public Clock {
 public:
  int64_t NowUs() override { return now_us_; }
  uint64_t RunAfter(int64_t delay_ms, std::function<void()> fn) override {
    timers_[next_id_] = {now_us_ + delay_ms * 1000, std::move(fn)};
    return next_id_++;
  }
  void Cancel(uint64_t id) override { timers_.erase(id); }

  void Advance(int64_t ms) {
    int64_t until = now_us_ + ms * 1000;
    while (true) {
      auto due = timers_.end();
      for (auto it = timers_.begin(); it != timers_.end(); ++it) {
        if (it->second.first <= until &&
            (due == timers_.end() || it->second.first < due->second.first)) {
          due = it;
        }
      }
      if (due == timers_.end()) break;
      now_us_ = std::max(now_us_, due->second.first);
      std::function<void()> fn = std::move(due->second.second);
      timers_.erase(due);
      fn();
    }
    now_us_ = until;
  }
  size_t pending() const { return timers_.size(); }

 private:
  int64_t now_us_ = 1'000'000'000;
  uint64_t next_id_ = 1;
  std::map<uint64_t, std::pair<int64_t, std::function<void()>>> timers_;
};

// The replies one requester got, and whether it is still there.
struct Inbox {
  std::vector<proto::RequestLeaseReply> replies;
  bool connected = true;
};

class FakeRequester : public LeaseRequester {
 public:
  FakeRequester(uint64_t conn, Inbox* inbox)
      : conn_(conn), peer_("10.0.0.9:" + std::to_string(conn)), inbox_(inbox) {}
  uint64_t connection_id() const override { return conn_; }
  const std::string& peer() const override { return peer_; }
  bool connected() const override { return inbox_->connected; }
  void Reply(const proto::RequestLeaseReply& reply) const override {
    inbox_->replies.push_back(reply);
  }

 private:
  const uint64_t conn_;
  const std::string peer_;
  Inbox* const inbox_;
};

}  // namespace shoal::agent

#endif  // SHOAL_AGENT_AGENT_TESTING_H_
