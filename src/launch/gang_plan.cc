#include "launch/gang_plan.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "launch/launcher.h"
#include "scheduling/label_selector.h"

namespace shoal::launch {
namespace {

// Whether `hostname` is one of `hosts`, by full or short name (Slurm names
// node1 the host that calls itself node1.cluster.local).
bool OneOf(const std::string& hostname, const std::vector<std::string>& hosts) {
  const std::string short_name = hostname.substr(0, hostname.find('.'));
  for (const std::string& h : hosts) {
    if (h == hostname || h == short_name) return true;
  }
  return false;
}

DeviceKind KindOf(const std::string& kind) {
  if (kind == "TPU") return DeviceKind::kTpu;
  if (kind == "GPU") return DeviceKind::kGpu;
  return DeviceKind::kCpu;
}

}  // namespace

GangChoice ChooseGang(const LaunchOptions& options,
                      const std::vector<NodeInfo>& nodes) {
  int alive = 0;
  bool has_slice = false;
  GangChoice choice;
  for (const NodeInfo& n : nodes) {
    if (!n.alive) continue;
    if (!options.hosts.empty() && !OneOf(n.hostname, options.hosts)) {
      choice.outside.insert(n.node_id);
      continue;
    }
    ++alive;
    has_slice |= n.labels.count("shoal.io/tpu-slice-name") > 0;
  }
  choice.nproc = std::max(1, options.nproc_per_node);
  choice.slice_gang = !options.slice.empty() || options.num_slices > 0 ||
                      !options.subslice.empty() ||
                      (has_slice && options.nodes == 0 && !options.local);
  if (choice.slice_gang) {
    choice.slice = options.slice;
    choice.num_slices = options.num_slices;
    choice.slice_type = options.slice_type;
    choice.subslice = options.subslice;
    choice.subslice_index = options.subslice_index;
  } else {
    choice.num_nodes =
        options.local ? 1 : (options.nodes > 0 ? options.nodes : alive);
  }
  return choice;
}

proto::LaunchHost DescribeHost(const NodeInfo& n, int nproc_per_node) {
  proto::LaunchHost h;
  h.set_node_id(n.node_id);
  h.set_address(n.address.substr(0, n.address.rfind(':')));
  auto total = [&](const char* r) {
    auto it = n.total.find(r);
    return it == n.total.end() ? 0 : static_cast<int>(it->second);
  };
  if (total("TPU") > 0) {
    h.set_kind("TPU");
    h.set_num_devices(total("TPU"));
    auto type = n.labels.find("shoal.io/tpu-pod-type");
    if (type != n.labels.end()) h.set_tpu_type(type->second);
    auto topology = n.labels.find("shoal.io/tpu-topology");
    if (topology != n.labels.end()) h.set_tpu_topology(topology->second);
    auto w = n.labels.find("shoal.io/tpu-worker-id");
    int worker = 0;
    if (w != n.labels.end()) (void)absl::SimpleAtoi(w->second, &worker);
    h.set_tpu_worker_id(worker);
  } else if (total("GPU") > 0) {
    h.set_kind("GPU");
    h.set_num_devices(total("GPU"));
  } else {
    h.set_kind("CPU");
    h.set_num_devices(std::max(1, nproc_per_node));
  }
  return h;
}

std::map<std::string, double> GangBundle(const std::vector<NodeInfo>& alive,
                                         int n, int nproc_per_node) {
  std::map<std::pair<std::string, int>, int> shapes;
  for (const NodeInfo& node : alive) {
    proto::LaunchHost h = DescribeHost(node, nproc_per_node);
    if (h.kind() != "CPU") ++shapes[{h.kind(), h.num_devices()}];
  }
  std::map<std::string, double> bundle = {{"CPU", 1}};
  const std::pair<std::string, int>* best = nullptr;
  int best_count = 0;
  for (const auto& [shape, count] : shapes) {
    bool better =
        count > best_count || (count == best_count && shape.first == "TPU");
    if (count >= n && better) {
      best = &shape;
      best_count = count;
    }
  }
  if (best != nullptr) bundle[best->first] = best->second;
  return bundle;
}

absl::StatusOr<PlacementGroupOptions> NodesGroupOptions(
    const std::vector<NodeInfo>& nodes, int n, int nproc_per_node,
    const std::set<std::string>& excluded) {
  std::vector<NodeInfo> alive;
  for (const NodeInfo& node : nodes) {
    if (node.alive && excluded.count(node.node_id) == 0) alive.push_back(node);
  }
  if (n > static_cast<int>(alive.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "asked for ", n, " nodes; the cluster has ", alive.size(), " alive",
        excluded.empty() ? "" : " that the gang may use"));
  }
  if (n == 0) {
    return absl::InvalidArgumentError(
        "no node the gang may use is alive (in a Slurm allocation, a launch "
        "runs only on the allocation's hosts, by hostname)");
  }
  PlacementGroupOptions pg;
  pg.strategy = PlacementStrategy::kStrictSpread;
  pg.bundles.assign(n, GangBundle(alive, n, nproc_per_node));
  if (!excluded.empty()) {
    // Only on the nodes counted here.
    std::vector<std::string> ids;
    for (const NodeInfo& node : alive) ids.push_back(node.node_id);
    pg.bundle_label_selector.assign(
        n, {{kLabelNodeId, absl::StrCat("in(", absl::StrJoin(ids, ","), ")")}});
  }
  return pg;
}

std::vector<proto::LaunchHost> HostsOf(const std::vector<std::string>& host_ids,
                                       const std::vector<NodeInfo>& nodes,
                                       int nproc_per_node,
                                       const std::vector<int>& slice_of_host) {
  std::vector<proto::LaunchHost> hosts;
  for (size_t i = 0; i < host_ids.size(); ++i) {
    for (const NodeInfo& n : nodes) {
      if (n.node_id != host_ids[i]) continue;
      hosts.push_back(DescribeHost(n, nproc_per_node));
      if (i < slice_of_host.size()) {
        hosts.back().set_tpu_slice_index(slice_of_host[i]);
      }
    }
  }
  return hosts;
}

LaunchSpec GangOf(const proto::LaunchHostSpec& spec) {
  LaunchSpec gang;
  gang.mode = spec.per_host() ? LaunchMode::kPerHost : LaunchMode::kPerDevice;
  gang.restart_count = spec.restart_count();
  for (const auto& h : spec.hosts()) {
    GangHost host;
    host.address = h.address();
    host.kind = KindOf(h.kind());
    host.num_devices = h.num_devices();
    host.tpu_accelerator_type = h.tpu_type();
    host.tpu_topology = h.tpu_topology();
    host.tpu_worker_id = h.tpu_worker_id();
    host.tpu_slice_index = h.tpu_slice_index();
    gang.hosts.push_back(host);
  }
  return gang;
}

absl::StatusOr<GangShape> CheckGang(const LaunchOptions& options,
                                    const std::vector<proto::LaunchHost>& hosts,
                                    bool slice_gang) {
  proto::LaunchHostSpec probe;
  for (const auto& h : hosts) *probe.add_hosts() = h;
  probe.set_per_host(options.per_host);
  LaunchSpec gang = GangOf(probe);
  gang.rendezvous.master_port = kDefaultMasterPort;
  gang.rendezvous.coordinator_port = kDefaultMasterPort;
  bool devices = !hosts.empty() && hosts[0].kind() != "CPU";
  if (devices && options.nproc_per_node > 0 &&
      options.nproc_per_node != hosts[0].num_devices()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--nproc-per-node ", options.nproc_per_node, ": the gang's hosts have ",
        hosts[0].num_devices(), " ", hosts[0].kind(),
        " each, and a launch runs one process per device (--per-device) or "
        "per host (--per-host); drop --nproc-per-node"));
  }
  auto envs = ComputeLaunchEnvironments(gang);
  if (!envs.ok()) {
    std::string problem(envs.status().message());
    if (!slice_gang && !hosts.empty() && hosts[0].kind() == "TPU") {
      absl::StrAppend(&problem,
                      ". A TPU slice runs as a whole: leave out --local and "
                      "--nodes to launch on every host of the slice");
    }
    return absl::InvalidArgumentError(problem);
  }
  GangShape shape;
  shape.expected_processes = static_cast<int>(envs->size());
  for (const ProcessEnvironment& env : *envs) {
    shape.rank_hosts.emplace_back(env.rank, env.node_rank);
  }
  std::sort(shape.rank_hosts.begin(), shape.rank_hosts.end());
  return shape;
}

std::vector<proto::LaunchHostSpec> RunnerSpecs(
    const LaunchOptions& options, const std::vector<proto::LaunchHost>& hosts,
    const std::string& launch_id, const std::string& launcher_address,
    int attempt, const std::string& token) {
  std::vector<proto::LaunchHostSpec> specs;
  for (size_t i = 0; i < hosts.size(); ++i) {
    proto::LaunchHostSpec spec;
    spec.set_launch_id(launch_id);
    spec.set_launcher_address(launcher_address);
    spec.set_host_index(static_cast<int>(i));
    for (const auto& a : options.argv) spec.add_argv(a);
    for (const auto& h : hosts) *spec.add_hosts() = h;
    spec.set_per_host(options.per_host);
    spec.set_restart_count(attempt);
    spec.set_token(token);
    specs.push_back(std::move(spec));
  }
  return specs;
}

std::pair<std::string, int> RunnerDevices(
    const proto::LaunchHost& host, bool slice_gang,
    const std::map<std::string, double>& bundle) {
  if (host.kind() != "CPU" && (slice_gang || bundle.count(host.kind()) > 0)) {
    return {host.kind(), host.num_devices()};
  }
  return {"", 0};
}

}  // namespace shoal::launch
