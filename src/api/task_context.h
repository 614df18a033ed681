// What a worker tells the runtime about the task it is running: how deeply
// it is nested, so that what the task submits goes one level deeper (agents
// grant the deepest requests first, which keeps nested trees moving), and
// its id (Ray's get_runtime_context().get_task_id()).
#ifndef SHOAL_API_TASK_CONTEXT_H_
#define SHOAL_API_TASK_CONTEXT_H_

#include <string>
#include <utility>
#include <vector>

namespace shoal::internal {

// How deeply the task running now is nested (a driver's tasks: 0): the one
// on this thread, else the last one started in the process (for threads a
// task made itself). A runtime started inside it submits at one more.
void SetCurrentTaskDepth(int depth);
int CurrentTaskDepth();

// The id of the task or actor call running on this thread while it runs;
// "" elsewhere (a driver, between tasks, a thread the task made).
void SetCurrentTaskId(const std::string& task_id);
const std::string& CurrentTaskId();

// Whether the plain task this worker runs was asked to stop (shoal::Cancel):
// set from the worker's main thread, read by a blocking get in the task.
void SetCurrentTaskCancelled(bool cancelled);
bool CurrentTaskCancelled();

// The actor this worker process is made for, from the moment its
// constructor begins ("" in a driver or a task's worker): the actors it
// creates are its own, and end with its process (Ray's owner fate-sharing).
void SetProcessActorId(const std::string& actor_id);
std::string ProcessActorId();

// Refs lent inside the result being written on this thread (the id and its
// owner's address, CoreRuntime::Lend): the worker sends them with the
// result, so that its submitter borrows them.
void NoteLentRef(const std::string& id, const std::string& owner_address);
std::vector<std::pair<std::string, std::string>> TakeLentRefs();

}  // namespace shoal::internal

#endif  // SHOAL_API_TASK_CONTEXT_H_
