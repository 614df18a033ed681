#include "cli/daemon_commands.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <map>
#include <memory>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "accel/accelerator_manager.h"
#include "accel/detect.h"
#include "agent/agent.h"
#include "common/environment.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/net.h"
#include "common/session.h"
#include "common/status_macros.h"
#include "dashboard/dashboard.h"
#include "head/head.h"
#include "head/head_storage.h"
#include "scheduling/resource_set.h"

namespace shoal::cli {
namespace {

// Blocks SIGTERM/SIGINT in every thread (call before starting any) and
// returns them, for sigwait.
sigset_t BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

// Runs until SIGTERM/SIGINT or the process's own shutdown request (its
// Wait() returns), then stops it. `T` is Head or NodeAgent.
template <typename T>
void ServeUntilStopped(const sigset_t& stop, T& process, const char* what) {
  std::thread waiter([&] {
    process.Wait();
    kill(getpid(), SIGTERM);
  });
  int sig = 0;
  sigwait(&stop, &sig);
  SHOAL_LOG(INFO) << what << " stopping";
  process.Stop();
  waiter.join();
}

// A head or agent serves a connection per driver, worker and peer, and
// more that never authenticate: it takes every file descriptor the system
// lets it have, rather than the default 1024.
void RaiseFileLimit() {
  rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 &&
      limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

absl::Status Failure(absl::string_view message) {
  return absl::UnavailableError(std::string(message));
}

}  // namespace

namespace head_daemon {
namespace {

// The head's HTTP port (dashboard/dashboard.h); null when it serves none.
std::unique_ptr<dashboard::Dashboard> StartDashboard(
    const Flags& f, const std::string& head_address, const std::string& token) {
  if (f.dashboard_port < 0) return nullptr;
  dashboard::DashboardOptions o;
  o.host = f.dashboard_host;
  o.port = f.dashboard_port;
  o.token = token;
  o.head_address = head_address;
  auto started = dashboard::Dashboard::Start(o);
  if (!started.ok() && f.dashboard_port_fallback) {
    SHOAL_LOG(WARNING) << "dashboard: " << started.status()
                       << "; serving on another port";
    o.port = 0;
    started = dashboard::Dashboard::Start(o);
  }
  if (!started.ok()) {
    SHOAL_LOG(ERROR) << "no dashboard: " << started.status();
    return nullptr;
  }
  return std::move(*started);
}

absl::StatusOr<HeadOptions> BuildOptions(const Flags& f) {
  HeadOptions options;
  options.host = f.host.empty() ? PrimaryIpAddress() : f.host;
  options.port = f.port;
  options.token = env::Get(env::Var::kToken);
  options.session_dir = f.session_dir;
  options.health_timeout_ms = f.health_timeout_ms;
  options.infeasible_grace_ms = f.infeasible_grace_ms;
  options.heartbeat_interval_ms = f.heartbeat_ms;
  options.storage = f.storage;
  if (!f.storage_file.empty()) {
    absl::StatusOr<std::string> text = ReadFile(f.storage_file);
    if (!text.ok()) {
      return Failure(absl::StrCat("cannot read --storage-file: ",
                                  text.status().message()));
    }
    options.storage = std::string(absl::StripAsciiWhitespace(*text));
  }
  if (absl::Status st = ParseStorageSync(f.storage_sync, &options.storage_sync);
      !st.ok()) {
    return Failure(st.message());
  }
  options.discard_wal = f.discard_wal;
  options.reattach_grace_ms = f.reattach_grace_ms;
  if (options.token.empty()) {
    return Failure("the head needs a cluster token in SHOAL_TOKEN");
  }
  return options;
}

}  // namespace

CLI::App* Register(CLI::App& parent, Flags& f) {
  CLI::App* cmd =
      parent.add_subcommand("_head", "Run a head in the foreground");
  cmd->group("");
  cmd->add_option("--node-ip-address", f.host);
  cmd->add_option("--port", f.port)->check(ListenPort());
  cmd->add_option("--session-dir", f.session_dir)->required();
  cmd->add_option("--health-timeout-ms", f.health_timeout_ms);
  cmd->add_option("--heartbeat-ms", f.heartbeat_ms);
  cmd->add_option("--infeasible-grace-ms", f.infeasible_grace_ms);
  cmd->add_option("--dashboard-host", f.dashboard_host);
  cmd->add_option("--dashboard-port", f.dashboard_port);
  cmd->add_option("--dashboard-port-fallback", f.dashboard_port_fallback);
  cmd->add_option("--storage", f.storage);
  cmd->add_option("--storage-file", f.storage_file)->excludes("--storage");
  cmd->add_option("--storage-sync", f.storage_sync);
  cmd->add_flag("--discard-wal", f.discard_wal);
  cmd->add_option("--reattach-grace-ms", f.reattach_grace_ms);
  return cmd;
}

absl::StatusOr<int> Run(const Flags& f) {
  internal::SetLogComponent("head");
  RaiseFileLimit();
  sigset_t stop = BlockStopSignals();
  ASSIGN_OR_RETURN(HeadOptions options, BuildOptions(f));
  auto head = Head::Create(options);
  if (!head.ok()) return Failure(head.status().message());
  std::string address = absl::StrCat(options.host, ":", (*head)->port());
  WriteFile(f.session_dir + "/head.pid", std::to_string(getpid()))
      .IgnoreError();
  // Before cluster_address, which `shoal start` waits for.
  std::unique_ptr<dashboard::Dashboard> dashboard =
      StartDashboard(f, address, options.token);
  if (dashboard != nullptr) {
    std::string url_host =
        f.dashboard_host == "0.0.0.0" ? options.host : f.dashboard_host;
    const std::string dashboard_address =
        absl::StrCat(url_host, ":", dashboard->port());
    (*head)->SetDashboardAddress(dashboard_address);
    WriteFile(f.session_dir + "/dashboard_address", dashboard_address)
        .IgnoreError();
    SHOAL_LOG(INFO) << "dashboard on " << f.dashboard_host << ":"
                    << dashboard->port();
  }
  WriteFile(f.session_dir + "/cluster_address", address).IgnoreError();
  SHOAL_LOG(INFO) << "head listening on " << address;
  ServeUntilStopped(stop, **head, "head");
  dashboard.reset();
  return 0;
}

}  // namespace head_daemon

namespace agent_daemon {

CLI::App* Register(CLI::App& parent, Flags& f) {
  CLI::App* cmd =
      parent.add_subcommand("_agent", "Run a node agent in the foreground");
  cmd->group("");
  cmd->add_option("--address", f.address)->required()->check(HostPort());
  cmd->add_option("--node-ip-address", f.node_ip);
  cmd->add_option("--session-dir", f.session_dir)->required();
  cmd->add_option("--num-cpus", f.advertised.num_cpus)
      ->check(NonNegativeNumber());
  cmd->add_option("--num-gpus", f.advertised.num_gpus)
      ->check(NonNegativeNumber());
  cmd->add_option("--num-tpus", f.advertised.num_tpus)
      ->check(NonNegativeNumber());
  cmd->add_option("--object-store-memory", f.object_store_memory)
      ->check(StoreBytes());
  cmd->add_option("--memory", f.memory)->check(AtLeast(0));
  cmd->add_option("--resources", f.advertised.resources_json);
  cmd->add_option("--labels", f.advertised.labels_json);
  cmd->add_flag("--head-node", f.head_node);
  cmd->add_option("--node-id", f.node_id);
  cmd->add_option("--infeasible-grace-ms", f.infeasible_grace_ms);
  cmd->add_option("--metrics-port", f.metrics_port);
  cmd->add_option("--worker-idle-timeout-ms", f.worker_idle_timeout_ms);
  cmd->add_option("--head-timeout-s", f.head_timeout_s)->check(AtLeast(1));
  return cmd;
}

absl::StatusOr<AgentOptions> BuildOptions(const Flags& f) {
  AgentOptions o;
  o.head_address = f.address;
  o.token = env::Get(env::Var::kToken);
  o.node_ip = f.node_ip.empty() ? PrimaryIpAddress() : f.node_ip;
  o.session_dir = f.session_dir;
  if (!f.node_id.empty()) RETURN_IF_ERROR(CheckNodeId(f.node_id));
  o.node_id = f.node_id;
  o.is_head_node = f.head_node;
  o.infeasible_grace_ms = f.infeasible_grace_ms;
  o.worker_idle_timeout_ms = f.worker_idle_timeout_ms;
  // (Bounded so that a huge value means "never", not an overflow.)
  o.head_timeout_ms =
      std::min<int64_t>(f.head_timeout_s, int64_t{1} << 40) * 1000;
  accel::DetectOptions detect;
  detect.device_root = env::Get(env::Var::kDeviceRoot);
  detect.env = accel::EnvironmentSnapshot();
  // `shoal start` checked these before starting this process; checked
  // again for a hand-made `_agent` command line.
  RETURN_IF_ERROR(CheckAdvertised(f.advertised));
  detect.num_cpus = f.advertised.num_cpus;
  detect.num_gpus = f.advertised.num_gpus;
  detect.num_tpus = f.advertised.num_tpus;
  detect.object_store_memory_bytes = f.object_store_memory;
  detect.memory_bytes = f.memory;
  ASSIGN_OR_RETURN(auto managers, accel::DetectAccelerators(detect));
  ASSIGN_OR_RETURN(auto cpu, accel::DetectCpu(detect));
  accel::NodeAccelerators node = accel::DescribeNode(cpu, managers);
  for (auto& m : managers) o.accelerators.push_back(std::move(m));
  std::map<std::string, double> amounts = node.resources;
  if (!f.advertised.resources_json.empty()) {
    ASSIGN_OR_RETURN(ResourceSet extra,
                     ResourceSet::FromJson(f.advertised.resources_json));
    for (const auto& [k, v] : extra.ToDoubles()) amounts[k] = v;
  }
  ASSIGN_OR_RETURN(o.resources, ResourceSet::FromDoubles(amounts));
  o.labels = node.labels;
  if (!f.advertised.labels_json.empty()) {
    ASSIGN_OR_RETURN(auto labels, ParseLabelsJson(f.advertised.labels_json));
    for (auto& [k, v] : labels) o.labels[k] = std::move(v);
  }
  if (!node.summary.empty()) SHOAL_LOG(INFO) << "detected: " << node.summary;
  return o;
}

absl::StatusOr<int> Run(const Flags& f) {
  internal::SetLogComponent("agent");
  RaiseFileLimit();
  sigset_t stop = BlockStopSignals();
  auto options = BuildOptions(f);
  if (!options.ok()) return Failure(options.status().message());
  if (options->token.empty()) {
    return Failure("the node agent needs the cluster token in SHOAL_TOKEN");
  }
  auto agent = NodeAgent::Create(*options);
  if (!agent.ok()) return Failure(agent.status().message());
  WriteFile(f.session_dir + "/agent.pid", std::to_string(getpid()))
      .IgnoreError();
  WriteFile(f.session_dir + "/node_id", (*agent)->node_id()).IgnoreError();
  std::unique_ptr<dashboard::Dashboard> metrics;
  if (f.metrics_port >= 0) {
    dashboard::DashboardOptions o;
    o.host = options->node_ip;
    o.port = f.metrics_port;
    o.token = options->token;
    o.agent_address = (*agent)->address();
    auto started = dashboard::Dashboard::Start(o);
    if (!started.ok()) {
      return Failure(absl::StrCat("cannot serve --metrics-port: ",
                                  started.status().message()));
    }
    metrics = std::move(*started);
    WriteFile(f.session_dir + "/metrics_address",
              absl::StrCat(options->node_ip, ":", metrics->port()))
        .IgnoreError();
  }
  WriteFile(f.session_dir + "/agent_address", (*agent)->address())
      .IgnoreError();
  ServeUntilStopped(stop, **agent, "node agent");
  metrics.reset();
  absl::Status lost = (*agent)->stop_reason();
  agent->reset();
  if (lost.ok()) return 0;
  // The node stopped by itself (its head is gone): nothing may take it for
  // running, unless another agent of this session has written these since.
  if (ReadSessionFile(f.session_dir, "agent.pid") == std::to_string(getpid())) {
    for (const char* file : {"agent_address", "metrics_address", "agent.pid"}) {
      unlink((f.session_dir + "/" + file).c_str());
    }
  }
  return 1;
}

}  // namespace agent_daemon
}  // namespace shoal::cli
