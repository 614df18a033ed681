// The processes one host's runner starts for its ranks of a gang: what each
// runs with (PlanRanks, pure), and the running processes themselves
// (RankProcesses): their output, read into the runner's next report and
// written to each rank's log, and their exits.
//
// Threading: a RankProcesses belongs to the runner's thread.
#ifndef SHOAL_LAUNCH_RANK_PROCESSES_H_
#define SHOAL_LAUNCH_RANK_PROCESSES_H_

#include <sys/types.h>

#include <cstddef>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "launch/framework_env.h"
#include "shoal/shoal.pb.h"

namespace shoal::launch {

class LineSplitter;

// How to start one rank's process.
struct RankProcessPlan {
  int rank = 0;
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  // on top of the runner's own
  std::vector<std::string> unset_env;
  std::string prefix;    // before each of its lines: "[rank 5 host 1 chip 1]"
  std::string log_path;  // its output, appended

  bool operator==(const RankProcessPlan& other) const = default;
};

// The processes of host `spec.host_index()` among the gang's `envs`, in rank
// order: the user's command with each rank's environment, Gloo pointed at
// `gloo_interface` (empty: left alone), never as a Shoal worker, logs under
// `log_dir`.
std::vector<RankProcessPlan> PlanRanks(
    const proto::LaunchHostSpec& spec,
    const std::vector<ProcessEnvironment>& envs,
    const std::string& gloo_interface, const std::string& log_dir);

class RankProcesses {
 public:
  RankProcesses();
  ~RankProcesses();  // closes the output pipes; processes are not waited for
  RankProcesses(const RankProcesses&) = delete;
  RankProcesses& operator=(const RankProcesses&) = delete;

  // Starts each planned process in its own process group (so that it is
  // stopped as a whole). One that cannot start ends at once with exit code
  // 127 in `result`; one whose pipe cannot be made is left out.
  void Start(const std::vector<RankProcessPlan>& plans,
             proto::LaunchHostResult* result);

  // Waits up to `timeout_ms` for output, reads what the ranks printed into
  // `report`, and reaps the processes that ended: their exits go to
  // `report` and `result`, marked stopped when `stopping`. Returns whether
  // one ended non-zero.
  bool Poll(int timeout_ms, bool stopping, proto::LaunchReport* report,
            proto::LaunchHostResult* result);

  // Sends `signal` to the process group of every rank still running.
  void Signal(int signal);

  size_t running() const { return running_; }

 private:
  struct Proc {
    pid_t pid = 0;
    int fd = -1;
    int rank = 0;
    std::unique_ptr<LineSplitter> lines;
    std::ofstream log;
    bool exited = false;
  };

  size_t Drain(Proc& p, proto::LaunchReport* report);
  void Reap(Proc& p, int status, bool stopping, proto::LaunchReport* report,
            proto::LaunchHostResult* result);

  std::vector<Proc> procs_;
  size_t running_ = 0;
};

}  // namespace shoal::launch

#endif  // SHOAL_LAUNCH_RANK_PROCESSES_H_
