// What becomes of the tasks and actor calls this process submitted, from
// submission to their result: arguments resolved (dependency_resolver.h),
// queued for a worker, their specs written, and each outcome (a result, a
// failure, a worker that died, a lost argument) decided: done, retried,
// rebuilt or failed, with their result objects (owned_objects.h) and task
// events kept in step. The tasks that made stored objects are kept
// (object_recovery.h) to rebuild those objects if every copy is lost.
//
// What it does not do itself, it is given: queueing for a worker and the
// actor calls' order are the submitters' (Hooks), so that it is tested
// without sockets or workers.
//
// Threading: the runtime's loop thread only.
#ifndef SHOAL_API_TASK_LIFECYCLE_H_
#define SHOAL_API_TASK_LIFECYCLE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "api/dependency_resolver.h"
#include "api/object_recovery.h"
#include "api/task_entry.h"
#include "api/task_error.h"
#include "api/task_event_buffer.h"

namespace shoal::internal {

class OwnedObjects;
class SubmitWindow;

class TaskLifecycle {
 public:
  struct Hooks {
    // Queues a task whose arguments are ready for a worker of its shape;
    // `front`: ahead of the others (a retry). Not for actor calls.
    std::function<void(TaskEntry& task, bool front)> enqueue;
    // An actor call's arguments are ready / the call is dropped (failed).
    std::function<void(const std::string& actor_id, const std::string& task_id)>
        actor_ready;
    std::function<void(const std::string& actor_id, const std::string& task_id)>
        actor_drop;
    // Runs `fn` on the loop's next turn.
    std::function<void(std::function<void()> fn)> post;
    // host:port of the transfer server of node `node_id` ("" if unknown).
    std::function<std::string(const std::string& node_id)> transfer_address_of;
    // Asks the worker that was sent task `task` to stop it (`force`: end
    // the worker). Unset: sent tasks cannot be cancelled.
    // Asks the worker that holds the task to stop it: false when no worker
    // holds it now (it went back to its queue as its worker was lost).
    std::function<bool(const TaskEntry& task, bool force, bool recursive)>
        cancel_sent;
    // The result of `id` holds refs its worker lent (lent_objects.h): this
    // process borrows them for as long as it keeps the result. Optional.
    std::function<void(
        const std::string& id,
        const google::protobuf::RepeatedPtrField<proto::BorrowedRef>& refs)>
        borrowed;
    // Object `id` is no longer pending (its borrowers hear). Optional.
    std::function<void(const std::string& id)> settled;
  };

  // REQUIRES: `objects` and `window` outlive this.
  TaskLifecycle(OwnedObjects* objects, SubmitWindow* window,
                uint64_t inline_threshold, Hooks hooks);
  TaskLifecycle(const TaskLifecycle&) = delete;
  TaskLifecycle& operator=(const TaskLifecycle&) = delete;

  // Names this process as the owner of results, in every spec.
  void SetOwner(std::string owner) { owner_ = std::move(owner); }
  // Where task events are recorded; null (the default): nowhere.
  void SetEvents(TaskEventBuffer* events) { events_ = events; }

  // A new task or call (its result object pending in the table): queued
  // once its ref arguments are ready, or failed if one cannot be.
  void Submit(std::unique_ptr<TaskEntry> task);

  // The spec of task `task_id` for a worker on `node_id` (which will pull
  // its stored arguments: freed there too, and a source for later pulls).
  // False when the task is gone.
  bool FillSpec(const std::string& task_id, const std::string& node_id,
                const std::string& worker_id, proto::TaskSpec* spec);

  // A worker's answer for a task (an error: the push failed).
  void TaskReplied(const std::string& task_id, const std::string& node_id,
                   absl::StatusOr<proto::TaskResult> result);
  // An actor's answer for a call.
  void CallReplied(const std::string& task_id, const std::string& node_id,
                   proto::TaskResult result);
  // The worker running the task died: retried while retries are left.
  void WorkerDied(const std::string& task_id, const std::string& how);
  // The call could not run on its actor.
  void CallFailed(const std::string& task_id, ErrorKind kind,
                  const std::string& message);
  // Ends the task with `error` (a copy of the id: the entry is erased).
  void Fail(std::string id, absl::Status error);

  // Ray's cancel of the task whose result is `task_id`.
  enum class Cancelled {
    kNotPending,  // no such task waits or runs here: it ended (or never was)
    kNow,         // it had not reached a worker: it failed as cancelled
    kAsked,       // its worker was asked to stop it; it fails when it does
    kActorCall,   // an actor call already given to its actor
  };
  // With `recursive`, its worker also cancels the tasks it submitted.
  Cancelled Cancel(const std::string& task_id, bool force, bool recursive);
  // Cancel, as the API answers it: whether the task was pending; an error
  // for an actor call given to its actor, or an id of no object here.
  absl::StatusOr<bool> CancelTask(const std::string& task_id, bool force,
                                  bool recursive);
  // Cancels (recursively) every task here that the task of `parent_token`
  // (common/cancel_token.h) submitted while it ran in this process: it is
  // being cancelled recursively. Returns how many were pending. The token
  // is matched at cancel time, so submitting costs nothing more.
  int CancelChildren(int32_t parent_token, bool force);

  // Object `id`, which another process owns, is no longer pending: the
  // tasks that take it go on.
  void ObjectSettled(const std::string& id) { ObjectDone(id); }

  // Every copy of stored object `id` (as `failed` described it) is gone.
  // Starts running the task that made it again (OK), or says why it cannot
  // be rebuilt.
  absl::Status Reconstruct(const std::string& id,
                           const proto::StoredObject& failed);

  // The function a task runs ("?" when it is gone).
  std::string FunctionOf(const std::string& task_id) const;
  size_t size() const { return tasks_.size(); }

  // At shutdown: every task and kept lineage, to be destroyed outside the
  // loop (what they hold releases refs, which takes the object table's
  // lock).
  struct Taken {
    absl::flat_hash_map<std::string, std::unique_ptr<TaskEntry>> tasks;
    ObjectRecovery::Lineage lineage;
  };
  Taken TakeAll();

  // The last reference to stored object `id` is gone: its lineage too.
  void Forget(const std::string& id) { recovery_.Forget(id); }

 private:
  void Enqueue(TaskEntry& task, bool front = false);
  static absl::Status CancelledError(const TaskEntry& task, const char* when);
  void Record(TaskEntry& task, const TaskEventBuffer::Change& change);
  // The task ended: its place in the window goes to the next submitter
  // (once: a task run again to rebuild a lost object holds none).
  void LeaveWindow(TaskEntry& task);
  void Complete(std::string id, proto::TaskResult result);
  // Object `id` is no longer pending: the tasks waiting for it go on.
  void ObjectDone(const std::string& id);
  // A worker could not get argument `lost` of task `task_id` from any
  // node: rebuilds it and runs the task once it is back.
  absl::Status RebuildArgument(const std::string& task_id,
                               const std::string& lost);

  OwnedObjects* const objects_;
  SubmitWindow* const window_;
  const uint64_t inline_threshold_;
  const Hooks hooks_;
  std::string owner_;
  TaskEventBuffer* events_ = nullptr;
  DependencyResolver deps_;
  ObjectRecovery recovery_;
  absl::flat_hash_map<std::string, std::unique_ptr<TaskEntry>> tasks_;
};

}  // namespace shoal::internal

#endif  // SHOAL_API_TASK_LIFECYCLE_H_
