#include "agent/tpu_lock.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/environment.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/process.h"

namespace shoal::agent {
namespace {

constexpr char kNodeIdVar[] = "SHOAL_NODE_ID=";
constexpr char kWorkerIdVar[] = "SHOAL_WORKER_ID=";

// The command line of `pid` with its arguments joined by spaces, for the
// error that names a holder; "?" once the process is gone.
std::string CommandOf(int64_t pid) {
  absl::StatusOr<std::string> cmdline =
      ReadFile(absl::StrCat("/proc/", pid, "/cmdline"));
  if (!cmdline.ok()) return "?";
  std::string cmd = *cmdline;
  std::replace(cmd.begin(), cmd.end(), '\0', ' ');
  return std::string(absl::StripTrailingAsciiWhitespace(cmd));
}

// What the holder's environment says about it.
struct Holder {
  bool of_this_node = false;  // SHOAL_NODE_ID is this node's
  std::string busy_worker;    // its SHOAL_WORKER_ID, if that worker is busy
};

// An environment that cannot be read (another user's process, or one that
// just exited) says nothing: such a holder counts as a stranger.
Holder Describe(int64_t pid, const std::string& node_id,
                const WorkerIsBusy& is_busy) {
  Holder holder;
  absl::StatusOr<std::string> vars =
      ReadFile(absl::StrCat("/proc/", pid, "/environ"));
  if (!vars.ok()) return holder;
  for (absl::string_view var : absl::StrSplit(*vars, '\0')) {
    if (absl::ConsumePrefix(&var, kNodeIdVar)) {
      if (var == node_id) holder.of_this_node = true;
    } else if (absl::ConsumePrefix(&var, kWorkerIdVar)) {
      if (is_busy(std::string(var))) holder.busy_worker = std::string(var);
    }
  }
  return holder;
}

// Kills a leftover and waits up to a second for it to exit, so that the new
// process does not start while the old one still has the chips.
void EndLeftover(int64_t pid, const std::string& lockfile) {
  SHOAL_LOG(WARNING) << "ending pid " << pid
                     << ", left from an earlier gang, which holds " << lockfile;
  kill(static_cast<pid_t>(pid), SIGKILL);
  for (int i = 0; i < 100 && ProcessAlive(pid); ++i) usleep(10000);
}

}  // namespace

std::string LibtpuLockfilePath() { return env::Get(env::Var::kLibtpuLockfile); }

absl::Status ClearTpuLock(const std::string& lockfile,
                          const std::string& node_id,
                          const WorkerIsBusy& is_busy) {
  if (!PathExists(lockfile)) return absl::OkStatus();
  for (int64_t pid : ProcessesHoldingFile(lockfile)) {
    Holder holder = Describe(pid, node_id, is_busy);
    if (holder.of_this_node && holder.busy_worker.empty()) {
      EndLeftover(pid, lockfile);
      continue;
    }
    if (!holder.busy_worker.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the TPU chips of node ", node_id, " are held by pid ", pid, " (",
          CommandOf(pid), "), a process of worker ", holder.busy_worker,
          ", which still runs a lease on this node: it has ", lockfile,
          " open. Retry once that lease has ended"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "the TPU chips of node ", node_id, " are held by pid ", pid, " (",
        CommandOf(pid), "), which Shoal did not start: it has ", lockfile,
        " open. Stop that process, then retry"));
  }
  // Checked again: the leftovers ended above must have let go of it.
  if (ProcessesHoldingFile(lockfile).empty()) {
    SHOAL_LOG(INFO) << "removing stale " << lockfile << " (no living holder)";
    unlink(lockfile.c_str());
  }
  return absl::OkStatus();
}

}  // namespace shoal::agent
