// Simulated hosts for the system tier: Linux network namespaces, each with
// its own IPv4 address, joined through veth pairs to a bridge that lives in a
// dedicated "switch" namespace, so the root namespace's network configuration
// is never touched. Processes enter a host by setns() in a forked child; a
// host's processes are the ones `ip netns pids` lists for it.
//
// REQUIRES: root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and iproute2's `ip`.
#ifndef SHOAL_TESTS_SYSTEM_NETNS_H_
#define SHOAL_TESTS_SYSTEM_NETNS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shoal::testing {

// Why network namespaces cannot be used here ("not root", "`ip netns add`
// failed: ..."), or "" when they can.
std::string NetnsUnavailableReason();

// A command started in the background; stdout and stderr go to `fd`.
struct RunningCommand {
  pid_t pid = -1;
  int fd = -1;
};

// Starts argv (argv[0] is looked up in PATH) inside network namespace
// `netns` ("" for this process's own) with `env` ("K=V") added.
absl::StatusOr<RunningCommand> StartInNetns(
    const std::string& netns, const std::vector<std::string>& argv,
    const std::vector<std::string>& env = {});

// Reads the command's output to its end into *output (appended) and returns
// its exit code (128 + signal when killed).
int FinishCommand(RunningCommand& command, std::string* output);

// StartInNetns + FinishCommand; -1 when it cannot start.
int RunInNetns(const std::string& netns, const std::vector<std::string>& argv,
               std::string* output, const std::vector<std::string>& env = {});

// K hosts on one private /24: host i is namespace netns(i) with interface
// eth0 at address(i). Names carry this process's pid (`shoal-<pid>-...`) so
// that concurrent runs never meet, and Create() first removes the namespaces
// of earlier runs whose process is gone (a crashed or killed test).
//
// Thread-compatible: not for concurrent use.
class HostNetwork {
 public:
  static absl::StatusOr<std::unique_ptr<HostNetwork>> Create(int num_hosts);
  HostNetwork(const HostNetwork&) = delete;
  HostNetwork& operator=(const HostNetwork&) = delete;
  // Kills every process left in the hosts and deletes every namespace.
  ~HostNetwork();

  int size() const { return static_cast<int>(hosts_.size()); }
  const std::string& netns(int host) const { return hosts_.at(host).netns; }
  const std::string& address(int host) const { return hosts_.at(host).address; }
  // The processes inside host i (`ip netns pids`).
  std::vector<pid_t> Pids(int host) const;
  // Of those, the ones whose command line contains `marker`.
  std::vector<pid_t> PidsMatching(int host, const std::string& marker) const;
  // SIGKILLs every process of host i until none is left (up to ~5 s): the
  // machine lost power.
  void KillAll(int host);
  // Deletes host i's veth pair: its processes live on, cut off from the
  // others (their packets are dropped, nothing is refused).
  absl::Status Disconnect(int host);

 private:
  struct Host {
    std::string netns;
    std::string address;
    std::string port;  // its veth's name in the switch namespace
  };
  HostNetwork() = default;
  absl::Status AddHost(int index, const std::string& subnet);
  std::string switch_netns_;
  std::vector<Host> hosts_;
};

}  // namespace shoal::testing

#endif  // SHOAL_TESTS_SYSTEM_NETNS_H_
