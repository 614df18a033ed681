#include "worker/running_tasks.h"

#include <algorithm>

#include "absl/time/time.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/task_event_record.h"
#include "head_client/head_client.h"
#include "rpc/event_loop.h"

namespace shoal::internal {

RunningTasks::RunningTasks(Options options) : options_(std::move(options)) {
  thread_ = std::thread([this] { Loop(); });
}

RunningTasks::~RunningTasks() {
  {
    shoal::MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  thread_.join();
  if (loop_ != nullptr) {
    loop_->RunSync([&] { head_->Close(); });
    loop_->Stop();
  }
}

void RunningTasks::Begin(const proto::TaskSpec* spec, int64_t start_ms) {
  shoal::MutexLock lock(&mu_);
  running_.push_back({spec, start_ms, false});
}

void RunningTasks::End(const proto::TaskSpec* spec) {
  shoal::MutexLock lock(&mu_);
  auto it = std::find_if(running_.begin(), running_.end(),
                         [&](const Running& r) { return r.spec == spec; });
  if (it == running_.end()) return;
  *it = running_.back();
  running_.pop_back();
}

void RunningTasks::Loop() {
  mu_.Lock();
  while (!stop_) {
    cv_.WaitWithTimeout(&mu_, absl::Milliseconds(options_.interval_ms));
    if (stop_) break;
    proto::TaskEventBatch batch;
    const int64_t now = NowMs();
    for (Running& r : running_) {
      if (r.reported || now - r.start_ms < options_.interval_ms) continue;
      r.reported = true;
      proto::TaskEvent* e = batch.add_events();
      e->set_task_id(r.spec->task_id());
      e->set_attempt(r.spec->attempt());
      e->set_name(std::string(TaskDisplayName(r.spec->function_name())));
      e->set_actor_id(r.spec->actor_id());
      e->set_state(proto::TaskEvent::RUNNING);
      e->mutable_state_times_ms()->Resize(kNumTaskStates, 0);
      e->set_state_times_ms(proto::TaskEvent::RUNNING, r.start_ms);
      e->set_node_id(options_.node_id);
      e->set_worker_id(options_.worker_id);
    }
    if (batch.events().empty()) continue;
    batch.set_job_id(options_.job_id);
    mu_.Unlock();
    Send(batch);
    mu_.Lock();
  }
  mu_.Unlock();
}

void RunningTasks::Send(const proto::TaskEventBatch& batch) {
  if (loop_ == nullptr) {
    auto loop = rpc::EventLoop::Create("shoal-events");
    if (!loop.ok()) {
      SHOAL_LOG(WARNING) << "no task events from this worker: "
                         << loop.status();
      return;
    }
    loop_ = std::move(*loop);
    head_ = std::make_unique<rpc::HeadClient>(
        loop_.get(), options_.head_address, options_.token,
        "worker " + options_.worker_id + " events");
  }
  rpc::RunOnLoopAndWait<void>(loop_.get(), [&](std::function<void()> done) {
    head_->ReportTaskEvents(
        batch,
        [done](absl::StatusOr<proto::Empty> r) {
          if (!r.ok()) {
            SHOAL_LOG(WARNING)
                << "the head did not take task events: " << r.status();
          }
          done();
        },
        2000);
  });
}

}  // namespace shoal::internal
