// The entrypoints of submitted jobs that run on this node (START_JOB from
// the head; docs/design/jobs.md). Each runs as `/bin/sh -c ENTRYPOINT` in a
// process group of its own, in a folder of its own (<jobs_dir>/<id>), with
// SHOAL_ADDRESS and SHOAL_TOKEN set so that the programs and `shoal launch`
// gangs it starts join this cluster. Its stdout and stderr go to the head as
// they come, and so does its exit, once the agent reaps it.
//
// Threading: lives on the agent's event loop; not thread-safe.
#ifndef SHOAL_AGENT_JOB_RUNNER_H_
#define SHOAL_AGENT_JOB_RUNNER_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rpc/event_loop.h"
#include "scheduling/resource_set.h"
#include "shoal/shoal.pb.h"

namespace shoal::agent {

struct JobRunnerOptions {
  std::string jobs_dir;  // each job's folder is made in here
  std::string token;     // the cluster's, for the entrypoint's programs
  // Sends a report to the head (in order).
  std::function<void(const proto::JobEvent&)> report;
  // Finds the local copy of a blob of the head's (a job's packed working
  // dir), fetching it first if need be.
  std::function<void(const std::string& hash,
                     std::function<void(absl::StatusOr<std::string> path)>)>
      fetch_blob;
  // The folder that holds Shoal's Python package (FindShoalPythonPackage):
  // added to the entrypoint's PYTHONPATH, so that its programs
  // `import shoal` as Ray's job drivers import ray. "": none.
  std::string python_path;
  int64_t stop_grace_ms = 3000;  // SIGTERM, then SIGKILL after this long
  // Holds the entrypoint's resources on this node while it runs (so that
  // no task takes them), or says why they are not free now
  // (ResourceExhausted); `release` gives them back when it ends.
  std::function<absl::Status(const ResourceSet&)> reserve;
  std::function<void(const ResourceSet&)> release;
};

// The folder holding the `shoal` Python package that belongs with the
// `shoal` binary at `executable`: the build's python/ beside its bin/, or
// the install's lib/python3.X/{dist,site}-packages under its prefix; ""
// when there is none (the frontend was not built).
std::string FindShoalPythonPackage(const std::string& executable);

// `path` with `folder` added at its end (a user's own PYTHONPATH comes
// first), unless it is there already.
std::string AppendToSearchPath(const std::string& path,
                               const std::string& folder);

class JobRunner {
 public:
  JobRunner(rpc::EventLoop* loop, JobRunnerOptions options);
  // Kills every job's process group.
  ~JobRunner();
  JobRunner(const JobRunner&) = delete;
  JobRunner& operator=(const JobRunner&) = delete;

  // Starts the entrypoint (once its working dir is here); `done` hears
  // that it runs, or why it cannot.
  void Start(const proto::JobSpec& spec,
             std::function<void(absl::Status)> done);
  // SIGTERM to the job's whole process group, SIGKILL stop_grace_ms later
  // if it still runs. NotFound when no such job runs here.
  absl::Status Signal(const std::string& id);
  // The agent reaped `pid`: true when it was a job's entrypoint (its exit
  // is reported).
  bool Reaped(pid_t pid, int wait_status);
  size_t running() const { return jobs_.size(); }

 private:
  struct Job {
    std::string id;
    ResourceSet reserved;      // the entrypoint's resources, held while it runs
    int64_t output_bytes = 0;  // of its output reported so far
    pid_t pid = 0;
    int output_fd = -1;  // read end of its stdout and stderr; -1 once closed
  };

  // Starts the entrypoint with its packed working dir at `archive` ("":
  // none).
  absl::Status Spawn(const proto::JobSpec& spec, const std::string& archive,
                     const ResourceSet& reserved);
  void Release(const ResourceSet& reserved);
  // Reads what the job wrote so far and reports it.
  void ReadOutput(Job& job);
  void CloseOutput(Job& job);

  rpc::EventLoop* const loop_;
  const JobRunnerOptions options_;
  std::map<std::string, Job> jobs_;  // running, by submission id
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace shoal::agent

#endif  // SHOAL_AGENT_JOB_RUNNER_H_
