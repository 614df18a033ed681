#include "cli/daemon_args.h"

namespace shoal::cli {

std::vector<std::string> AgentArgs(const start::Flags& f,
                                   const std::string& self,
                                   const std::string& head_address,
                                   const std::string& session_dir) {
  std::vector<std::string> argv = {self,         "_agent",        "--address",
                                   head_address, "--session-dir", session_dir};
  auto add = [&](const std::string& flag, const std::string& value) {
    argv.push_back(flag);
    argv.push_back(value);
  };
  if (!f.node_ip.empty()) add("--node-ip-address", f.node_ip);
  const AdvertisedFlags& a = f.advertised;
  if (a.num_cpus) add("--num-cpus", std::to_string(*a.num_cpus));
  if (a.num_gpus) add("--num-gpus", std::to_string(*a.num_gpus));
  if (a.num_tpus) add("--num-tpus", std::to_string(*a.num_tpus));
  if (f.object_store_memory) {
    add("--object-store-memory", std::to_string(*f.object_store_memory));
  }
  if (f.memory) add("--memory", std::to_string(*f.memory));
  if (!a.resources_json.empty()) add("--resources", a.resources_json);
  if (!a.labels_json.empty()) add("--labels", a.labels_json);
  if (!f.node_id.empty()) add("--node-id", f.node_id);
  add("--infeasible-grace-ms", std::to_string(f.infeasible_grace_ms));
  if (f.metrics_port >= 0) {
    add("--metrics-port", std::to_string(f.metrics_port));
  }
  add("--head-timeout-s", std::to_string(f.head_timeout_s));
  add("--worker-idle-timeout-ms", std::to_string(f.worker_idle_timeout_ms));
  if (f.head) argv.push_back("--head-node");
  return argv;
}

std::vector<std::string> HeadArgs(const start::Flags& f,
                                  const std::string& self,
                                  const HeadPlace& place) {
  const int dashboard_port = !f.include_dashboard ? -1
                             : f.dashboard_port   ? *f.dashboard_port
                                                : start::kDefaultDashboardPort;
  return {self,
          "_head",
          "--node-ip-address",
          place.host,
          "--port",
          std::to_string(place.port),
          "--session-dir",
          place.session_dir,
          "--health-timeout-ms",
          std::to_string(f.health_timeout_ms),
          "--heartbeat-ms",
          std::to_string(f.heartbeat_ms),
          "--infeasible-grace-ms",
          std::to_string(f.infeasible_grace_ms),
          "--dashboard-host",
          f.dashboard_host,
          "--dashboard-port",
          std::to_string(dashboard_port),
          "--dashboard-port-fallback",
          f.dashboard_port || !f.include_dashboard ? "0" : "1"};
}

}  // namespace shoal::cli
