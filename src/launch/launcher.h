// `shoal launch`: runs a command as a gang on every host of a TPU slice (or
// on N nodes), one process per device (--per-device) or per host
// (--per-host), with the environment of src/launch/framework_env.h.
//
// The launcher (the CLI process) reserves the hosts as one placement group,
// runs one runner task per host in its bundle, prints every line the
// processes write prefixed by their rank, and applies torchrun's failure
// rules: the first process that fails stops the whole gang; with
// max_restarts the gang restarts as a whole; exit codes in no_restart_on
// fail at once.
//
// A launch runs in phases, each its own unit: ResolveGang (gang_plan.h:
// which hosts, the ranks on each), Reserve (gang_reservation.h), StartRanks
// (cluster_gang.h on the launcher, host_runner.h on each host), Supervise
// (launch_supervisor.h: the restart rules) and Report (the supervisor's
// outcome, gang_record.h for the head).
#ifndef SHOAL_LAUNCH_LAUNCHER_H_
#define SHOAL_LAUNCH_LAUNCHER_H_

#include <set>
#include <string>
#include <vector>

namespace shoal::launch {

struct LaunchOptions {
  std::string address;  // head; empty: SHOAL_ADDRESS or this host's
  std::string token;
  bool per_host = false;
  std::string slice;  // TPU slice to run on; empty: the only one, if any
  // Multi-slice: this many whole slices (0: one slice, as above), of type
  // `slice_type` ("v5p-16"; empty: the cluster's only type). Each slice's
  // processes get their own slice's TPU variables and MEGASCALE_*.
  int num_slices = 0;
  std::string slice_type;
  // A sub-slice: this chip grid ("2x2x2") of a whole slice (of the
  // cluster's only generation, or `slice_type`'s), tile `subslice_index`
  // or the first idle one (-1). Its processes see it as a slice of its own.
  std::string subslice;
  int subslice_index = -1;
  int nodes = 0;  // without a slice: this many nodes (0: all alive)
  // Without a slice: only nodes on these hosts (by hostname); empty: any.
  // RunLaunch sets it to the Slurm allocation's hosts when it runs in one.
  std::vector<std::string> hosts;
  bool local = false;  // only the node on this host
  // Hosts without accelerators: processes per host in --per-device mode
  // (stand-in CPU "devices"); 0: one. Hosts with devices run one process per
  // device, and refuse any other count.
  int nproc_per_node = 0;
  int max_restarts = 0;
  // How long to wait for the gang's hosts to be free.
  int reserve_timeout_s = 60;
  std::set<int> no_restart_on;
  std::vector<std::string> argv;
};

// Finds the cluster as every command does (ResolveClusterAddress) and never
// starts one. Returns the exit status for the CLI: 0 only when every process
// of the gang ran to its end and exited 0; else the first failing process's
// exit code (128 + signal when killed), 1 when a host's runner failed or lost
// the launcher (the last line names the host and why), 2 for a gang that
// cannot be launched as asked, 130 when interrupted.
int RunLaunch(const LaunchOptions& options);

}  // namespace shoal::launch

#endif  // SHOAL_LAUNCH_LAUNCHER_H_
