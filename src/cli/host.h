// What `shoal start` and `shoal stop` do to this host's processes: the seam
// between those commands and the operating system, so that their choices
// (what to start with which command line, what to stop) can be checked
// without starting or signalling anything.
#ifndef SHOAL_CLI_HOST_H_
#define SHOAL_CLI_HOST_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace shoal::cli {

// A head or node agent to run in the background (`shoal start`).
struct DaemonSpec {
  std::vector<std::string> argv;  // argv[0]: this executable
  std::string session_dir;
  std::string token;       // given to it in SHOAL_TOKEN
  std::string log_name;    // logs/<log_name>.log in the session folder
  std::string ready_file;  // it is up once it has written this file
  // --block: it dies with this process and stays in its session.
  bool block = false;
};

// Not thread-safe; a command uses it from its one thread.
class Host {
 public:
  virtual ~Host() = default;

  // Starts `spec` and waits until it writes its ready file; on failure it
  // is killed, and the error quotes its log.
  virtual absl::StatusOr<pid_t> StartDaemon(const DaemonSpec& spec) = 0;
  // The pid in session_dir/<name>.pid when that process is alive, else 0.
  virtual int64_t LivePid(const std::string& session_dir,
                          const std::string& name) = 0;
  virtual bool Alive(int64_t pid) = 0;
  virtual void Signal(int64_t pid, int signal) = 0;
  // SIGTERM, then SIGKILL after grace_ms.
  virtual void Terminate(int64_t pid, int grace_ms) = 0;
  virtual void SleepMs(int64_t ms) = 0;
  // Frees the shared-memory object stores of this host's agents that were
  // killed.
  virtual void RemoveStaleArenas() = 0;

  // --block: from now on SIGINT and SIGTERM wait for AwaitStop (call before
  // starting any process or thread).
  virtual void BlockStopSignals() = 0;
  // Waits for SIGINT or SIGTERM, or (when `child` is not 0) for that child
  // to end: nullopt after a signal, else the child's wait status.
  virtual std::optional<int> AwaitStop(pid_t child) = 0;
};

// The host this process runs on.
Host& SystemHost();

}  // namespace shoal::cli

#endif  // SHOAL_CLI_HOST_H_
