// The event loop's side of the driver runtime: the cluster's nodes, the
// submitters that lease workers and push tasks and actor calls to them,
// what becomes of each task (task_lifecycle.h) and the task events sent to
// the head, wired together. The runtime (core_runtime.cc) hands it tasks
// from user threads and drives its start and its shutdown.
//
// Threading: constructed, used and destroyed on the runtime's event loop
// only; has_cpp_program() from any thread.
#ifndef SHOAL_API_TASK_PATH_H_
#define SHOAL_API_TASK_PATH_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "api/actor_submitter.h"
#include "api/program_copies.h"
#include "api/task_event_reporter.h"
#include "api/task_lifecycle.h"
#include "api/task_submitter.h"

namespace shoal::rpc {
class EventLoop;
}

namespace shoal::internal {

class NodeView;
class OwnedObjects;
class SubmitWindow;

class TaskPath : public TaskSubmitter::Delegate,
                 public ActorSubmitter::Delegate {
 public:
  // The head as the task path calls it (asynchronously, on the loop).
  class Head {
   public:
    virtual ~Head() = default;
    virtual void ClusterStatus(
        std::function<void(absl::StatusOr<proto::ClusterStatus>)> done) = 0;
    virtual void GetActor(
        const proto::GetActorRequest& request,
        std::function<void(absl::StatusOr<proto::ActorInfo>)> done) = 0;
    virtual void ReportTaskEvents(
        std::string batch,
        std::function<void(TaskEventReporter::Delivery, absl::Status)>
            done) = 0;
  };

  struct Options {
    std::string token;
    // How agents and actors see this process, and what names it as the
    // owner of results.
    std::string peer_name;
    std::string owner;
    uint64_t inline_threshold = 0;
    // The job the task events are filed under; 0 interval: none are sent.
    std::string events_job_id;
    int64_t task_events_interval_ms = 0;
    // The submitter of this program's workers, and of
    // RuntimeOptions::cpp_program's when there is one.
    TaskSubmitter::Options submit;
    std::optional<TaskSubmitter::Options> cpp_submit;
    // In a worker: its id and its agent, told of its threads' waits.
    std::string worker_id;
    std::string worker_agent_address;
    // Refs lent inside results, and objects no longer pending
    // (TaskLifecycle::Hooks).
    decltype(TaskLifecycle::Hooks::borrowed) borrowed;
    decltype(TaskLifecycle::Hooks::settled) settled;
  };

  // REQUIRES: `head`, `objects` and `window` outlive this.
  TaskPath(rpc::EventLoop* loop, Head* head, OwnedObjects* objects,
           SubmitWindow* window, Options options);
  ~TaskPath() override;
  TaskPath(const TaskPath&) = delete;
  TaskPath& operator=(const TaskPath&) = delete;

  // Learns the cluster's nodes and starts the maintenance timer (lease
  // ticks, task events). Returns the address of this host's agent ("" if
  // none).
  std::string Start(const proto::ClusterStatus& status);
  bool has_cpp_program() const { return cpp_submitter_ != nullptr; }

  // A new task or actor call (its result pending in the object table).
  void Submit(std::unique_ptr<TaskEntry> task);
  // This process killed the actor without a restart.
  void ActorKilled(const std::string& actor_id) { actors_.Killed(actor_id); }
  // Cancels the task whose result is `task_id`: whether it was pending.
  absl::StatusOr<bool> Cancel(const std::string& task_id, bool force,
                              bool recursive) {
    return lifecycle_.CancelTask(task_id, force, recursive);
  }
  int CancelChildren(int32_t parent_token, bool force) {
    return lifecycle_.CancelChildren(parent_token, force);
  }
  // Borrowed object `id` is no longer pending.
  void ObjectSettled(const std::string& id) { lifecycle_.ObjectSettled(id); }
  // Every copy of stored object `id` is gone: rebuilds it, or says why not.
  absl::Status Reconstruct(const std::string& id,
                           const proto::StoredObject& failed) {
    return lifecycle_.Reconstruct(id, failed);
  }
  // The last reference to stored object `id` is gone: it is freed on
  // `nodes` (those holding a copy), and its lineage dropped.
  void ForgetStored(const std::string& id, const std::set<std::string>& nodes);
  // The head's copies of the programs (or why there are none), for the
  // submitters' lease requests.
  void SetProgramCopies(const absl::StatusOr<ProgramCopies::Hashes>& copies);
  // In a worker: the shallowest depth its threads wait at (-1: none waits).
  void TellBlocked(int shallowest);
  // In a worker: it lends objects now, or no more (its agent keeps it).
  void TellLending(bool lending);

  // Shutdown, first: returns every lease, frees `stored` (objects with the
  // nodes holding copies) and sends the last task events; `done` once
  // every agent and the head answered (or gave up).
  void Finish(
      const std::vector<std::pair<std::string, std::set<std::string>>>& stored,
      std::function<void()> done);
  // Shutdown, then: closes every connection and forgets queued work;
  // returns the tasks, to be destroyed off the loop.
  TaskLifecycle::Taken Stop();

  // ---- TaskSubmitter::Delegate ----
  bool BuildSpec(const std::string& task_id, const std::string& node_id,
                 const std::string& worker_id, proto::TaskSpec* spec) override;
  void TaskReplied(const std::string& task_id, const std::string& node_id,
                   absl::StatusOr<proto::TaskResult> result) override;
  void WorkerDied(const std::string& task_id, const std::string& how) override;
  void TaskFailed(const std::string& task_id, absl::Status error) override;
  void FetchNodes(
      std::function<void(absl::StatusOr<proto::ClusterStatus>)> done) override;

  // ---- ActorSubmitter::Delegate ----
  bool BuildCall(const std::string& task_id, const std::string& node_id,
                 proto::TaskSpec* spec) override;
  void CallReplied(const std::string& task_id, const std::string& node_id,
                   proto::TaskResult result) override;
  void CallFailed(const std::string& task_id, ActorSubmitter::Failure failure,
                  const std::string& message) override;
  void GetActor(
      const proto::GetActorRequest& request,
      std::function<void(absl::StatusOr<proto::ActorInfo>)> done) override;
  std::unique_ptr<rpc::Channel> ConnectTo(const std::string& address) override;

 private:
  TaskLifecycle::Hooks LifecycleHooks();
  void ScheduleMaintenance();
  // Asks every node in `nodes` holding a copy of object `id` to free it;
  // `done` (if set) after each answer. Returns how many were asked.
  int DeleteEverywhere(const std::string& id,
                       const std::set<std::string>& nodes,
                       const std::function<void()>& done, int64_t timeout_ms);
  // The submitter of this program's workers, and the C++ program's.
  void ForEachSubmitter(const std::function<void(TaskSubmitter&)>& fn);

  rpc::EventLoop* const loop_;
  Head* const head_;
  const Options options_;
  std::unique_ptr<NodeView> nodes_;
  TaskLifecycle lifecycle_;
  ActorSubmitter actors_;
  std::unique_ptr<TaskSubmitter> submitter_;
  std::unique_ptr<TaskSubmitter> cpp_submitter_;
  TaskEventReporter events_;
  // Cleared when the loop is stopping: the maintenance timer stops.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace shoal::internal

#endif  // SHOAL_API_TASK_PATH_H_
