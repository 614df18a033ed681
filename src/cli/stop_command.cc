#include "cli/stop_command.h"

#include <signal.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <ostream>

#include "cli/context.h"
#include "cli/host.h"
#include "cli/session_files.h"
#include "common/files.h"
#include "common/session.h"

namespace shoal::cli::stop {
namespace {

// How long a process gets to end its workers after SIGTERM before SIGKILL,
// and before the command gives up waiting for it, in polls of kPollMs.
constexpr int kPollMs = 10;
constexpr int kPollsBeforeKill = 500;
constexpr int kMostPolls = 1000;

}  // namespace

CLI::App* Register(CLI::App& parent, Flags& flags) {
  CLI::App* cmd =
      parent.add_subcommand("stop", "Stop what `shoal start` started here");
  cmd->add_option("--temp-dir", flags.temp_dir, "Temp dir given to start");
  cmd->add_flag("--force", flags.force, "Kill at once (SIGKILL)");
  return cmd;
}

absl::StatusOr<int> Run(const Flags& flags, Context& ctx) {
  const std::string temp_dir =
      flags.temp_dir.empty() ? DefaultTempDir() : flags.temp_dir;
  Host& host = *ctx.host;
  int stopped = 0;
  for (const std::string& dir : ListSessionDirs(temp_dir)) {
    for (const char* what : {"agent", "head"}) {
      int64_t pid = host.LivePid(dir, what);
      if (pid == 0) continue;
      host.Signal(pid, flags.force ? SIGKILL : SIGTERM);
      // Wait for it to go (it ends its workers first).
      for (int i = 0; i < kMostPolls && host.Alive(pid); ++i) {
        if (i == kPollsBeforeKill) host.Signal(pid, SIGKILL);
        host.SleepMs(kPollMs);
      }
      *ctx.out << (flags.force ? "Killed " : "Stopped ")
               << (std::string(what) == "agent" ? "node agent" : "head")
               << " (pid " << pid << ", session " << dir << ")\n";
      ++stopped;
    }
    // Stopped on purpose: the next `shoal start --head` starts a new
    // cluster instead of taking this one up.
    if (std::filesystem::exists(dir + "/head.db") ||
        std::filesystem::exists(dir + "/" + kStorageFile)) {
      WriteFile(dir + "/" + kStoppedMarker, "").IgnoreError();
    }
  }
  // The object store arenas of agents on this host that were killed.
  host.RemoveStaleArenas();
  if (stopped == 0) {
    *ctx.out << "No Shoal processes are running from " << temp_dir
             << "; nothing to stop.\n";
  }
  return 0;
}

}  // namespace shoal::cli::stop
