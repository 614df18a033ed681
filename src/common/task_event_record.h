// Task events (docs/design/observability.md): the owner of a task (its
// driver) and the worker that runs it report the task's state changes to
// the head in batches, off the task path. One record per task and attempt
// travels and is kept; reports about the same task fold into it.
#ifndef SHOAL_COMMON_TASK_EVENT_RECORD_H_
#define SHOAL_COMMON_TASK_EVENT_RECORD_H_

#include <cstdint>
#include <string_view>

#include "shoal/shoal.pb.h"

namespace shoal {

using TaskState = proto::TaskEvent::State;
inline constexpr int kNumTaskStates = proto::TaskEvent::State_ARRAYSIZE;

// The name a task is shown by (`shoal list tasks`, the dashboard) for the
// name its function is registered under: a Python function's
// ("pyfn/<job>/<digest>/<module>/<qualname>") is its qualified name
// ("slow", "Counter.incr"), as Ray shows it; others are their own.
std::string_view TaskDisplayName(std::string_view function);

// FINISHED or FAILED.
bool IsTerminal(TaskState state);

// Folds `event` into `record`, a record of the same task: a later attempt
// replaces an earlier one (a report of an earlier attempt is ignored);
// within an attempt the state only moves forward, and the time each state
// was entered, the node, the worker and the error are kept once known.
// Returns whether the record's state changed.
bool MergeTaskEvent(const proto::TaskEvent& event, proto::TaskEvent* record);

// How often reporters send what they have, from
// SHOAL_TASK_EVENTS_REPORT_INTERVAL_MS (default 1000); 0: task events are
// off and nothing is recorded.
int64_t TaskEventsIntervalMs();

}  // namespace shoal

#endif  // SHOAL_COMMON_TASK_EVENT_RECORD_H_
