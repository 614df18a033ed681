#include "common/task_event_record.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "common/environment.h"

namespace shoal {

std::string_view TaskDisplayName(std::string_view function) {
  if (!function.starts_with("pyfn/")) return function;
  return function.substr(function.rfind('/') + 1);
}

bool IsTerminal(TaskState state) {
  return state == proto::TaskEvent::FINISHED ||
         state == proto::TaskEvent::FAILED;
}

bool MergeTaskEvent(const proto::TaskEvent& event, proto::TaskEvent* record) {
  if (event.attempt() < record->attempt()) return false;
  const TaskState before = record->state();
  auto* times = record->mutable_state_times_ms();
  while (times->size() < kNumTaskStates) times->Add(0);
  if (event.attempt() > record->attempt()) {
    // A retry: it waits, is pushed and runs again; only when it was first
    // submitted stays.
    record->set_attempt(event.attempt());
    record->set_state(event.state());
    record->clear_error();
    record->clear_error_type();
    for (int s = proto::TaskEvent::SUBMITTED_TO_WORKER; s < kNumTaskStates;
         ++s) {
      times->Set(s, 0);
    }
  } else if (!IsTerminal(before) && event.state() > before) {
    record->set_state(event.state());
  }
  for (int s = 0; s < event.state_times_ms_size() && s < kNumTaskStates; ++s) {
    if (event.state_times_ms(s) != 0 && times->Get(s) == 0) {
      times->Set(s, event.state_times_ms(s));
    }
  }
  if (record->name().empty()) record->set_name(event.name());
  if (record->actor_id().empty()) record->set_actor_id(event.actor_id());
  if (!event.node_id().empty()) record->set_node_id(event.node_id());
  if (!event.worker_id().empty()) record->set_worker_id(event.worker_id());
  if (!event.error().empty()) {
    record->set_error(event.error());
    record->set_error_type(event.error_type());
  }
  return record->state() != before;
}

int64_t TaskEventsIntervalMs() {
  static const int64_t interval =
      env::GetInt(env::Var::kTaskEventsReportIntervalMs);
  return interval;
}

}  // namespace shoal
