#include "api/task_events.h"

#include <utility>

#include "common/util.h"

namespace shoal::internal {

constexpr size_t kMaxErrorBytes = 2048;

TaskEventBuffer::TaskEventBuffer(std::string job_id, bool enabled,
                                 size_t max_tasks)
    : job_id_(std::move(job_id)), enabled_(enabled), max_tasks_(max_tasks) {}

void TaskEventBuffer::Record(TaskEntry& task, const Change& change) {
  if (!enabled_) return;
  Pending* p;
  if (task.event_batch == batch_) {
    p = &pending_[task.event_index];
  } else {
    if (pending_.size() >= max_tasks_) {
      ++dropped_;
      return;
    }
    task.event_batch = batch_;
    task.event_index = static_cast<uint32_t>(pending_.size());
    p = &pending_.emplace_back();
    p->task_id = task.id;
    p->name = task.function;
    p->actor_id = task.actor_id;
    p->attempt = task.attempt;
    p->state = change.state;
  }
  if (task.attempt > p->attempt) {
    // A retry within one batch: the record is of the new attempt.
    p->attempt = task.attempt;
    p->state = change.state;
    for (int s = proto::TaskEvent::SUBMITTED_TO_WORKER; s < kNumTaskStates;
         ++s) {
      p->times[s] = 0;
    }
    p->error.clear();
    p->error_type.clear();
  } else if (!IsTerminal(p->state) && change.state > p->state) {
    p->state = change.state;
  }
  int64_t& when = p->times[change.state];
  if (when == 0) when = change.time_ms != 0 ? change.time_ms : NowMs();
  if (!change.node_id.empty()) p->node_id = change.node_id;
  if (!change.worker_id.empty()) p->worker_id = change.worker_id;
  if (!change.error.empty()) {
    // The first lines say what failed; a whole traceback stays with the
    // owner (the error it raises).
    p->error = change.error.substr(0, kMaxErrorBytes);
    p->error_type = change.error_type;
  }
}

std::unique_ptr<proto::TaskEventBatch> TaskEventBuffer::Take() {
  if (pending_.empty() && dropped_ == 0) return nullptr;
  auto batch = std::make_unique<proto::TaskEventBatch>();
  batch->set_job_id(job_id_);
  batch->set_dropped(dropped_);
  batch->mutable_events()->Reserve(static_cast<int>(pending_.size()));
  for (Pending& p : pending_) {
    proto::TaskEvent* e = batch->add_events();
    e->set_task_id(std::move(p.task_id));
    e->set_attempt(p.attempt);
    e->set_name(std::move(p.name));
    if (!p.actor_id.empty()) e->set_actor_id(std::move(p.actor_id));
    e->set_state(p.state);
    e->mutable_state_times_ms()->Add(std::begin(p.times), std::end(p.times));
    if (!p.node_id.empty()) e->set_node_id(std::move(p.node_id));
    if (!p.worker_id.empty()) e->set_worker_id(std::move(p.worker_id));
    if (!p.error.empty()) {
      e->set_error(std::move(p.error));
      e->set_error_type(std::move(p.error_type));
    }
  }
  pending_.clear();
  ++batch_;
  dropped_ = 0;
  return batch;
}

}  // namespace shoal::internal
