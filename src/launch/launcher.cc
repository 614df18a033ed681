#include "launch/launcher.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <iostream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "api/cluster_status.h"
#include "api/core_runtime.h"
#include "common/session.h"
#include "head_client/head_client.h"
#include "launch/cluster_gang.h"
#include "launch/gang_plan.h"
#include "launch/gang_reservation.h"
#include "launch/launch_supervisor.h"
#include "presentation/status_format.h"
#include "shoal/api.h"

namespace shoal::launch {
namespace {

std::atomic<bool> g_interrupted{false};

// Until the gang is reserved, Ctrl-C or SIGTERM ends the launch at once:
// nothing runs yet, and the head removes this job's placement group (a
// pending one included) when its connection closes.
void ExitWhileReserving(int) {
  static const char kMessage[] =
      "shoal launch: interrupted while reserving the gang; nothing was "
      "started\n";
  ssize_t ignored = write(2, kMessage, sizeof(kMessage) - 1);
  (void)ignored;
  _exit(130);
}

// From the gang's reservation on, Ctrl-C stops every process of the gang
// first.
void StopTheGang(int) { g_interrupted = true; }

void OnStopSignals(void (*handler)(int)) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// The options' own mistakes: the exit code (2) after saying what to
// change, or 0.
int CheckOptions(const LaunchOptions& options) {
  if (options.argv.empty()) {
    std::cerr << "shoal launch: give the command after --, e.g. "
                 "shoal launch --per-device -- python train.py\n";
    return 2;
  }
  if (options.max_restarts < 0) {
    std::cerr << "shoal launch: --max-restarts must be 0 or more (got "
              << options.max_restarts << ")\n";
    return 2;
  }
  if (options.nproc_per_node < 0) {
    std::cerr << "shoal launch: --nproc-per-node must be 1 or more (got "
              << options.nproc_per_node << ")\n";
    return 2;
  }
  const int chosen = !options.slice.empty() + (options.num_slices > 0) +
                     !options.subslice.empty() + (options.nodes > 0) +
                     options.local;
  if (chosen > 1) {
    std::cerr << "shoal launch: say one of --slice, --num-slices, "
                 "--subslice, --nodes and --local\n";
    return 2;
  }
  if (!options.slice_type.empty() && options.num_slices == 0 &&
      options.subslice.empty()) {
    std::cerr << "shoal launch: --slice-type goes with --num-slices N or "
                 "--subslice GRID\n";
    return 2;
  }
  if (options.subslice_index >= 0 && options.subslice.empty()) {
    std::cerr << "shoal launch: --subslice-index goes with --subslice GRID\n";
    return 2;
  }
  return 0;
}

// Joins the cluster by the rule every command follows (common/session.h):
// a launch never starts a cluster of its own. Returns the exit code of a
// failure, after saying why, or 0 with the cluster's token in *token.
int Connect(const LaunchOptions& options, std::string* token) {
  InitOptions init;
  init.address = options.address;
  init.token = options.token;
  absl::Status found =
      ResolveClusterAddress(DefaultTempDir(), &init.address, &init.token);
  if (!found.ok()) {
    std::cerr << "shoal launch: " << found.message() << "\n";
    return absl::IsInvalidArgument(found) ? 2 : 1;
  }
  try {
    Init(init);
  } catch (const Error& e) {
    std::cerr << "shoal launch: " << e.what() << "\n";
    return 1;
  }
  *token = init.token;
  return 0;
}

// Why the gang could not be reserved; for hosts that stayed busy, who holds
// them.
std::string ExplainReservation(const absl::Status& status) {
  std::string why(status.message());
  if (absl::IsDeadlineExceeded(status)) {
    auto cluster = internal::FetchClusterStatus();
    std::string holders =
        cluster.ok() ? internal::DescribeHolders(*cluster) : std::string();
    absl::StrAppend(&why, holders.empty() ? "" : "; held by: ", holders,
                    " (`shoal status --verbose` shows more)");
  }
  return why;
}

// ResolveGang and Reserve: the gang's hosts held, and its ranks checked
// before anything starts. Returns the exit code of a failure, after saying
// why (and releasing what was held), or 0.
int ReserveAndCheck(const LaunchOptions& options, ReservedGang* gang) {
  gang->choice = ChooseGang(options, Nodes());
  auto reserved = ReserveGang(gang->choice, options.reserve_timeout_s, {});
  if (!reserved.ok()) {
    std::cerr << "shoal launch: " << ExplainReservation(reserved.status())
              << "\n";
    return 1;
  }
  gang->reservation = std::move(*reserved);
  gang->hosts = HostsOfReservation(gang->reservation, gang->choice.nproc);
  auto shape = CheckGang(options, gang->hosts, gang->choice.slice_gang);
  if (!shape.ok()) {
    std::cerr << "shoal launch: " << shape.status().message() << "\n";
    ReleaseGang(gang->reservation.group);
    return 2;
  }
  gang->shape = std::move(*shape);
  return 0;
}

RestartPolicy PolicyOf(const LaunchOptions& options, const GangChoice& choice) {
  RestartPolicy policy;
  policy.max_restarts = options.max_restarts;
  policy.no_restart_on = options.no_restart_on;
  policy.can_place_again = !choice.slice_gang;  // a slice's hosts are fixed
  return policy;
}

}  // namespace

int RunLaunch(const LaunchOptions& options) {
  if (int bad = CheckOptions(options); bad != 0) return bad;
  ReservedGang reserved;
  if (int failed = Connect(options, &reserved.token); failed != 0) {
    return failed;
  }
  OnStopSignals(ExitWhileReserving);
  if (int failed = ReserveAndCheck(options, &reserved); failed != 0) {
    Shutdown();
    return failed;
  }
  OnStopSignals(StopTheGang);
  const RestartPolicy policy = PolicyOf(options, reserved.choice);
  const int expected_processes = reserved.shape.expected_processes;
  // StartRanks, Supervise: attempts of the whole gang.
  auto gang = ClusterGang::Create(options, std::move(reserved), &g_interrupted);
  if (!gang.ok()) {
    std::cerr << "shoal launch: " << gang.status().message() << "\n";
    Shutdown();
    return 1;
  }
  LaunchOutcome outcome =
      LaunchSupervisor(gang->get(), policy, expected_processes).Run();
  if (g_interrupted) {
    // Stopped by a signal (Ctrl-C, scancel): its head may be going too
    // (Slurm signals every process of a step at once). What is left to
    // tell the head waits 2 s for it, not the outage wait of a driver.
    internal::RequireRuntime()->head().set_outage_wait_ms(2000);
  }
  // Report: the summary line, the head's record; then the hosts go back.
  std::cout << outcome.summary << "\n";
  std::cout.flush();
  (*gang)->Finish(outcome);
  gang->reset();
  Shutdown();
  return outcome.exit_code;
}

}  // namespace shoal::launch
