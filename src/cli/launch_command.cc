#include "cli/launch_command.h"

#include <CLI/CLI.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/connection.h"
#include "cli/exit_status.h"
#include "cli/flag_checks.h"
#include "common/status_macros.h"
#include "launch/slurm_allocation.h"

namespace shoal::cli::launch_command {

CLI::App* Register(CLI::App& parent, Flags& f) {
  launch::LaunchOptions& o = f.options;
  CLI::App* cmd = parent.add_subcommand(
      "launch",
      "Run a command as a gang: per device or per host, on every "
      "host of a TPU slice or on N nodes");
  cmd->add_flag("--per-device", f.per_device,
                "One process per device (torch_xla.launch, torchrun)");
  cmd->add_flag("--per-host", o.per_host,
                "One process per host with all its devices (JAX)");
  cmd->add_option("--slice", o.slice, "TPU slice to run on");
  cmd->add_option("--num-slices", o.num_slices,
                  "Run on N whole TPU slices (multi-slice: MEGASCALE_*)")
      ->check(AtLeast(1));
  cmd->add_option("--slice-type", o.slice_type,
                  "With --num-slices or --subslice: the whole slices' type, "
                  "e.g. v5p-16 (default: the cluster's only type)");
  cmd->add_option("--subslice", o.subslice,
                  "Run on part of a slice as a slice of its own: its chip "
                  "grid, e.g. 2x2x2 of a 2x2x4");
  cmd->add_option("--subslice-index", o.subslice_index,
                  "With --subslice: which part (default: the first idle one)")
      ->check(AtLeast(0));
  cmd->add_option("--nodes", o.nodes,
                  "Without a slice: how many nodes (default all)")
      ->check(AtLeast(0));
  cmd->add_flag("--local", o.local, "Only one node");
  cmd->add_option("--nproc-per-node", o.nproc_per_node,
                  "Hosts without accelerators: processes per host")
      ->check(AtLeast(1));
  cmd->add_option("--max-restarts", o.max_restarts,
                  "Restart the whole gang up to N times on failure")
      ->check(AtLeast(0));
  cmd->add_option("--reserve-timeout", o.reserve_timeout_s,
                  "Seconds to wait for the gang's hosts (default 60)")
      ->check(AtLeast(1));
  cmd->add_option("--no-restart-on", f.no_restart_on,
                  "Exit codes that fail the gang at once, e.g. 2,3");
  cmd->add_option("--address", o.address, "Head, HOST:PORT")->check(HostPort());
  AddTokenOptions(cmd, &o.token);
  AddTlsOptions(cmd, &f.tls);
  cmd->footer(
      "The command follows --, e.g. shoal launch --per-device -- python "
      "train.py");
  return cmd;
}

absl::StatusOr<launch::LaunchOptions> Options(const Flags& f) {
  launch::LaunchOptions options = f.options;
  if (f.per_device == options.per_host) {
    return UsageError(
        "say --per-device (one process per device) or --per-host (one "
        "process per host)");
  }
  for (absl::string_view code :
       absl::StrSplit(f.no_restart_on, ',', absl::SkipEmpty())) {
    int value = 0;
    if (!absl::SimpleAtoi(code, &value) || value < 0 || value > 255) {
      return UsageError(absl::StrCat(
          "--no-restart-on takes exit codes from 0 to 255, e.g. 2,3 (got \"",
          f.no_restart_on, "\")"));
    }
    options.no_restart_on.insert(value);
  }
  if (absl::Status st = CheckAddressEnvironment(options.address); !st.ok()) {
    return UsageError(st.message());
  }
  // In a Slurm allocation, the gang runs on its hosts.
  auto allocation = launch::SlurmAllocationOfThisProcess();
  if (!allocation.ok()) return UsageError(allocation.status().message());
  if (*allocation) options.hosts = (*allocation)->hosts;
  return options;
}

absl::StatusOr<int> Run(const Flags& f) {
  ASSIGN_OR_RETURN(launch::LaunchOptions options, Options(f));
  return launch::RunLaunch(options);
}

}  // namespace shoal::cli::launch_command
