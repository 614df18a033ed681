// A task (or actor call) the driver has submitted and not yet finished,
// shared by the parts of the driver side: the dependency resolver fills its
// arguments, the task submitter leases workers for its shape, object
// recovery keeps it to run again.
#ifndef SHOAL_API_TASK_ENTRY_H_
#define SHOAL_API_TASK_ENTRY_H_

#include <map>
#include <string>
#include <vector>

#include "scheduling/label_selector.h"
#include "scheduling/resource_set.h"
#include "shoal/internal/runtime.h"
#include "shoal/shoal.pb.h"

namespace shoal::internal {

// A task's arguments as they resolve: each is a value, or a ref that
// becomes a value (inline objects) or a stored object (in node stores).
struct TaskArgs {
  std::vector<TaskArg> args;
  std::vector<std::string> values;            // resolved arguments (msgpack)
  std::map<int, proto::StoredObject> stored;  // or resolved to stored objects
  int pending = 0;                            // refs not ready yet
};

struct TaskEntry {
  std::string id;  // also the id of its result object
  std::string function;
  TaskArgs args;
  ResourceSet shape;
  LabelSelector selector;  // the nodes it may run on
  // Its worker may end after it (its function has max_calls): not
  // pipelined behind other tasks.
  bool worker_may_end = false;
  std::string shape_key;
  int retries_left = 3;
  int attempt = 0;
  std::string actor_id;  // a call of this actor's method
  int depth = 0;         // how deeply it is nested (a driver's: 0)
  // The task that submitted it, as it ran here ("" from a driver): a
  // recursive cancel of that task cancels this one (CancelChildren).
  std::string parent_id;
  bool in_cpp_program = false;  // runs in the job's C++ program's workers
  bool in_window = false;       // holds a place in the SubmitWindow
  bool sent = false;            // its spec went to a worker (this attempt)
  bool cancelled = false;       // cancel asked its worker to stop it
  // Its task events (api/task_event_buffer.h): the record of its current
  // attempt, and whether it changed since it was last sent.
  struct Events {
    int64_t times[proto::TaskEvent::State_ARRAYSIZE] = {};
    proto::TaskEvent::State state = proto::TaskEvent::STATE_UNKNOWN;
    int attempt = 0;
    uint32_t listed = 0;  // its place in the buffer's changed list, + 1
    std::string node_id;
    std::string worker_id;
    std::string error;
    std::string error_type;
  } events;
};

}  // namespace shoal::internal

#endif  // SHOAL_API_TASK_ENTRY_H_
