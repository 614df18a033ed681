#include "api/shape_queue.h"

#include <algorithm>

#include "rpc/channel.h"

namespace shoal::internal {
namespace {

// Pipelining pays for tiny tasks (it hides the round trip) and hurts long
// ones (they would queue behind each other on one worker while other leases
// sit idle), so the depth follows the shape's measured run time: about 2 ms
// of work in flight.
constexpr size_t kMaxInFlightPerWorker = 32;
constexpr double kInFlightWorkUs = 2000;

}  // namespace

LeasedWorker::LeasedWorker() = default;
LeasedWorker::~LeasedWorker() = default;

ShapeQueue::ShapeQueue(std::string key, ResourceSet shape, int depth,
                       LabelSelector selector, bool pipelined)
    : key_(std::move(key)),
      shape_(std::move(shape)),
      depth_(depth),
      selector_(std::move(selector)),
      pipelined_(pipelined) {}

void ShapeQueue::Add(const std::string& task_id, bool front) {
  if (front) {
    queue_.push_front(task_id);
  } else {
    queue_.push_back(task_id);
  }
}

std::string ShapeQueue::TakeNext() {
  std::string task = std::move(queue_.front());
  queue_.pop_front();
  return task;
}

std::deque<std::string> ShapeQueue::TakeAll() {
  std::deque<std::string> all = std::move(queue_);
  queue_.clear();
  return all;
}

void ShapeQueue::AddWorker(std::unique_ptr<LeasedWorker> worker) {
  workers_.push_back(std::move(worker));
}

LeasedWorker* ShapeQueue::FindWorker(const std::string& lease_id) {
  for (auto& w : workers_) {
    if (w->lease_id == lease_id) return w.get();
  }
  return nullptr;
}

const LeasedWorker* ShapeQueue::WorkerHolding(
    const std::string& task_id) const {
  for (const auto& w : workers_) {
    if (std::find(w->in_flight.begin(), w->in_flight.end(), task_id) !=
        w->in_flight.end()) {
      return w.get();
    }
  }
  return nullptr;
}

LeasedWorker* ShapeQueue::IdleWorker() const {
  for (const auto& w : workers_) {
    if (w->in_flight.empty()) return w.get();
  }
  return nullptr;
}

LeasedWorker* ShapeQueue::LeastBusyWorker() const {
  const size_t depth = MaxInFlight();
  LeasedWorker* best = nullptr;
  for (const auto& w : workers_) {
    if (w->in_flight.size() >= depth) continue;
    if (best == nullptr || w->in_flight.size() < best->in_flight.size()) {
      best = w.get();
    }
  }
  return best;
}

size_t ShapeQueue::MaxInFlight() const {
  if (avg_exec_us_ < 0 || !pipelined_) return 1;
  double depth = kInFlightWorkUs / std::max(avg_exec_us_, 1.0);
  return static_cast<size_t>(
      std::clamp(depth, 1.0, static_cast<double>(kMaxInFlightPerWorker)));
}

void ShapeQueue::TaskReturned(LeasedWorker& worker, const std::string& task_id,
                              int64_t now_us, int64_t exec_us) {
  auto pos =
      std::find(worker.in_flight.begin(), worker.in_flight.end(), task_id);
  if (pos != worker.in_flight.end()) worker.in_flight.erase(pos);
  if (worker.in_flight.empty()) worker.idle_since_us = now_us;
  if (exec_us < 0) return;
  double exec = static_cast<double>(exec_us);
  avg_exec_us_ = avg_exec_us_ < 0 ? exec : 0.8 * avg_exec_us_ + 0.2 * exec;
}

std::unique_ptr<LeasedWorker> ShapeQueue::RemoveLost(
    const std::string& lease_id, const std::string& never_sent,
    std::string* running) {
  running->clear();
  auto pos = std::find_if(workers_.begin(), workers_.end(), [&](const auto& w) {
    return w->lease_id == lease_id;
  });
  if (pos == workers_.end()) return nullptr;
  std::unique_ptr<LeasedWorker> w = std::move(*pos);
  workers_.erase(pos);
  if (!w->in_flight.empty()) *running = w->in_flight.front();
  if (*running == never_sent) running->clear();
  for (auto it = w->in_flight.rbegin(); it != w->in_flight.rend(); ++it) {
    if (*it != *running) queue_.push_front(*it);
  }
  return w;
}

std::vector<std::unique_ptr<LeasedWorker>> ShapeQueue::TakeIdle(
    int64_t now_us, int64_t idle_us, int64_t max_age_us) {
  std::vector<std::unique_ptr<LeasedWorker>> idle;
  if (!queue_.empty()) return idle;
  for (auto it = workers_.begin(); it != workers_.end();) {
    LeasedWorker& w = **it;
    if (w.in_flight.empty() && (now_us - w.idle_since_us >= idle_us ||
                                now_us - w.leased_at_us >= max_age_us)) {
      idle.push_back(std::move(*it));
      it = workers_.erase(it);
    } else {
      ++it;
    }
  }
  return idle;
}

std::vector<std::unique_ptr<LeasedWorker>> ShapeQueue::TakeAllWorkers() {
  std::vector<std::unique_ptr<LeasedWorker>> all = std::move(workers_);
  workers_.clear();
  return all;
}

int ShapeQueue::LeaseRequestsWanted() const {
  if (awaiting_program_) return 0;
  int wanted = static_cast<int>(std::min<size_t>(
      queue_.size(), static_cast<size_t>(kMaxPendingLeaseRequests)));
  return std::max(0, wanted - pending_lease_requests_);
}

void ShapeQueue::RequestSent(uint64_t number, const std::string& agent) {
  requests_out_[number] = {agent};
  ++pending_lease_requests_;
}

void ShapeQueue::RequestAnswered(uint64_t number) {
  auto out = requests_out_.find(number);
  if (out == requests_out_.end()) return;
  if (!out->second.canceling) --pending_lease_requests_;
  requests_out_.erase(out);
}

std::vector<std::pair<uint64_t, std::string>> ShapeQueue::Withdraw() {
  std::vector<std::pair<uint64_t, std::string>> withdrawn;
  for (auto& [number, out] : requests_out_) {
    if (out.canceling) continue;
    out.canceling = true;
    --pending_lease_requests_;
    withdrawn.emplace_back(number, out.agent);
  }
  return withdrawn;
}

bool ShapeQueue::CountStartFailure() {
  if (++consecutive_failures_ < kMaxLeaseFailures) return false;
  consecutive_failures_ = 0;
  return true;
}

void ShapeQueue::AwaitProgram(const std::string& lacking) {
  awaiting_program_ = true;
  lacking_ = lacking;
}

std::string ShapeQueue::EndProgramWait() {
  awaiting_program_ = false;
  return lacking_;
}

}  // namespace shoal::internal
