#include "head/task_event_store.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace shoal {
namespace {

constexpr int kDefaultLimit = 100;
// How far from the oldest record eviction looks for one that has ended.
constexpr size_t kEvictScan = 64;
// The most a batch may say it dropped (far above any real batch).
constexpr int64_t kMaxCount = int64_t{1} << 40;

std::string TypeOf(const proto::TaskEvent& e) {
  return e.actor_id().empty() ? "NORMAL_TASK" : "ACTOR_TASK";
}

// The value of `key` in `e`; false for an unknown key.
bool Field(const proto::TaskEvent& e, const std::string& key,
           std::string* value) {
  if (key == "task_id") {
    *value = e.task_id();
  } else if (key == "job_id") {
    *value = e.job_id();
  } else if (key == "name") {
    *value = e.name();
  } else if (key == "state") {
    *value = proto::TaskEvent::State_Name(e.state());
  } else if (key == "node_id") {
    *value = e.node_id();
  } else if (key == "worker_id") {
    *value = e.worker_id();
  } else if (key == "actor_id") {
    *value = e.actor_id();
  } else if (key == "type") {
    *value = TypeOf(e);
  } else if (key == "error_type") {
    *value = e.error_type();
  } else {
    return false;
  }
  return true;
}

}  // namespace

const char* const TaskEventStore::kFilterKeys =
    "task_id, job_id, name, state, node_id, worker_id, actor_id, type, "
    "error_type";

TaskEventStore::TaskEventStore(size_t max_per_job, size_t max_total)
    : max_per_job_(std::max<size_t>(1, max_per_job)),
      max_total_(std::max(max_per_job_, max_total)) {}

size_t TaskEventStore::size() const { return total_; }

void TaskEventStore::Count(TaskState state, int64_t delta) {
  if (state >= 0 && state < kNumTaskStates) counts_[state] += delta;
}

void TaskEventStore::Add(const proto::TaskEventBatch& batch) {
  // A reporter's counts, bounded: they come from a peer.
  auto bounded = [](int64_t n) { return std::clamp<int64_t>(n, 0, kMaxCount); };
  reporter_dropped_ += bounded(batch.dropped());
  // Tasks a reporter could not send still count as ended.
  Count(proto::TaskEvent::FINISHED, bounded(batch.dropped_finished()));
  Count(proto::TaskEvent::FAILED, bounded(batch.dropped_failed()));
  if (batch.events().empty()) return;
  auto [job_it, new_job] = jobs_.try_emplace(batch.job_id());
  if (new_job) job_order_.push_back(batch.job_id());
  Job& job = job_it->second;
  // Of a batch larger than a job keeps, the first tasks that are new and
  // have ended would be forgotten at once: they are only counted.
  int skip = batch.events_size() - static_cast<int>(max_per_job_);
  for (const proto::TaskEvent& event : batch.events()) {
    if (event.task_id().empty()) continue;
    if (skip-- > 0 && IsTerminal(event.state()) &&
        job.tasks.count(event.task_id()) == 0) {
      Count(event.state(), +1);
      ++dropped_;
      continue;
    }
    auto [it, added] = job.tasks.try_emplace(event.task_id());
    proto::TaskEvent& record = it->second;
    if (added) {
      ++total_;
      record = event;
      record.set_job_id(batch.job_id());
      record.mutable_state_times_ms()->Resize(kNumTaskStates, 0);
      Count(record.state(), +1);
      job.order.push_back(event.task_id());
      continue;
    }
    const TaskState before = record.state();
    if (MergeTaskEvent(event, &record)) {
      Count(before, -1);
      Count(record.state(), +1);
    }
  }
  if (auto ended = ended_.find(batch.job_id()); ended != ended_.end()) {
    // Reports that come after the driver went (a worker's, or the driver's
    // last batch on another connection) cannot bring its tasks back.
    for (const proto::TaskEvent& event : batch.events()) {
      auto it = job.tasks.find(event.task_id());
      if (it != job.tasks.end()) Fail(ended->second, &it->second);
    }
  }
  while (job.tasks.size() > max_per_job_) Evict(job);
  // Over the total: the oldest jobs' records go first, and a job with none
  // left is forgotten.
  while (total_ > max_total_ && !job_order_.empty()) {
    auto oldest = jobs_.find(job_order_.front());
    if (oldest == jobs_.end() || oldest->second.tasks.empty()) {
      if (oldest != jobs_.end()) jobs_.erase(oldest);
      job_order_.pop_front();
      continue;
    }
    Evict(oldest->second);
  }
}

void TaskEventStore::Fail(const EndedJob& why, proto::TaskEvent* record) {
  if (IsTerminal(record->state())) return;
  Count(record->state(), -1);
  record->set_state(proto::TaskEvent::FAILED);
  record->mutable_state_times_ms()->Resize(kNumTaskStates, 0);
  record->set_state_times_ms(proto::TaskEvent::FAILED, why.time_ms);
  record->set_error(why.reason);
  record->set_error_type("WORKER_DIED");
  Count(proto::TaskEvent::FAILED, +1);
}

void TaskEventStore::EndJob(const std::string& job_id,
                            const std::string& reason, int64_t now_ms) {
  auto [it, added] = ended_.try_emplace(job_id);
  if (!added) return;
  it->second = {.reason = reason, .time_ms = now_ms};
  ended_order_.push_back(job_id);
  if (auto job = jobs_.find(job_id); job != jobs_.end()) {
    for (auto& [id, record] : job->second.tasks) Fail(it->second, &record);
  }
  while (ended_order_.size() > kMaxEndedJobs) {
    ended_.erase(ended_order_.front());
    ended_order_.pop_front();
  }
}

void TaskEventStore::Evict(Job& job) {
  // Prefer a task that has ended: one still running stays visible.
  size_t pick = 0;
  for (size_t i = 0; i < job.order.size() && i < kEvictScan; ++i) {
    auto it = job.tasks.find(job.order[i]);
    if (it != job.tasks.end() && IsTerminal(it->second.state())) {
      pick = i;
      break;
    }
  }
  auto it = job.tasks.find(job.order[pick]);
  if (it != job.tasks.end()) {
    // Ended tasks stay counted (FINISHED and FAILED count every task that
    // ended); one still going is no longer known to be in its state.
    if (!IsTerminal(it->second.state())) Count(it->second.state(), -1);
    job.tasks.erase(it);
    --total_;
  }
  job.order.erase(job.order.begin() + static_cast<std::ptrdiff_t>(pick));
  ++dropped_;
}

absl::StatusOr<proto::TaskList> TaskEventStore::List(
    const proto::ListTasksRequest& request) const {
  proto::TaskList out;
  for (int s = 1; s < kNumTaskStates; ++s) {
    (*out.mutable_state_counts())[proto::TaskEvent::State_Name(
        static_cast<TaskState>(s))] = counts_[s];
  }
  out.set_dropped(dropped_);
  out.set_reporter_dropped(reporter_dropped_);
  if (request.counts_only()) return out;

  std::vector<std::pair<std::string, std::string>> filters;
  for (const std::string& f : request.filters()) {
    std::pair<std::string, std::string> kv =
        absl::StrSplit(f, absl::MaxSplits('=', 1));
    std::string probe;
    if (f.find('=') == std::string::npos ||
        !Field(proto::TaskEvent(), kv.first, &probe)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--filter ", f, ": tasks are filtered by KEY=VALUE, KEY one of ",
          kFilterKeys));
    }
    filters.push_back(std::move(kv));
  }
  const size_t limit = request.limit() > 0
                           ? static_cast<size_t>(request.limit())
                           : kDefaultLimit;
  std::map<std::pair<std::string, std::string>, proto::TaskSummary> summary;
  std::vector<const proto::TaskEvent*> kept;
  int64_t total = 0;
  std::string value;
  for (const auto& [job_id, job] : jobs_) {
    // Newest first, so that a limit keeps the latest tasks.
    for (auto id = job.order.rbegin(); id != job.order.rend(); ++id) {
      auto it = job.tasks.find(*id);
      if (it == job.tasks.end()) continue;
      const proto::TaskEvent& e = it->second;
      bool match = true;
      for (const auto& [key, want] : filters) {
        Field(e, key, &value);
        if (value != want) {
          match = false;
          break;
        }
      }
      if (!match) continue;
      ++total;
      if (request.summary()) {
        proto::TaskSummary& s = summary[{e.name(), TypeOf(e)}];
        (*s.mutable_state_counts())[proto::TaskEvent::State_Name(e.state())]++;
      } else if (kept.size() < limit) {
        kept.push_back(&e);
      }
    }
  }
  out.set_total(total);
  for (const proto::TaskEvent* e : kept) *out.add_tasks() = *e;
  for (auto& [key, s] : summary) {
    s.set_name(key.first);
    s.set_type(key.second);
    *out.add_summary() = std::move(s);
  }
  return out;
}

}  // namespace shoal
