// How the nodes start the workers of a job whose program cannot be its own
// workers (a Python driver's): a command run as is on each node, instead of
// the driver's uploaded binary.
#ifndef SHOAL_API_WORKER_COMMAND_H_
#define SHOAL_API_WORKER_COMMAND_H_

#include <map>
#include <string>
#include <vector>

namespace shoal::proto {
class WorkerCommand;
}

namespace shoal::internal {

struct WorkerCommand {
  std::vector<std::string> argv;  // e.g. {sys.executable, "-m", "shoal.worker"}
  // Added to each worker's environment (e.g. PYTHONPATH); SHOAL_* variables
  // are the agent's and are not overridden.
  std::map<std::string, std::string> env;
  bool empty() const { return argv.empty(); }
};

// Writes `command` into its message (defined in api/task_submitter.cc).
void FillWorkerCommand(const WorkerCommand& command, proto::WorkerCommand* out);

}  // namespace shoal::internal

#endif  // SHOAL_API_WORKER_COMMAND_H_
