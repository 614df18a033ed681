// The first phase of `shoal launch`: which gang to run on. From a view of
// the cluster's nodes (as Nodes() answers) and the user's options it says
// whether the gang is a TPU slice or N nodes, the bundle each host of an
// N-node gang reserves, and, once the hosts are known, each rank's host and
// how many processes the gang must account for.
//
// Pure: no RPC, no process environment; the launcher feeds it what it
// fetched.
#ifndef SHOAL_LAUNCH_GANG_PLAN_H_
#define SHOAL_LAUNCH_GANG_PLAN_H_

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "launch/framework_env.h"
#include "shoal/cluster.h"
#include "shoal/placement.h"
#include "shoal/shoal.pb.h"

namespace shoal::launch {

struct LaunchOptions;

// Which hosts to reserve.
struct GangChoice {
  // Every host of a TPU slice (`slice`; empty: the cluster's only one), or
  // `num_nodes` nodes.
  bool slice_gang = false;
  std::string slice;
  // A multi-slice gang: this many slices of type `slice_type` (empty: the
  // cluster's only type); 0: one slice.
  int num_slices = 0;
  std::string slice_type;
  // A sub-slice of this chip grid ("2x2x2"), tile `subslice_index` (-1:
  // the first idle one).
  std::string subslice;
  int subslice_index = -1;
  int num_nodes = 0;
  // Alive nodes the gang may not use (not on LaunchOptions::hosts).
  std::set<std::string> outside;
  int nproc = 1;  // processes per CPU-only host (--nproc-per-node, at least 1)
};

// A slice when one is named, or when the cluster has one and neither
// --nodes nor --local narrows the gang; else --local's one node, --nodes'
// N, or every alive node.
GangChoice ChooseGang(const LaunchOptions& options,
                      const std::vector<NodeInfo>& nodes);

// The gang's view of one node: its address without the port, its device
// kind (TPU before GPU; CPU-only hosts run `nproc_per_node` stand-ins).
proto::LaunchHost DescribeHost(const NodeInfo& node, int nproc_per_node);

// The bundle of one host of an N-node gang: a CPU for its runner, and every
// device of the host when at least N of `alive` have the same accelerators
// (the most common such shape; TPU hosts first), so that the runner can
// hold them all.
std::map<std::string, double> GangBundle(const std::vector<NodeInfo>& alive,
                                         int n, int nproc_per_node);

// The STRICT_SPREAD group that reserves `n` alive nodes of `nodes` but those
// in `excluded` (nodes the launcher saw die, which the head may not have
// declared dead yet). InvalidArgument when fewer are alive.
absl::StatusOr<PlacementGroupOptions> NodesGroupOptions(
    const std::vector<NodeInfo>& nodes, int n, int nproc_per_node,
    const std::set<std::string>& excluded);

// The hosts of the reserved nodes `host_ids`, in bundle order; host i is in
// slice slice_of_host[i] of a multi-slice gang (empty: all in slice 0).
std::vector<proto::LaunchHost> HostsOf(
    const std::vector<std::string>& host_ids,
    const std::vector<NodeInfo>& nodes, int nproc_per_node,
    const std::vector<int>& slice_of_host = {});

// The gang a runner (or the launcher, to check it) computes the processes
// of.
LaunchSpec GangOf(const proto::LaunchHostSpec& spec);

// The ranks of a gang that makes sense.
struct GangShape {
  int expected_processes = 0;
  std::vector<std::pair<int, int>> rank_hosts;  // (rank, host index), sorted
};

// Checks the gang before anything starts (the same check the runners make):
// InvalidArgument naming what to change when --nproc-per-node contradicts
// the hosts' devices or the hosts do not make a gang.
absl::StatusOr<GangShape> CheckGang(const LaunchOptions& options,
                                    const std::vector<proto::LaunchHost>& hosts,
                                    bool slice_gang);

// What attempt `attempt` of the gang tells the runner of each host (in host
// order): the launch id of the attempt, where the launcher listens, the
// command, the hosts, the mode and the cluster's token.
std::vector<proto::LaunchHostSpec> RunnerSpecs(
    const LaunchOptions& options, const std::vector<proto::LaunchHost>& hosts,
    const std::string& launch_id, const std::string& launcher_address,
    int attempt, const std::string& token);

// The devices the runner of `host` holds in its bundle ({kind, count}), or
// {"", 0} when it holds none: a slice's hosts and an N-node gang's whose
// bundle has the host's devices.
std::pair<std::string, int> RunnerDevices(
    const proto::LaunchHost& host, bool slice_gang,
    const std::map<std::string, double>& bundle);

}  // namespace shoal::launch

#endif  // SHOAL_LAUNCH_GANG_PLAN_H_
