#include "agent/process_workers.h"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/tpu_lock.h"
#include "common/cancel_token.h"
#include "common/logging.h"
#include "common/process.h"

namespace shoal::agent {

ProcessWorkers::ProcessWorkers(ProcessWorkersOptions options,
                               std::unique_ptr<ProcessLauncher> launcher,
                               BinaryCache* binaries)
    : options_(std::move(options)),
      pool_(options_.pool, std::move(launcher)),
      binaries_(binaries) {}

absl::Status ProcessWorkers::ClaimDevices(const DeviceIds& devices) {
  if (!devices.count("TPU")) return absl::OkStatus();
  // Nothing may still hold the chips: see agent/tpu_lock.h.
  return ClearTpuLock(options_.libtpu_lockfile, options_.pool.node_id,
                      [this](const std::string& id) {
                        const Worker* w = pool_.Find(id);
                        return w != nullptr && w->state != Worker::State::kIdle;
                      });
}

// An idle worker of the same job and binary that sees the same devices.
std::optional<WorkerAddress> ProcessWorkers::Reuse(
    const Lease& lease, const proto::RequestLeaseRequest& request) {
  const Worker* w = pool_.TakeIdle(request.job_id(), request.binary_hash(),
                                   DeviceKey(lease.devices), lease.id);
  if (w == nullptr) return std::nullopt;
  return WorkerAddress{w->id, w->address, w->pid};
}

std::string ProcessWorkers::Add(const Lease& lease,
                                const proto::RequestLeaseRequest& request) {
  return pool_
      .Add(request.job_id(), request.binary_hash(), DeviceKey(lease.devices),
           lease.id)
      .id;
}

void ProcessWorkers::Start(const std::string& worker_id,
                           const proto::RequestLeaseRequest& r) {
  if (r.worker_command().argv_size() > 0) {
    // The job's workers are a command on this node (a Python driver's).
    const proto::WorkerCommand& command = r.worker_command();
    return Launch(worker_id, {command.argv().begin(), command.argv().end()},
                  {command.env().begin(), command.env().end()});
  }
  binaries_->Resolve(r.binary_path(), r.binary_hash(), r.blob_hash(),
                     [this, worker_id,
                      blob = r.blob_hash()](absl::StatusOr<std::string> path) {
                       if (!path.ok()) {
                         // NotFound: neither this host nor the head has the
                         // program; the requester can send the head a copy.
                         return FailStart(
                             worker_id, path.status(),
                             /*needs_program=*/absl::IsNotFound(path.status()));
                       }
                       Launch(worker_id, {*path}, {}, blob);
                     });
}

// Starts worker `worker_id` as `argv` with `job_env` added to its
// environment. `blob_hash` names the head's copy of its program, for the
// leases of the tasks it submits (SHOAL_BLOB_HASH).
void ProcessWorkers::Launch(const std::string& worker_id,
                            std::vector<std::string> argv,
                            std::map<std::string, std::string> job_env,
                            const std::string& blob_hash) {
  const Worker* w = pool_.Find(worker_id);
  if (w == nullptr) return;
  const Lease* lease = leases_->leases().Find(w->lease_id);
  if (lease == nullptr) {
    // Its lease went while the binary was being found (the requester left
    // or returned it): start nothing for nobody.
    SHOAL_LOG(INFO) << "not starting worker " << worker_id << ": its lease "
                    << w->lease_id << " was released";
    return FailStart(worker_id, absl::CancelledError("the lease was released"));
  }
  SpawnOptions device_env;
  absl::Status st =
      AddDeviceEnvironment(options_.accelerators, lease->devices, &device_env);
  // Set by the agent, like the device variables: the job cannot change it.
  if (!blob_hash.empty()) device_env.env["SHOAL_BLOB_HASH"] = blob_hash;
  if (st.ok()) {
    SpawnOptions program;
    program.argv = std::move(argv);
    program.env = std::move(job_env);
    st = pool_.Launch(worker_id, program, device_env);
  }
  if (!st.ok()) FailStart(worker_id, st);
}

// The worker and its lease are dropped; its requester hears why.
void ProcessWorkers::FailStart(const std::string& worker_id,
                               const absl::Status& why, bool needs_program) {
  std::string lease_id;
  if (const Worker* w = pool_.Find(worker_id)) {
    lease_id = w->lease_id;
    pool_.Remove(worker_id, std::string(why.message()));
  }
  leases_->StartFailed(worker_id, lease_id, why, needs_program);
}

absl::Status ProcessWorkers::Registered(const std::string& id, int port,
                                        pid_t pid) {
  return pool_.Registered(id, absl::StrCat(options_.node_ip, ":", port), pid);
}

void ProcessWorkers::Serve(const std::string& id) {
  const Worker* w = pool_.Find(id);
  if (w == nullptr) return;
  switch (leases_->WorkerStarted({w->id, w->address, w->pid})) {
    case LeaseService::Started::kGranted:
      pool_.MarkLeased(id);
      break;
    case LeaseService::Started::kLeaseGone:
      pool_.MarkIdle(id, options_.now_us());
      break;
    case LeaseService::Started::kNotAwaited:
      break;
  }
}

void ProcessWorkers::LeaseEnded(const std::string& worker_id, bool kill,
                                const std::string& why) {
  const Worker* w = pool_.Find(worker_id);
  if (w == nullptr) return;
  if (kill && w->pid > 0) {
    pool_.Kill(worker_id, why);
  } else if (w->state == Worker::State::kLeased) {
    pool_.MarkIdle(worker_id, options_.now_us());
  }
}

std::string ProcessWorkers::LeaseOf(const std::string& worker_id) const {
  const Worker* w = pool_.Find(worker_id);
  return w == nullptr ? std::string() : w->lease_id;
}

absl::Status ProcessWorkers::CancelTask(const std::string& worker_id,
                                        int32_t token, bool force,
                                        bool recursive) {
  const Worker* w = pool_.Find(worker_id);
  if (w == nullptr || w->pid <= 0) {
    return absl::NotFoundError(
        absl::StrCat("worker ", worker_id, " is not running"));
  }
  constexpr char kForced[] = "its task was cancelled with force";
  if (force && !recursive) {
    pool_.Kill(worker_id, kForced);
    return absl::OkStatus();
  }
  if (force) {
    // It cancels what the task submitted, then ends itself; killed if it
    // has not within the grace.
    constexpr int64_t kGraceUs = 2'000'000;
    pool_.EndSoon(worker_id, kForced, options_.now_us() + kGraceUs);
  }
  const CancelSignal how{
      .token = token, .recursive = recursive, .then_exit = force};
  // To the worker's main thread (its tid is its pid), which waits for this
  // signal (worker/worker_main.cc); a thread that a library started before
  // the worker blocked it would take its default action, the end.
  siginfo_t info{};
  info.si_signo = SIGUSR1;
  info.si_code = SI_QUEUE;
  info.si_pid = getpid();
  info.si_uid = getuid();
  info.si_value.sival_int = how.Encode();
  if (syscall(SYS_rt_tgsigqueueinfo, w->pid, w->pid, SIGUSR1, &info) != 0) {
    if (force) {
      pool_.Kill(worker_id, kForced);
      return absl::OkStatus();
    }
    return absl::UnavailableError(absl::StrCat(
        "cannot signal worker ", worker_id, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

bool ProcessWorkers::Knows(const std::string& worker_id) {
  return pool_.Find(worker_id) != nullptr;
}

std::optional<std::string> ProcessWorkers::ExitOf(
    const std::string& worker_id) {
  Reap();
  return pool_.ExitOf(worker_id);
}

void ProcessWorkers::Describe(const std::string& worker_id,
                              proto::LeaseInfo* info) const {
  if (const Worker* w = pool_.Find(worker_id)) {
    info->set_worker_pid(w->pid);
    info->set_starting(w->state == Worker::State::kStarting);
  }
}

void ProcessWorkers::Reap() {
  std::vector<ProcessLauncher::Exit> others;
  std::vector<WorkerPool::Exited> exited = pool_.Reap(&others);
  for (const auto& other : others) {
    if (options_.other_exited)
      options_.other_exited(other.pid, other.wait_status);
  }
  for (const WorkerPool::Exited& e : exited) {
    EndLeftovers(e.worker.id);
    leases_->WorkerExited(e.worker.id, e.worker.lease_id, e.description);
  }
}

void ProcessWorkers::EndIdle() { pool_.EndIdle(options_.now_us()); }

void ProcessWorkers::StopAll() {
  std::vector<std::string> ids;
  for (const auto& [id, w] : pool_.workers()) ids.push_back(id);
  pool_.StopAll();
  for (const std::string& id : ids) EndLeftovers(id);
}

// Processes a worker started (a launch's ranks and whatever they started in
// turn) carry its SHOAL_WORKER_ID: none outlives the worker.
void ProcessWorkers::EndLeftovers(const std::string& worker_id) {
  if (!options_.end_leftovers) return;
  for (int64_t pid : ProcessesWithEnvironment("SHOAL_WORKER_ID", worker_id)) {
    if (pid == getpid()) continue;
    SHOAL_LOG(INFO) << "ending pid " << pid << ", left behind by worker "
                    << worker_id;
    kill(static_cast<pid_t>(pid), SIGKILL);
  }
}

}  // namespace shoal::agent
