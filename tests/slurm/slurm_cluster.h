// A real Slurm cluster on one machine, for the Slurm tier and its bench:
// munged, a slurmctld and one slurmd per simulated host, each host a network
// namespace (tests/system/netns.h) with a UTS namespace of its own, so that
// every slurmd believes it is that node (node1, node2, ...). Host 0 is also
// the login node: srun and sbatch run there. Nothing of the machine's own
// Slurm or munge configuration is read or touched: the daemons take their
// configuration, key, sockets, state and logs from one temp folder.
//
// REQUIRES: root, iproute2's `ip`, util-linux's `unshare`, and Debian's
// slurm-wlm and munge (scripts/setup-deps installs them).
#ifndef SHOAL_TESTS_SLURM_SLURM_CLUSTER_H_
#define SHOAL_TESTS_SLURM_SLURM_CLUSTER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/system/netns.h"
#include "tests/testing/shm_entries.h"

namespace shoal::testing {

class SlurmCluster {
 public:
  // Why a Slurm cluster cannot be made here, or "" when it can.
  static std::string UnavailableReason();

  // Starts the daemons in a new folder under `root_parent` and waits until
  // every node is idle.
  static absl::StatusOr<std::unique_ptr<SlurmCluster>> Start(
      int num_hosts, const std::string& root_parent);
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;
  // Stops the daemons and everything left in the hosts; removes the
  // namespaces (the folder stays, for its logs).
  ~SlurmCluster();

  const std::string& root() const { return root_; }
  int size() const { return net_->size(); }
  std::string node_name(int host) const;
  HostNetwork& network() { return *net_; }

  // Runs `shell` (sh -c) on the login node, in `cwd`, with SLURM_CONF and
  // `env` ("K=V") set; its exit code (128 + signal when killed) and output.
  int Run(const std::string& shell, std::string* output,
          const std::vector<std::string>& env = {},
          const std::string& cwd = "");
  // The same, in the background.
  absl::StatusOr<RunningCommand> StartRun(
      const std::string& shell, const std::vector<std::string>& env = {},
      const std::string& cwd = "");

  // The processes of host i that are not Slurm's or munge's daemons.
  std::vector<std::string> StrayProcesses(int host) const;
  // What the daemons logged (the end of each log), for a failure message.
  std::string Logs() const;

 private:
  SlurmCluster() = default;
  absl::Status WriteConfig();
  absl::Status StartDaemons();
  absl::Status AwaitIdle();

  std::unique_ptr<HostNetwork> net_;
  std::string root_;
  std::vector<RunningCommand> daemons_;  // munged, slurmctld, slurmd...
};

}  // namespace shoal::testing

#endif  // SHOAL_TESTS_SLURM_SLURM_CLUSTER_H_
