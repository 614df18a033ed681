// The driver side of the task path: submits tasks, leases workers, pushes
// tasks straight to them, owns the objects it creates.
//
// Threading: the public methods are thread-safe. Scheduling state lives on
// the runtime's event loop; the object table is guarded by its own mutex so
// that Get() never waits for the loop.
#ifndef SHOAL_API_CORE_RUNTIME_H_
#define SHOAL_API_CORE_RUNTIME_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "api/worker_command.h"
#include "shoal/api.h"
#include "shoal/internal/actor_invoke.h"

namespace shoal::proto {
class ClusterStatus;
}
namespace shoal::rpc {
class HeadClient;
}

namespace shoal::internal {

struct RuntimeOptions {
  std::string head_address;
  std::string token;
  // How long a lease with no work is kept for further tasks of its shape.
  int64_t lease_idle_ms = 500;
  // In a worker: its id and its node agent, told when a thread blocks in
  // Get or Wait (the agent lends the worker's CPU to others meanwhile).
  std::string worker_id;
  std::string worker_agent_address;
  // In a worker: the job its workers belong to (the driver's), so that
  // nested tasks reuse the job's idle workers. This runtime still registers
  // a job of its own, which owns what it makes (groups, actors).
  std::string lease_job_id;
  // False for a driver whose program cannot be its workers (the Python
  // frontend): nothing is uploaded, and submitting a C++ task or actor fails
  // saying so.
  bool workers_run_this_program = true;
  // With workers_run_this_program false: the command the nodes start as
  // this job's workers (`python -m shoal.worker`), which makes task and
  // actor submission work again, for functions that command knows.
  WorkerCommand worker_command;
  // A program built with Shoal whose registered C++ functions this driver
  // of another language calls (TaskOptions::in_cpp_program); uploaded, and
  // run as those tasks' workers. Empty: none.
  std::string cpp_program;
  // The version a driver is of, checked against the cluster's before it
  // registers (common/version.h); empty: this library's. Workers check none
  // (their node agent did when it joined).
  std::string version;
};

// Errors come back as Status (see api/task_error.h: the payload says which
// shoal exception it stands for); the public entry points throw them.
class CoreRuntime {
 public:
  static absl::StatusOr<std::unique_ptr<CoreRuntime>> Connect(
      const RuntimeOptions& options);
  virtual ~CoreRuntime() = default;

  virtual absl::StatusOr<std::shared_ptr<RefHandle>> Submit(
      const std::string& function_name, std::vector<TaskArg> args,
      const TaskOptions& options) = 0;
  // Registers an actor with the head (its ref arguments resolved first);
  // returns its id. Fails on a name in use or bad options.
  virtual absl::StatusOr<std::string> CreateActor(
      const std::string& factory, const std::string& class_name,
      std::vector<TaskArg> args, const ActorOptions& options) = 0;
  // A call of `method` of the actor; its result is owned here.
  virtual absl::StatusOr<std::shared_ptr<RefHandle>> SubmitActorTask(
      const std::string& actor_id, const std::string& method,
      std::vector<TaskArg> args) = 0;
  virtual absl::StatusOr<std::shared_ptr<RefHandle>> Put(
      ObjectValue value, std::vector<std::shared_ptr<RefHandle>> contained) = 0;
  // Raw bytes made of pieces (see shoal::internal::PutPieces).
  virtual absl::StatusOr<std::shared_ptr<RefHandle>> PutPieces(
      const std::vector<BufferPiece>& pieces, size_t size) = 0;
  // The live handle of an object this process references.
  virtual absl::StatusOr<std::shared_ptr<RefHandle>> HandleFor(
      const std::string& id) = 0;
  // `ref`'s object goes inside a task's result without being waited for:
  // its owner (this process, or the one it borrowed it from) keeps it for
  // the borrower that reads the result. Returns the owner's address, which
  // the result carries with the id (lent_objects.h).
  virtual absl::StatusOr<std::string> Lend(
      const std::shared_ptr<RefHandle>& ref) = 0;
  // A handle of object `id` that the process at `owner_address` lent: read
  // through that owner (borrowed_objects.h), or this process's own handle.
  virtual absl::StatusOr<std::shared_ptr<RefHandle>> Borrow(
      const std::string& id, const std::string& owner_address) = 0;
  virtual absl::StatusOr<ObjectValue> Get(const RefHandle& ref,
                                          int64_t timeout_ms) = 0;
  virtual std::vector<size_t> Wait(const std::vector<const RefHandle*>& refs,
                                   size_t num_ready, int64_t timeout_ms) = 0;
  virtual void Release(const std::string& object_id) = 0;
  virtual absl::StatusOr<proto::ClusterStatus> ClusterStatus() = 0;
  // The head accepted this process's kill of the actor, without a restart:
  // the calls it makes to it from then on (and those still queued) fail at
  // once, as the actor's worker may still answer until its agent ends it.
  virtual void ActorKilled(const std::string& actor_id) = 0;
  // A thread of a worker begins (true) or ends (false) a wait in Get or
  // Wait: while one waits, its node may lend the worker's CPU to deeper
  // tasks (blocked_waits.h). Nested calls count once.
  virtual void SetBlocked(bool blocked) = 0;
  // Cancels the task whose result is `object_id` (CancelTask).
  virtual absl::StatusOr<bool> Cancel(const std::string& object_id, bool force,
                                      bool recursive) = 0;
  // Cancels, recursively, the tasks that the task of `parent_token`
  // (common/cancel_token.h) submitted here (its own cancel was recursive),
  // returning once the requests to their workers are sent. Returns how
  // many were pending.
  virtual int CancelChildren(int32_t parent_token, bool force) = 0;
  // The job whose workers run what this process submits: its own, or in a
  // worker, its driver's.
  virtual std::string JobId() const = 0;
  // The head's client, for the blocking calls of user threads. Calls made
  // once Shutdown() has begun fail with Cancelled.
  virtual rpc::HeadClient& head() = 0;
  // Returns leases and disconnects.
  virtual void Shutdown() = 0;
};

// A type name as C++ spells it ("ns::Counter"), from typeid(T).name().
std::string Demangle(const std::string& name);

// The process's runtime; in a worker, joins the cluster on first use. Throws
// shoal::Error before shoal::Init().
std::shared_ptr<CoreRuntime> RequireRuntime();

// CancelChildren on this process's runtime; 0 when it has none (the task
// submitted nothing).
int CancelChildrenHere(int32_t parent_token, bool force);

}  // namespace shoal::internal

#endif  // SHOAL_API_CORE_RUNTIME_H_
