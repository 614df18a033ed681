// The node's worker processes: which exist, which are idle and may be
// reused, starting them, reaping them when they exit, ending idle ones, and
// how each one that exited ended ("worker pid 42 on node n1 killed by
// signal 9 (Killed)"), for GET_WORKER_EXIT.
//
// A worker is started for one lease (kStarting until it registers), serves
// leases (kLeased), and waits for the next one between them (kIdle). An
// idle worker is reused only by a lease of the same job and binary that
// holds the same devices (a process sees the devices it was started with
// for its whole life).
//
// Processes are started, signalled and reaped through a ProcessLauncher, so
// that tests use a fake.
//
// Threading: lives on the agent's event loop; not thread-safe.
#ifndef SHOAL_AGENT_WORKER_POOL_H_
#define SHOAL_AGENT_WORKER_POOL_H_

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/process.h"

namespace shoal::agent {

// The operating system's side of worker processes.
class ProcessLauncher {
 public:
  struct Exit {
    pid_t pid = 0;
    int wait_status = 0;  // as waitpid(2) reports it
  };

  virtual ~ProcessLauncher() = default;
  // Starts argv with env (stdout and stderr to log_path); the child's pid.
  virtual absl::StatusOr<pid_t> Start(const SpawnOptions& options) = 0;
  // Sends `signal` to `pid`. NotFound when no such process exists.
  virtual absl::Status Signal(pid_t pid, int signal) = 0;
  // A child that has exited and is reaped now, without waiting; nullopt when
  // none has.
  virtual std::optional<Exit> ReapAny() = 0;
  // Reaps `pid` if it has exited (waiting for it when `wait`); true when it
  // is gone (reaped now or before).
  virtual bool Reap(pid_t pid, bool wait) = 0;
};

// The real one: fork + exec (Spawn), kill(2), waitpid(2).
std::unique_ptr<ProcessLauncher> SystemProcessLauncher();

struct WorkerPoolOptions {
  std::string node_id;  // for exit descriptions
  // Worker logs go to <log_dir>/worker-<id>.log.
  std::string log_dir;
  // Every worker's environment besides SHOAL_WORKER_ID and SHOAL_JOB_ID
  // (the agent's address, the node, the token, ...).
  std::map<std::string, std::string> env;
  int64_t idle_timeout_ms = 10000;
  // Exit descriptions kept for GET_WORKER_EXIT (the oldest are forgotten).
  size_t max_remembered_exits = 4096;
};

struct Worker {
  enum class State { kStarting, kIdle, kLeased };
  std::string id;
  std::string job_id;
  std::string binary_hash;
  std::string device_key;  // DeviceKey of the devices it was started with
  pid_t pid = 0;           // 0 until started (or registered)
  std::string address;     // host:port once registered
  State state = State::kStarting;
  std::string lease_id;  // the lease it serves (or starts for); "" when idle
  int64_t idle_since_us = 0;
  // It lends objects to other processes (WORKER_LENDING): kept while idle,
  // as their owner.
  bool lending = false;
  std::string log_path;
  // Set when the agent itself ends the worker (why), so that its exit is
  // expected rather than a failure to warn about.
  std::string stopped_because;
  // Asked to end itself (EndSoon): SIGKILLed past this time (0: not).
  int64_t kill_at_us = 0;
};

class WorkerPool {
 public:
  WorkerPool(WorkerPoolOptions options,
             std::unique_ptr<ProcessLauncher> launcher);

  // An idle worker of `job_id` and `binary_hash` started with devices
  // `device_key`, now leased to `lease_id`; null when there is none.
  const Worker* TakeIdle(const std::string& job_id,
                         const std::string& binary_hash,
                         const std::string& device_key,
                         const std::string& lease_id);

  // Records a new worker (kStarting, no process yet) for `lease_id`.
  const Worker& Add(const std::string& job_id, const std::string& binary_hash,
                    const std::string& device_key, const std::string& lease_id);

  // Starts the process of worker `id` from `binary`, with the pool's
  // environment, its own ids, and `device_env` (variables to set and to
  // remove, see AddDeviceEnvironment). NotFound for an unknown worker; the
  // launcher's error when the process cannot start.
  absl::Status Launch(const std::string& id, const std::string& binary,
                      const SpawnOptions& device_env);
  // The same for a worker that is a command (`program.argv`), with
  // `program.env` added to the pool's environment; the worker's own ids and
  // `device_env` still win over it.
  absl::Status Launch(const std::string& id, const SpawnOptions& program,
                      const SpawnOptions& device_env);

  // The worker announced itself (REGISTER_WORKER): it listens at `address`.
  // NotFound, naming the worker, when this pool did not start it.
  absl::Status Registered(const std::string& id, const std::string& address,
                          pid_t pid);

  // The worker serves its lease now (it registered).
  void MarkLeased(const std::string& id);
  // The worker's lease ended; it waits for the next one from `now_us`.
  void MarkIdle(const std::string& id, int64_t now_us);

  // The worker lends objects now (or no more): an idle one that lends is
  // not ended.
  void SetLending(const std::string& id, bool lending);

  // SIGKILLs the worker (when it has a process), remembering `why` so that
  // its exit is logged as expected. Reap() reports it later.
  void Kill(const std::string& id, const std::string& why);
  // The worker was asked to end itself (for `why`): its exit is expected,
  // and EndIdle SIGKILLs it if it still runs at `deadline_us`.
  void EndSoon(const std::string& id, const std::string& why,
               int64_t deadline_us);

  // Forgets a worker without waiting for its process (it never started),
  // remembering `what` as its exit.
  void Remove(const std::string& id, const std::string& what);

  struct Exited {
    Worker worker;            // as it was
    std::string description;  // "worker pid 42 on node n1 exited with code 1"
  };
  // Reaps every worker process that has exited: each is logged (a warning
  // unless the agent ended it or it was idle), remembered and forgotten.
  // Other children of the agent that exited (a job's entrypoint) go to
  // `others` when it is given.
  std::vector<Exited> Reap(
      std::vector<ProcessLauncher::Exit>* others = nullptr);

  // SIGTERMs workers idle for longer than the idle timeout at `now_us`
  // (again each period while one lingers; Reap() forgets them), and
  // SIGKILLs those past their EndSoon deadline.
  void EndIdle(int64_t now_us);

  // How worker `id` ended, if it did and is still remembered.
  std::optional<std::string> ExitOf(const std::string& id) const;

  // Ends every worker: SIGTERM, up to a second's grace, then SIGKILL.
  // Blocks; forgets them all.
  void StopAll();

  const Worker* Find(const std::string& id) const;
  const std::map<std::string, Worker>& workers() const { return workers_; }
  size_t size() const { return workers_.size(); }

 private:
  void RememberExit(const std::string& id, const std::string& what);

  const WorkerPoolOptions options_;
  const std::unique_ptr<ProcessLauncher> launcher_;
  std::map<std::string, Worker> workers_;
  std::map<std::string, std::string> exits_;
  std::deque<std::string> exit_order_;
};

}  // namespace shoal::agent

#endif  // SHOAL_AGENT_WORKER_POOL_H_
