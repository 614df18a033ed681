#include "api/task_lifecycle.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/owned_objects.h"
#include "api/submit_window.h"
#include "common/cancel_token.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace shoal::internal {
namespace {

// What a worker answers for a task cancelled while it ran or before it began
// (worker/worker_main.cc).
constexpr char kCancelledType[] = "shoal::TaskCancelled";

}  // namespace

TaskLifecycle::TaskLifecycle(OwnedObjects* objects, SubmitWindow* window,
                             uint64_t inline_threshold, Hooks hooks)
    : objects_(objects),
      window_(window),
      inline_threshold_(inline_threshold),
      hooks_(std::move(hooks)),
      deps_(objects) {}

void TaskLifecycle::Record(TaskEntry& task,
                           const TaskEventBuffer::Change& change) {
  if (events_ != nullptr) events_->Record(task, change);
}

void TaskLifecycle::Submit(std::unique_ptr<TaskEntry> task) {
  TaskEntry* t = task.get();
  tasks_[t->id] = std::move(task);
  absl::Status resolved = deps_.Resolve(t->id, &t->args);
  if (!resolved.ok()) {
    // Failed from the loop's next turn: the caller may be inside the
    // completion of another task.
    hooks_.post([this, id = t->id, resolved] { Fail(id, resolved); });
    return;
  }
  if (t->args.pending == 0) {
    Enqueue(*t);
  } else {
    Record(*t, {.state = proto::TaskEvent::PENDING_ARGS_AVAIL});
  }
}

void TaskLifecycle::Enqueue(TaskEntry& task, bool front) {
  task.sent = false;
  Record(task, {.state = proto::TaskEvent::PENDING_NODE_ASSIGNMENT});
  if (!task.actor_id.empty()) return hooks_.actor_ready(task.actor_id, task.id);
  hooks_.enqueue(task, front);
}

bool TaskLifecycle::FillSpec(const std::string& task_id,
                             const std::string& node_id,
                             const std::string& worker_id,
                             proto::TaskSpec* spec) {
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) return false;
  TaskEntry& t = *it->second;
  t.sent = true;
  Record(t, {.state = proto::TaskEvent::SUBMITTED_TO_WORKER,
             .node_id = node_id,
             .worker_id = worker_id});
  spec->set_task_id(t.id);
  spec->set_function_name(t.function);
  for (const auto& v : t.args.values) spec->add_args(v);
  for (const auto& [index, object] : t.args.stored) {
    (*spec->mutable_stored_args())[index] = object;
    objects_->AddCopy(object.object_id(), node_id,
                      hooks_.transfer_address_of(node_id));
  }
  spec->set_attempt(t.attempt);
  spec->set_result_id(t.id);
  spec->set_owner(owner_);
  spec->set_inline_threshold(inline_threshold_);
  spec->set_depth(t.depth);
  return true;
}

std::string TaskLifecycle::FunctionOf(const std::string& task_id) const {
  auto t = tasks_.find(task_id);
  return t != tasks_.end() ? t->second->function : "?";
}

void TaskLifecycle::TaskReplied(const std::string& task_id,
                                const std::string& node_id,
                                absl::StatusOr<proto::TaskResult> result) {
  if (result.ok() && result->ok()) return Complete(task_id, std::move(*result));
  if (auto t = tasks_.find(task_id);
      t != tasks_.end() &&
      (t->second->cancelled ||
       (result.ok() && result->error_type() == kCancelledType))) {
    return Fail(task_id, CancelledError(*t->second, "while it ran"));
  }
  if (!result.ok()) return Fail(task_id, result.status());
  if (result->error_type() == "shoal::ObjectLost") {
    // Runs again once the argument is rebuilt, if it can be.
    absl::Status rebuilding = RebuildArgument(task_id, result->lost_object());
    if (!rebuilding.ok()) {
      Fail(task_id,
           TaskError(ErrorKind::kObjectLost,
                     absl::StrCat("task ", task_id, " cannot run on node ",
                                  node_id, ": ", result->error(), "; ",
                                  rebuilding.message())));
    }
    return;
  }
  Fail(task_id, RemoteFailure(FunctionOf(task_id), node_id, result->error(),
                              result->error_data()));
}

void TaskLifecycle::CallReplied(const std::string& task_id,
                                const std::string& node_id,
                                proto::TaskResult result) {
  if (result.ok()) return Complete(task_id, std::move(result));
  Fail(task_id, RemoteFailure(FunctionOf(task_id), node_id, result.error(),
                              result.error_data()));
}

void TaskLifecycle::WorkerDied(const std::string& task_id,
                               const std::string& how) {
  auto t = tasks_.find(task_id);
  if (t == tasks_.end()) return;
  TaskEntry& task = *t->second;
  if (task.cancelled) {  // its worker was ended to cancel it (force)
    return Fail(task.id, CancelledError(task, "its worker was ended"));
  }
  if (task.retries_left > 0) {
    --task.retries_left;
    ++task.attempt;
    SHOAL_LOG(WARNING) << "task " << task.function << " (" << task.id
                       << "): " << how << "; retrying (" << task.retries_left
                       << " retries left)";
    return Enqueue(task, /*front=*/true);
  }
  Fail(task.id,
       TaskError(ErrorKind::kWorkerDied,
                 absl::StrCat("task ", task.function, " (", task.id,
                              ") failed: the worker running it died: ", how,
                              ". It ran ", task.attempt + 1,
                              " time(s); raise SetMaxRetries() or look "
                              "in the worker's log (session folder, "
                              "logs/worker-*.log)")));
}

void TaskLifecycle::CallFailed(const std::string& task_id, ErrorKind kind,
                               const std::string& message) {
  auto t = tasks_.find(task_id);
  std::string text = t != tasks_.end()
                         ? absl::StrCat("call ", t->second->function, " (",
                                        task_id, ") failed: ", message)
                         : message;
  Fail(task_id, TaskError(kind, text));
}

TaskLifecycle::Cancelled TaskLifecycle::Cancel(const std::string& task_id,
                                               bool force, bool recursive) {
  auto t = tasks_.find(task_id);
  if (t == tasks_.end()) return Cancelled::kNotPending;
  TaskEntry& task = *t->second;
  // Still waiting for its arguments, or (a task) for a worker: a queued
  // task whose entry is gone is skipped (FillSpec answers false).
  if (task.args.pending > 0 || (task.actor_id.empty() && !task.sent)) {
    Fail(task.id, CancelledError(task, "before it ran"));
    return Cancelled::kNow;
  }
  if (!task.actor_id.empty()) return Cancelled::kActorCall;
  if (!task.cancelled && hooks_.cancel_sent) {
    if (!hooks_.cancel_sent(task, force, recursive)) {
      // Queued again, its worker lost after it was sent: it has not run
      // since, and the submitter skips it (FillSpec answers false).
      Fail(task.id, CancelledError(task, "before it ran"));
      return Cancelled::kNow;
    }
    task.cancelled = true;
  }
  return Cancelled::kAsked;
}

int TaskLifecycle::CancelChildren(int32_t parent_token, bool force) {
  if (parent_token == 0) return 0;
  std::vector<std::string> children;
  for (const auto& [id, task] : tasks_) {
    if (!task->parent_id.empty() &&
        CancelToken(task->parent_id) == parent_token) {
      children.push_back(id);
    }
  }
  int cancelled = 0;
  for (const std::string& id : children) {
    Cancelled how = Cancel(id, force, /*recursive=*/true);
    if (how == Cancelled::kNow || how == Cancelled::kAsked) ++cancelled;
  }
  return cancelled;
}

absl::StatusOr<bool> TaskLifecycle::CancelTask(const std::string& task_id,
                                               bool force, bool recursive) {
  switch (Cancel(task_id, force, recursive)) {
    case Cancelled::kNow:
    case Cancelled::kAsked:
      return true;
    case Cancelled::kActorCall:
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot cancel actor call ", task_id,
          ": it was already given to its actor (only calls still waiting "
          "for their arguments can be cancelled)"));
    case Cancelled::kNotPending:
      break;
  }
  OwnedObjects::Ready ready;
  absl::Status error;
  if (objects_->Peek(task_id, &ready, &error) ==
      OwnedObjects::State::kUnknown) {
    return absl::NotFoundError(absl::StrCat(
        "cannot cancel ", task_id,
        ": this process owns no object of that id (cancel a ref that a "
        ".remote() call made here returned)"));
  }
  return false;  // it had ended: its result stays
}

absl::Status TaskLifecycle::CancelledError(const TaskEntry& task,
                                           const char* when) {
  return TaskError(
      ErrorKind::kCancelled,
      absl::StrCat("task ", task.function, " (", task.id,
                   ") failed: it was cancelled ", when, " (shoal::Cancel)"));
}

void TaskLifecycle::LeaveWindow(TaskEntry& task) {
  if (!task.in_window) return;
  task.in_window = false;
  window_->Release();
}

void TaskLifecycle::Complete(std::string id, proto::TaskResult result) {
  std::unique_ptr<TaskEntry> done;
  if (auto t = tasks_.find(id); t != tasks_.end()) {
    done = std::move(t->second);
    tasks_.erase(t);
    LeaveWindow(*done);
    // Both times as the worker saw them.
    if (result.start_time_ms() != 0) {
      Record(*done, {.state = proto::TaskEvent::RUNNING,
                     .time_ms = result.start_time_ms()});
    }
    Record(*done,
           {.state = proto::TaskEvent::FINISHED,
            .time_ms = result.start_time_ms() != 0
                           ? result.start_time_ms() + result.exec_us() / 1000
                           : 0});
    if (events_ != nullptr) events_->Ended(*done);
  }
  // Borrowed first: a reader of the result finds them held.
  if (result.borrowed_size() > 0 && hooks_.borrowed) {
    hooks_.borrowed(id, result.borrowed());
  }
  // The task that made a stored object can make it again if every copy is
  // lost; it (and the arguments it holds) is kept while the object is.
  if (objects_->Complete(id, &result) && done != nullptr) {
    recovery_.Keep(std::move(done));
  }
  done.reset();
  ObjectDone(id);
}

void TaskLifecycle::Fail(std::string id, absl::Status error) {
  if (auto t = tasks_.find(id); t != tasks_.end()) {
    const std::string message(error.message());
    Record(*t->second, {.state = proto::TaskEvent::FAILED,
                        .error = message,
                        .error_type = TaskErrorTypeName(error)});
    if (events_ != nullptr) events_->Ended(*t->second);
    LeaveWindow(*t->second);
    std::string actor = t->second->actor_id;
    tasks_.erase(t);
    if (!actor.empty()) hooks_.actor_drop(actor, id);
  }
  objects_->Fail(id, std::move(error));
  ObjectDone(id);
}

void TaskLifecycle::ObjectDone(const std::string& id) {
  std::vector<std::string> ready;
  std::vector<std::pair<std::string, absl::Status>> failed;
  deps_.ObjectDone(
      id,
      [this](const std::string& task_id) -> TaskArgs* {
        auto t = tasks_.find(task_id);
        return t == tasks_.end() ? nullptr : &t->second->args;
      },
      &ready, &failed);
  if (hooks_.settled) hooks_.settled(id);
  objects_->ForgetIfReleased(id);
  for (auto& [task_id, error] : failed) Fail(task_id, error);
  for (const std::string& task_id : ready) {
    auto t = tasks_.find(task_id);
    if (t != tasks_.end()) Enqueue(*t->second);
  }
}

absl::Status TaskLifecycle::Reconstruct(const std::string& id,
                                        const proto::StoredObject& failed) {
  if (objects_->IsBorrowed(id)) {
    return TaskError(ErrorKind::kObjectLost,
                     "this process borrowed it (a ref inside a task's "
                     "result): the process that owns it holds the task that "
                     "made it, and Shoal does not ask an owner to rebuild "
                     "what it lent");
  }
  switch (objects_->NeedsRebuild(id, failed)) {
    case OwnedObjects::Rebuild::kGone:
      return TaskError(ErrorKind::kObjectLost, "it was released");
    case OwnedObjects::Rebuild::kUnderway:
      return absl::OkStatus();
    case OwnedObjects::Rebuild::kNeeded:
      break;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<TaskEntry> task,
                   recovery_.TakeForRebuild(id));
  objects_->MarkPending(id);
  Submit(std::move(task));
  return absl::OkStatus();
}

absl::Status TaskLifecycle::RebuildArgument(const std::string& task_id,
                                            const std::string& lost) {
  auto t = tasks_.find(task_id);
  if (t == tasks_.end()) {
    return TaskError(ErrorKind::kObjectLost, "the task is gone");
  }
  // Taken before Reconstruct, which may add a task (and move the table's
  // slots); the entry itself stays where it is.
  TaskEntry& task = *t->second;
  RETURN_IF_ERROR(Reconstruct(lost, objects_->StoredObjectOf(lost)));
  if (!deps_.WaitAgain(task_id, &task.args, lost)) {
    Enqueue(task, /*front=*/true);
  }
  return absl::OkStatus();
}

TaskLifecycle::Taken TaskLifecycle::TakeAll() {
  Taken taken;
  taken.tasks = std::move(tasks_);
  tasks_.clear();
  taken.lineage = recovery_.TakeAll();
  return taken;
}

}  // namespace shoal::internal
