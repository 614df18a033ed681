#include "cli/cli.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <future>
#include <iostream>
#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "accel/detect.h"
#include "accel/fake_host.h"
#include "agent/agent.h"
#include "api/local_cluster.h"
#include "cli/status_format.h"
#include "common/logging.h"
#include "common/process.h"
#include "common/session.h"
#include "common/status_macros.h"
#include "common/util.h"
#include "head/head.h"
#include "launch/launcher.h"
#include "rpc/rpc.h"
#include "shoal/shoal.pb.h"

namespace shoal::cli {
namespace {

constexpr int kStartupTimeoutMs = 20000;

int Fail(const std::string& message) {
  std::cerr << "shoal: " << message << "\n";
  return 1;
}

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = getenv(name);
  return v && *v ? v : fallback;
}

// Blocks SIGTERM/SIGINT in every thread (call before starting any) and waits
// for one.
sigset_t BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

// One synchronous call from the CLI.
template <typename Reply>
absl::StatusOr<Reply> CallOnce(const std::string& address,
                               const std::string& token, int method,
                               const google::protobuf::MessageLite& request,
                               int64_t timeout_ms = 5000) {
  ASSIGN_OR_RETURN(auto loop, rpc::EventLoop::Create("shoal-cli"));
  std::promise<absl::StatusOr<Reply>> promise;
  std::unique_ptr<rpc::Channel> channel;
  loop->Post([&] {
    channel = std::make_unique<rpc::Channel>(loop.get(), address, token, "cli");
    rpc::CallProto<Reply>(
        channel.get(), method, request,
        [&](absl::StatusOr<Reply> r) { promise.set_value(std::move(r)); },
        timeout_ms);
  });
  absl::StatusOr<Reply> result = promise.get_future().get();
  std::promise<void> closed;
  loop->Post([&] {
    channel.reset();
    closed.set_value();
  });
  closed.get_future().wait();
  loop->Stop();
  return result;
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

// ---- _head ----

struct HeadFlags {
  std::string host;
  int port = 6379;
  std::string session_dir;
  int64_t health_timeout_ms = 5000;
  int64_t heartbeat_ms = 500;
  int64_t infeasible_grace_ms = 5000;
};

int RunHead(const HeadFlags& f) {
  internal::SetLogComponent("head");
  sigset_t stop = BlockStopSignals();
  HeadOptions options;
  options.host = f.host.empty() ? PrimaryIpAddress() : f.host;
  options.port = f.port;
  options.token = EnvOr("SHOAL_TOKEN", "");
  options.session_dir = f.session_dir;
  options.health_timeout_ms = f.health_timeout_ms;
  options.infeasible_grace_ms = f.infeasible_grace_ms;
  options.heartbeat_interval_ms = f.heartbeat_ms;
  if (options.token.empty()) {
    return Fail("the head needs a cluster token in SHOAL_TOKEN");
  }
  auto head = Head::Create(options);
  if (!head.ok()) return Fail(std::string(head.status().message()));
  std::string address = absl::StrCat(options.host, ":", (*head)->port());
  WriteFile(f.session_dir + "/head.pid", std::to_string(getpid()))
      .IgnoreError();
  WriteFile(f.session_dir + "/cluster_address", address).IgnoreError();
  SHOAL_LOG(INFO) << "head listening on " << address;
  ServeUntilStopped(stop, **head, "head");
  return 0;
}

// ---- _agent ----

struct AgentFlags {
  std::string address;
  std::string node_ip;
  std::string session_dir;
  double num_cpus = -1, num_gpus = -1, num_tpus = -1;
  int64_t object_store_memory = -1;
  std::string resources_json;
  std::string labels_json;
  bool head_node = false;
  std::string node_id;
  int64_t infeasible_grace_ms = 5000;
  int64_t worker_idle_timeout_ms = 10000;
};

absl::StatusOr<AgentOptions> BuildAgentOptions(const AgentFlags& f) {
  AgentOptions o;
  o.head_address = f.address;
  o.token = EnvOr("SHOAL_TOKEN", "");
  o.node_ip = f.node_ip.empty() ? PrimaryIpAddress() : f.node_ip;
  o.session_dir = f.session_dir;
  o.node_id = f.node_id;
  o.is_head_node = f.head_node;
  o.infeasible_grace_ms = f.infeasible_grace_ms;
  o.worker_idle_timeout_ms = f.worker_idle_timeout_ms;
  accel::DetectOptions detect;
  detect.device_root = EnvOr("SHOAL_DEVICE_ROOT", "/");
  detect.env = accel::EnvironmentSnapshot();
  if (f.num_cpus >= 0) detect.num_cpus = f.num_cpus;
  if (f.num_gpus >= 0) detect.num_gpus = f.num_gpus;
  if (f.num_tpus >= 0) detect.num_tpus = f.num_tpus;
  if (f.object_store_memory >= 0) {
    detect.object_store_memory_bytes = f.object_store_memory;
  }
  ASSIGN_OR_RETURN(auto managers, accel::DetectAccelerators(detect));
  ASSIGN_OR_RETURN(auto cpu, accel::DetectCpu(detect));
  accel::NodeAccelerators node = accel::DescribeNode(cpu, managers);
  for (auto& m : managers) o.accelerators.push_back(std::move(m));
  std::map<std::string, double> amounts = node.resources;
  if (!f.resources_json.empty()) {
    ASSIGN_OR_RETURN(ResourceSet extra,
                     ResourceSet::FromJson(f.resources_json));
    for (const auto& [k, v] : extra.ToDoubles()) amounts[k] = v;
  }
  ASSIGN_OR_RETURN(o.resources, ResourceSet::FromDoubles(amounts));
  o.labels = node.labels;
  if (!f.labels_json.empty()) {
    nlohmann::json j = nlohmann::json::parse(f.labels_json, nullptr, false);
    if (!j.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--labels must be a JSON object of strings, e.g. "
                       "'{\"zone\": \"a\"}' (got ",
                       f.labels_json, ")"));
    }
    for (auto& [k, v] : j.items()) {
      o.labels[k] = v.is_string() ? v.get<std::string>() : v.dump();
    }
  }
  if (!node.summary.empty()) SHOAL_LOG(INFO) << "detected: " << node.summary;
  return o;
}

int RunAgent(const AgentFlags& f) {
  internal::SetLogComponent("agent");
  sigset_t stop = BlockStopSignals();
  auto options = BuildAgentOptions(f);
  if (!options.ok()) return Fail(std::string(options.status().message()));
  if (options->token.empty()) {
    return Fail("the node agent needs the cluster token in SHOAL_TOKEN");
  }
  auto agent = NodeAgent::Create(*options);
  if (!agent.ok()) return Fail(std::string(agent.status().message()));
  WriteFile(f.session_dir + "/agent.pid", std::to_string(getpid()))
      .IgnoreError();
  WriteFile(f.session_dir + "/node_id", (*agent)->node_id()).IgnoreError();
  WriteFile(f.session_dir + "/agent_address", (*agent)->address())
      .IgnoreError();
  ServeUntilStopped(stop, **agent, "node agent");
  return 0;
}

// Who holds host:port: a Shoal head started from a temp dir we know (named
// by session and pid), another cluster's Shoal head (it answers our hello),
// or another program.
std::string DescribeListener(const std::string& host, int port,
                             const std::string& temp_dir) {
  std::string address = absl::StrCat(host, ":", port);
  for (const std::string& td : {temp_dir, DefaultTempDir()}) {
    for (const std::string& d : ListSessionDirs(td)) {
      if (LivePid(d, "head") != 0 &&
          ReadSessionFile(d, "cluster_address") == address) {
        return absl::StrCat(" by a running Shoal head (session ", d, ", pid ",
                            LivePid(d, "head"), ")");
      }
    }
  }
  auto probe = CallOnce<proto::ClusterStatus>(
      address, "probe", proto::GET_CLUSTER_STATUS, proto::Empty(), 2000);
  if (!probe.ok() &&
      probe.status().code() == absl::StatusCode::kPermissionDenied) {
    return absl::StrCat(" by a running Shoal head at ", address,
                        " (started from another temp dir; `shoal status "
                        "--address ",
                        address, "` shows it)");
  }
  return " by another program";
}

// ---- start ----

struct StartFlags {
  bool head = false;
  std::string address;
  int port = 6379;
  std::string node_ip;
  std::string temp_dir;
  std::string token;
  double num_cpus = -1, num_gpus = -1, num_tpus = -1;
  int64_t object_store_memory = -1;
  std::string resources_json, labels_json;
  bool block = false;
  int64_t health_timeout_ms = 5000;
  int64_t infeasible_grace_ms = 5000;
  std::string node_id;
};

std::vector<std::string> AgentArgs(const StartFlags& f,
                                   const std::string& head_address,
                                   const std::string& session_dir) {
  std::vector<std::string> argv = {SelfExecutable(), "_agent",
                                   "--address",      head_address,
                                   "--session-dir",  session_dir};
  auto add = [&](const std::string& flag, const std::string& value) {
    argv.push_back(flag);
    argv.push_back(value);
  };
  if (!f.node_ip.empty()) add("--node-ip-address", f.node_ip);
  if (f.num_cpus >= 0) add("--num-cpus", std::to_string(f.num_cpus));
  if (f.num_gpus >= 0) add("--num-gpus", std::to_string(f.num_gpus));
  if (f.num_tpus >= 0) add("--num-tpus", std::to_string(f.num_tpus));
  if (f.object_store_memory >= 0) {
    add("--object-store-memory", std::to_string(f.object_store_memory));
  }
  if (!f.resources_json.empty()) add("--resources", f.resources_json);
  if (!f.labels_json.empty()) add("--labels", f.labels_json);
  if (!f.node_id.empty()) add("--node-id", f.node_id);
  add("--infeasible-grace-ms", std::to_string(f.infeasible_grace_ms));
  if (f.head) argv.push_back("--head-node");
  return argv;
}

// Spawns a head or agent process in the background and waits until it
// writes `ready_file`.
absl::StatusOr<pid_t> StartDaemon(std::vector<std::string> argv,
                                  const std::string& session_dir,
                                  const std::string& token,
                                  const std::string& log_name,
                                  const std::string& ready_file, bool block) {
  SpawnOptions spawn;
  spawn.argv = std::move(argv);
  spawn.env = {{"SHOAL_ROLE", "cli"}, {"SHOAL_TOKEN", token}};
  spawn.log_path = absl::StrCat(session_dir, "/logs/", log_name, ".log");
  spawn.die_with_parent = block;
  spawn.new_session = !block;
  ASSIGN_OR_RETURN(pid_t pid, Spawn(spawn));
  auto ready = internal::WaitForSessionFile(session_dir, ready_file, pid,
                                            spawn.log_path, kStartupTimeoutMs);
  if (!ready.ok()) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return ready.status();
  }
  return pid;
}

int Start(const StartFlags& f) {
  std::string temp_dir = f.temp_dir.empty() ? DefaultTempDir() : f.temp_dir;
  if (f.head == !f.address.empty()) {
    return Fail(
        "say either --head (start a new cluster here) or --address HOST:PORT "
        "(join a cluster)");
  }
  // One head and one node agent per temp dir.
  for (const std::string& dir : ListSessionDirs(temp_dir)) {
    int64_t head_pid = LivePid(dir, "head");
    int64_t agent_pid = LivePid(dir, "agent");
    if (f.head && head_pid != 0) {
      return Fail(absl::StrCat(
          "a head is already running from ", temp_dir, ": pid ", head_pid,
          ", address ", ReadSessionFile(dir, "cluster_address"), ", session ",
          dir, ". Stop it first with `shoal stop --temp-dir ", temp_dir,
          "`, or use another --temp-dir and --port"));
    }
    if (!f.head && agent_pid != 0) {
      std::cout << "A node agent is already running from " << temp_dir
                << " (pid " << agent_pid << ", node "
                << ReadSessionFile(dir, "node_id") << ", joined "
                << ReadSessionFile(dir, "cluster_address")
                << "); nothing to do.\n";
      return 0;
    }
  }
  std::string token = f.token.empty() ? EnvOr("SHOAL_TOKEN", "") : f.token;
  std::string head_address = f.address;
  if (!f.head && token.empty()) {
    std::string address = head_address;
    ResolveClusterAddress(temp_dir, &address, &token).IgnoreError();
    if (token.empty()) {
      // Any head started on this host, whatever its temp dir.
      for (const std::string& td :
           {DefaultTempDir(), std::string("/tmp/shoal")}) {
        LocalCluster c = FindLocalCluster(td);
        if (c.head_address == head_address) token = c.token;
      }
    }
    if (token.empty()) {
      return Fail(absl::StrCat(
          "joining ", head_address,
          " needs the cluster token: pass --token or set SHOAL_TOKEN (the "
          "head printed it; it is in the head's session folder, file token)"));
    }
  }
  auto session = CreateSessionDir(temp_dir);
  if (!session.ok()) return Fail(std::string(session.status().message()));
  std::string dir = *session;
  sigset_t stop;
  if (f.block) stop = BlockStopSignals();
  pid_t head_pid = 0;
  if (f.head) {
    if (token.empty()) token = RandomHex(16);
    std::string host = f.node_ip.empty() ? PrimaryIpAddress() : f.node_ip;
    auto pid = StartDaemon(
        {SelfExecutable(), "_head", "--node-ip-address", host, "--port",
         std::to_string(f.port), "--session-dir", dir, "--health-timeout-ms",
         std::to_string(f.health_timeout_ms), "--infeasible-grace-ms",
         std::to_string(f.infeasible_grace_ms)},
        dir, token, "head", "cluster_address", f.block);
    if (!pid.ok()) {
      std::string msg(pid.status().message());
      if (msg.find("already in use") != std::string::npos) {
        return Fail(absl::StrCat("cannot start the head: ", host, ":", f.port,
                                 " is already in use",
                                 DescribeListener(host, f.port, temp_dir),
                                 ". Stop it with `shoal stop`, or choose "
                                 "another --port"));
      }
      return Fail("cannot start the head: " + msg);
    }
    head_pid = *pid;
    head_address = ReadSessionFile(dir, "cluster_address");
  } else {
    WriteFile(dir + "/cluster_address", head_address).IgnoreError();
  }
  WriteFile(dir + "/token", token, 0600).IgnoreError();
  auto agent_pid = StartDaemon(AgentArgs(f, head_address, dir), dir, token,
                               "agent", "agent_address", f.block);
  if (!agent_pid.ok()) {
    if (head_pid) TerminateProcess(head_pid, 3000);
    return Fail("cannot start the node agent: " +
                std::string(agent_pid.status().message()));
  }
  std::string node_id = ReadSessionFile(dir, "node_id");
  if (f.head) {
    std::cout << "Shoal head started.\n"
              << "  Session folder: " << dir << "\n"
              << "  Head address:   " << head_address << "\n"
              << "  Node:           " << node_id << " at "
              << ReadSessionFile(dir, "agent_address") << "\n"
              << "  Dashboard:      none yet\n\n"
              << "To add another host to this cluster, run there:\n"
              << "  shoal start --address=" << head_address
              << " --token=" << token << "\n"
              << "(or set SHOAL_TOKEN=" << token
              << "; on this host the token is found automatically)\n\n"
              << "To connect a program:  SHOAL_ADDRESS=" << head_address
              << " ./your_program\n"
              << "To see the cluster:    shoal status\n"
              << "To stop:               shoal stop"
              << (f.temp_dir.empty() ? "" : " --temp-dir " + temp_dir) << "\n";
  } else {
    std::cout << "Shoal node agent started: node " << node_id << " at "
              << ReadSessionFile(dir, "agent_address") << " joined "
              << head_address << ".\n  Session folder: " << dir
              << "\nTo stop: shoal stop"
              << (f.temp_dir.empty() ? "" : " --temp-dir " + temp_dir) << "\n";
  }
  std::cout.flush();
  if (f.block) {
    int sig = 0;
    sigwait(&stop, &sig);
    TerminateProcess(*agent_pid, 5000);
    if (head_pid) TerminateProcess(head_pid, 5000);
  }
  return 0;
}

// ---- stop ----

int Stop(const std::string& temp_dir_flag, bool force) {
  std::string temp_dir =
      temp_dir_flag.empty() ? DefaultTempDir() : temp_dir_flag;
  int stopped = 0;
  for (const std::string& dir : ListSessionDirs(temp_dir)) {
    for (const char* what : {"agent", "head"}) {
      int64_t pid = LivePid(dir, what);
      if (pid == 0) continue;
      if (force) {
        kill(static_cast<pid_t>(pid), SIGKILL);
      } else {
        kill(static_cast<pid_t>(pid), SIGTERM);
      }
      // Wait for it to go (it ends its workers first).
      for (int i = 0; i < 1000 && ProcessAlive(pid); ++i) {
        if (i == 500) kill(static_cast<pid_t>(pid), SIGKILL);
        usleep(10000);
      }
      std::cout << (force ? "Killed " : "Stopped ")
                << (std::string(what) == "agent" ? "node agent" : "head")
                << " (pid " << pid << ", session " << dir << ")\n";
      ++stopped;
    }
  }
  if (stopped == 0) {
    std::cout << "No Shoal processes are running from " << temp_dir
              << "; nothing to stop.\n";
  }
  return 0;
}

// ---- status ----

int Status(std::string address, std::string token, const std::string& temp_dir,
           const std::string& format, bool verbose) {
  absl::Status st = ResolveClusterAddress(
      temp_dir.empty() ? DefaultTempDir() : temp_dir, &address, &token);
  if (!st.ok()) return Fail(std::string(st.message()));
  auto status = CallOnce<proto::ClusterStatus>(
      address, token, proto::GET_CLUSTER_STATUS, proto::Empty());
  if (!status.ok()) {
    return Fail(absl::StrCat("cannot get the status of the cluster at ",
                             address, ": ", status.status().message()));
  }
  if (format == "json") {
    std::cout << FormatStatusJson(*status);
  } else {
    std::cout << FormatStatusText(*status, verbose);
  }
  return 0;
}

// ---- dev fake-tpu ----

struct FakeTpuFlags {
  std::string type;
  int worker = 0;
  std::string root;
  std::string name = "my-tpu";
  std::string hostnames;
  bool vfio = false;
};

int FakeTpu(const FakeTpuFlags& f) {
  accel::FakeTpuHostOptions options;
  options.accelerator_type = f.type;
  options.worker_id = f.worker;
  options.slice_name = f.name;
  options.use_vfio = f.vfio;
  if (!f.hostnames.empty()) {
    options.worker_hostnames = absl::StrSplit(f.hostnames, ',');
  }
  std::map<std::string, std::string> env;
  absl::Status st = accel::MakeFakeTpuHost(f.root, options, &env);
  if (!st.ok()) return Fail(std::string(st.message()));
  std::cerr << "Made a fake TPU host (" << f.type << ", worker " << f.worker
            << ") under " << f.root
            << ". Start a node agent on it with these variables set:\n";
  std::cout << "export SHOAL_DEVICE_ROOT=" << f.root << "\n";
  for (const auto& [k, v] : env)
    std::cout << "export " << k << "=" << v << "\n";
  return 0;
}

}  // namespace

int Main(int argc, char** argv) {
  CLI::App app{"Shoal: a cluster runtime for ML workloads", "shoal"};
  app.require_subcommand(1);

  StartFlags start;
  auto* start_cmd = app.add_subcommand(
      "start", "Start a head (--head) or join a cluster (--address)");
  start_cmd->add_flag("--head", start.head, "Start a new cluster's head here");
  start_cmd->add_option("--address", start.address, "Head to join, HOST:PORT");
  start_cmd->add_option("--port", start.port, "Head port (default 6379)");
  start_cmd->add_option("--node-ip-address", start.node_ip,
                        "Address to listen on (default: this host's primary)");
  start_cmd->add_option("--temp-dir", start.temp_dir,
                        "Parent of the session folder (default /tmp/shoal)");
  start_cmd->add_option("--token", start.token, "Cluster token (joining)");
  start_cmd->add_option("--num-cpus", start.num_cpus, "CPUs to advertise");
  start_cmd->add_option("--num-gpus", start.num_gpus, "GPUs to advertise");
  start_cmd->add_option("--num-tpus", start.num_tpus, "TPU chips to advertise");
  start_cmd->add_option("--object-store-memory", start.object_store_memory,
                        "Bytes of the node's shared-memory object store "
                        "(default 30% of RAM, within /dev/shm's free space)");
  start_cmd->add_option("--resources", start.resources_json,
                        "Extra resources as JSON, e.g. '{\"accel_x\": 4}'");
  start_cmd->add_option("--labels", start.labels_json, "Node labels as JSON");
  start_cmd->add_option("--node-id", start.node_id, "Node id (default random)");
  start_cmd->add_option("--health-timeout-ms", start.health_timeout_ms,
                        "Head: mark a silent node dead after this long");
  start_cmd->add_option("--infeasible-grace-ms", start.infeasible_grace_ms,
                        "How long an impossible request waits for a node");
  start_cmd->add_flag("--block", start.block,
                      "Stay in the foreground; stop everything on Ctrl-C");

  std::string stop_temp_dir;
  bool force = false;
  auto* stop_cmd =
      app.add_subcommand("stop", "Stop what `shoal start` started here");
  stop_cmd->add_option("--temp-dir", stop_temp_dir, "Temp dir given to start");
  stop_cmd->add_flag("--force", force, "Kill at once (SIGKILL)");

  std::string status_address, status_token, status_temp_dir,
      status_format = "text";
  bool verbose = false;
  auto* status_cmd =
      app.add_subcommand("status", "Show nodes, resources, demands");
  status_cmd->add_option("--address", status_address, "Head, HOST:PORT");
  status_cmd->add_option("--token", status_token, "Cluster token");
  status_cmd->add_option("--temp-dir", status_temp_dir,
                         "Temp dir of a local head");
  status_cmd->add_option("--format", status_format, "text or json")
      ->check(CLI::IsMember({"text", "json"}));
  status_cmd->add_flag("--verbose,-v", verbose,
                       "Per-node resources and labels");

  HeadFlags head;
  auto* head_cmd = app.add_subcommand("_head", "Run a head in the foreground");
  head_cmd->group("");
  head_cmd->add_option("--node-ip-address", head.host);
  head_cmd->add_option("--port", head.port);
  head_cmd->add_option("--session-dir", head.session_dir)->required();
  head_cmd->add_option("--health-timeout-ms", head.health_timeout_ms);
  head_cmd->add_option("--heartbeat-ms", head.heartbeat_ms);
  head_cmd->add_option("--infeasible-grace-ms", head.infeasible_grace_ms);

  AgentFlags agent;
  auto* agent_cmd =
      app.add_subcommand("_agent", "Run a node agent in the foreground");
  agent_cmd->group("");
  agent_cmd->add_option("--address", agent.address)->required();
  agent_cmd->add_option("--node-ip-address", agent.node_ip);
  agent_cmd->add_option("--session-dir", agent.session_dir)->required();
  agent_cmd->add_option("--num-cpus", agent.num_cpus);
  agent_cmd->add_option("--num-gpus", agent.num_gpus);
  agent_cmd->add_option("--num-tpus", agent.num_tpus);
  agent_cmd->add_option("--object-store-memory", agent.object_store_memory);
  agent_cmd->add_option("--resources", agent.resources_json);
  agent_cmd->add_option("--labels", agent.labels_json);
  agent_cmd->add_flag("--head-node", agent.head_node);
  agent_cmd->add_option("--node-id", agent.node_id);
  agent_cmd->add_option("--infeasible-grace-ms", agent.infeasible_grace_ms);
  agent_cmd->add_option("--worker-idle-timeout-ms",
                        agent.worker_idle_timeout_ms);

  launch::LaunchOptions launch_opts;
  std::string no_restart_on;
  bool per_device = false;
  auto* launch_cmd = app.add_subcommand(
      "launch",
      "Run a command as a gang: per device or per host, on every "
      "host of a TPU slice or on N nodes");
  launch_cmd->add_flag("--per-device", per_device,
                       "One process per device (torch_xla.launch, torchrun)");
  launch_cmd->add_flag("--per-host", launch_opts.per_host,
                       "One process per host with all its devices (JAX)");
  launch_cmd->add_option("--slice", launch_opts.slice, "TPU slice to run on");
  launch_cmd->add_option("--nodes", launch_opts.nodes,
                         "Without a slice: how many nodes (default all)");
  launch_cmd->add_flag("--local", launch_opts.local, "Only one node");
  launch_cmd->add_option("--nproc-per-node", launch_opts.nproc_per_node,
                         "Hosts without accelerators: processes per host");
  launch_cmd->add_option("--max-restarts", launch_opts.max_restarts,
                         "Restart the whole gang up to N times on failure");
  launch_cmd->add_option("--no-restart-on", no_restart_on,
                         "Exit codes that fail the gang at once, e.g. 2,3");
  launch_cmd->add_option("--address", launch_opts.address, "Head, HOST:PORT");
  launch_cmd->add_option("--token", launch_opts.token, "Cluster token");
  launch_cmd->footer(
      "The command follows --, e.g. shoal launch --per-device -- python "
      "train.py");

  FakeTpuFlags fake;
  auto* dev_cmd = app.add_subcommand("dev", "Developer helpers");
  auto* fake_cmd = dev_cmd->add_subcommand(
      "fake-tpu", "Make a fake TPU host tree; prints the variables to export");
  fake_cmd->add_option("--type", fake.type, "Accelerator type, e.g. v5p-16")
      ->required();
  fake_cmd->add_option("--worker", fake.worker, "TPU worker id of this host");
  fake_cmd->add_option("--root", fake.root, "Directory to create it in")
      ->required();
  fake_cmd->add_option("--name", fake.name, "Slice name (TPU_NAME)");
  fake_cmd->add_option("--hostnames", fake.hostnames,
                       "TPU_WORKER_HOSTNAMES, comma separated");
  fake_cmd->add_flag("--vfio", fake.vfio, "Chips as /dev/vfio groups");
  dev_cmd->require_subcommand(1);

  // Everything after `--` is the command, verbatim (CLI11 would read a
  // "[...]" argument as a list).
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) != "--") continue;
    for (int j = i + 1; j < argc; ++j) launch_opts.argv.push_back(argv[j]);
    argc = i;
    break;
  }
  CLI11_PARSE(app, argc, argv);
  if (fake_cmd->parsed()) return FakeTpu(fake);
  if (launch_cmd->parsed()) {
    if (per_device == launch_opts.per_host) {
      return Fail("say --per-device or --per-host");
    }
    for (absl::string_view code :
         absl::StrSplit(no_restart_on, ',', absl::SkipEmpty())) {
      int value = 0;
      if (!absl::SimpleAtoi(code, &value)) {
        return Fail("--no-restart-on takes exit codes, e.g. 2,3");
      }
      launch_opts.no_restart_on.insert(value);
    }
    return launch::RunLaunch(launch_opts);
  }
  if (start_cmd->parsed()) return Start(start);
  if (stop_cmd->parsed()) return Stop(stop_temp_dir, force);
  if (status_cmd->parsed()) {
    return Status(status_address, status_token, status_temp_dir, status_format,
                  verbose);
  }
  if (head_cmd->parsed()) return RunHead(head);
  if (agent_cmd->parsed()) return RunAgent(agent);
  return 1;
}

}  // namespace shoal::cli
