#include "cli/cli.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "accel/accelerator_manager.h"
#include "accel/detect.h"
#include "accel/fake_host.h"
#include "agent/agent.h"
#include "agent/object_service.h"
#include "api/local_cluster.h"
#include "api/status_format.h"
#include "cli/common.h"
#include "cli/state_commands.h"
#include "cli/usage.h"
#include "common/logging.h"
#include "common/process.h"
#include "common/session.h"
#include "common/status_macros.h"
#include "common/util.h"
#include "dashboard/dashboard.h"
#include "dashboard/formats.h"
#include "dashboard/job_submit.h"
#include "head/head.h"
#include "head/head_storage.h"
#include "head/redis_storage.h"
#include "head_client/head_client.h"
#include "launch/launcher.h"
#include "rpc/event_loop.h"
#include "rpc/tls.h"
#include "scheduling/resource_set.h"
#include "shoal/shoal.pb.h"
#include "sim/sim_nodes.h"

namespace shoal::cli {
namespace {

constexpr int kStartupTimeoutMs = 20000;
// In a session folder: its cluster was stopped with `shoal stop`.
constexpr char kStoppedMarker[] = "stopped";
// Beside a crashed head's files while a start takes its session up.
constexpr char kResumingSuffix[] = ".resuming";
// A head's --storage, kept in its session folder for a head that takes the
// session up (0600: a Redis URL may hold a password).
constexpr char kStorageFile[] = "storage";
// Its --storage-sync, kept there likewise.
constexpr char kStorageSyncFile[] = "storage_sync";
// The smallest object store worth having: objects of at least the inline
// threshold (100 KiB) go to the store, and a store is one shared-memory
// arena, so below a few such objects it only fails Puts.
constexpr int64_t kMinObjectStoreBytes = int64_t{1} << 20;

// `path` from the root, so that a command naming it works from any folder.
std::string Absolute(const std::string& path) {
  std::error_code error;
  std::filesystem::path absolute = std::filesystem::absolute(path, error);
  return error ? path : absolute.lexically_normal().string();
}

// ---- flag values ----
//
// Every value is checked before anything (a session folder, a process) is
// made. A check says what is wrong and what to write instead; as CLI11
// validators (which return "" for a good value) they run while the command
// line is parsed, and CLI11 puts the flag's name in front.

// The form every connection takes (SplitHostPort), said in the user's words.
absl::Status CheckHostPort(const std::string& address) {
  std::string host;
  int port = 0;
  if (SplitHostPort(address, &host, &port).ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "must be HOST:PORT with a port from 1 to 65535, e.g. 10.0.0.1:6379 "
      "(got \"",
      address, "\")"));
}

// A decimal number of 0 or more: digits with an optional fraction and
// exponent. Not hexadecimal ("0x10" is not 16), "inf" or "nan", which
// strtod would take.
std::string CheckNumber(const std::string& value) {
  double number = 0;
  const bool decimal =
      !value.empty() &&
      (absl::ascii_isdigit(static_cast<unsigned char>(value[0])) ||
       value[0] == '.') &&
      value.find_first_not_of("0123456789.eE+-") == std::string::npos;
  if (!decimal || !absl::SimpleAtod(value, &number) || !std::isfinite(number) ||
      number < 0) {
    return absl::StrCat("must be a number of 0 or more (got \"", value, "\")");
  }
  return "";
}

// An integer of at least `min`.
CLI::Validator AtLeast(int64_t min) {
  return CLI::Validator(
      [min](std::string& value) -> std::string {
        int64_t number = 0;
        if (!absl::SimpleAtoi(value, &number) || number < min) {
          return absl::StrCat("must be a whole number of ", min,
                              " or more (got \"", value, "\")");
        }
        return "";
      },
      "");
}

CLI::Validator NonNegativeNumber() { return CLI::Validator(CheckNumber, ""); }

// --token TOKEN, and --token-file PATH, which reads it from a file so that
// it is in no process's arguments (a trailing newline is ignored).
void AddTokenOptions(CLI::App* cmd, std::string* token,
                     const std::string& what = "Cluster token") {
  cmd->add_option("--token", *token, what);
  cmd->add_option_function<std::string>(
         "--token-file",
         [token](const std::string& path) {
           absl::StatusOr<std::string> text = ReadFile(path);
           if (!text.ok()) {
             throw CLI::ValidationError("--token-file",
                                        absl::StrCat("cannot read ", path, ": ",
                                                     text.status().message()));
           }
           std::string t = std::string(absl::StripAsciiWhitespace(*text));
           if (t.empty()) {
             throw CLI::ValidationError("--token-file", path + " is empty");
           }
           *token = t;
         },
         what + ", read from this file (keeps it out of `ps`)")
      ->excludes("--token");
}

// --tls-cert, --tls-key, --tls-ca and --tls-mutual, for every command that
// connects: they set SHOAL_TLS_* (rpc/tls.h) for the command and what it
// starts (ApplyTls).
void AddTlsOptions(CLI::App* cmd, rpc::TlsConfig* tls) {
  cmd->add_option("--tls-cert", tls->cert,
                  "TLS: this process's certificate, PEM (SHOAL_TLS_CERT)");
  cmd->add_option("--tls-key", tls->key,
                  "TLS: the certificate's private key, PEM (SHOAL_TLS_KEY)");
  cmd->add_option("--tls-ca", tls->ca,
                  "TLS: the CA certificate that signed the cluster's, PEM "
                  "(SHOAL_TLS_CA)");
  cmd->add_flag("--tls-mutual", tls->mutual,
                "TLS: servers refuse clients without a certificate signed by "
                "the CA (SHOAL_TLS_MUTUAL=1)");
}

// The command's TLS: its flags over SHOAL_TLS_*, exported for the processes
// it starts, and loaded now, so that a bad file fails the command at once.
absl::Status ApplyTls(const rpc::TlsConfig& flags) {
  rpc::TlsConfig tls = rpc::TlsConfig::FromEnvironment();
  for (auto [flag, field] :
       {std::pair{&flags.cert, &tls.cert}, std::pair{&flags.key, &tls.key},
        std::pair{&flags.ca, &tls.ca}}) {
    if (!flag->empty()) *field = *flag;
  }
  tls.mutual = tls.mutual || flags.mutual;
  if (!tls.enabled()) return absl::OkStatus();
  tls.ExportToEnvironment();
  return rpc::ProcessTls().status();
}

// The TLS flags this command runs with, for the commands it prints.
std::string TlsFlagsText() {
  rpc::TlsConfig tls = rpc::TlsConfig::FromEnvironment();
  std::string out;
  for (auto [flag, path] :
       {std::pair{"--tls-ca", &tls.ca}, std::pair{"--tls-cert", &tls.cert},
        std::pair{"--tls-key", &tls.key}}) {
    if (!path->empty())
      absl::StrAppend(&out, " ", flag, " ", ShellQuote(*path));
  }
  if (tls.mutual) absl::StrAppend(&out, " --tls-mutual");
  return out;
}

CLI::Validator HostPort() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        absl::Status status = CheckHostPort(value);
        return status.ok() ? "" : std::string(status.message());
      },
      "");
}

// A port to listen on: 0 asks for any free one (tests and the demo use it).
CLI::Validator ListenPort() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        int port = -1;
        if (!absl::SimpleAtoi(value, &port) || port < 0 || port > 65535) {
          return absl::StrCat(
              "must be a port from 1 to 65535, or 0 for any free port (got \"",
              value, "\")");
        }
        return "";
      },
      "");
}

CLI::Validator StoreBytes() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        int64_t bytes = -1;
        if (!absl::SimpleAtoi(value, &bytes) || bytes < 0 ||
            (bytes > 0 && bytes < kMinObjectStoreBytes)) {
          return absl::StrCat(
              "must be a byte count of at least ", kMinObjectStoreBytes,
              " (1 MiB), or 0 for no object store (got \"", value, "\")");
        }
        return "";
      },
      "");
}

CLI::Validator OneOf(std::vector<std::string> allowed) {
  return CLI::Validator(
      [allowed](std::string& value) -> std::string {
        for (const std::string& a : allowed) {
          if (value == a) return "";
        }
        std::string message =
            absl::StrCat("must be ", absl::StrJoin(allowed, " or "), " (got \"",
                         value, "\")");
        if (std::optional<std::string> near = ClosestName(value, allowed)) {
          absl::StrAppend(&message, "; did you mean ", *near, "?");
        }
        return message;
      },
      "");
}

// What a node advertises, as `shoal start` and `_agent` take it; unset
// amounts are detected.
struct AdvertisedFlags {
  std::optional<double> num_cpus, num_gpus, num_tpus;
  std::string resources_json, labels_json;
};

// What CLI11's checks cannot see: values that are each well formed but that
// the node would refuse (2.5 GPUs, an amount too large, bad JSON).
absl::Status CheckAdvertised(const AdvertisedFlags& f) {
  const std::pair<const char*, const std::optional<double>*> amounts[] = {
      {"CPU", &f.num_cpus}, {"GPU", &f.num_gpus}, {"TPU", &f.num_tpus}};
  for (const auto& [name, amount] : amounts) {
    if (!amount->has_value()) continue;
    auto set = ResourceSet::FromDoubles({{name, **amount}});
    if (!set.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--num-", absl::AsciiStrToLower(name),
                       "s: ", set.status().message()));
    }
  }
  if (!f.resources_json.empty()) {
    auto set = ResourceSet::FromJson(f.resources_json);
    if (!set.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--resources: ", set.status().message()));
    }
  }
  if (!f.labels_json.empty()) {
    auto labels = ParseLabelsJson(f.labels_json);
    if (!labels.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--labels: ", labels.status().message()));
    }
  }
  return absl::OkStatus();
}

// SHOAL_ADDRESS stands for --address when that is not given: it must have
// the same form.
absl::Status CheckAddressEnvironment(const std::string& address_flag) {
  const char* env = getenv("SHOAL_ADDRESS");
  if (!address_flag.empty() || env == nullptr || *env == '\0') {
    return absl::OkStatus();
  }
  absl::Status status = CheckHostPort(env);
  if (status.ok()) return status;
  return absl::InvalidArgumentError(
      absl::StrCat("SHOAL_ADDRESS ", status.message()));
}

// ---- command names ----

// The names of `app`'s subcommands that --help lists.
std::vector<std::string> VisibleCommands(CLI::App& app) {
  std::vector<std::string> names;
  for (CLI::App* sub : app.get_subcommands(
           [](CLI::App* s) { return !s->get_group().empty(); })) {
    names.push_back(sub->get_name());
  }
  return names;
}

// The error for a command line whose command is not one of `app`'s (or of
// a subcommand's that needs one, as `dev` does), naming the closest visible
// command; nullopt when the commands are known (CLI11 judges the rest).
std::optional<std::string> UnknownCommand(CLI::App& app, int argc,
                                          char** argv) {
  if (argc == 1) {
    return absl::StrCat(
        "say a command: ", absl::StrJoin(VisibleCommands(app), ", "),
        " (`shoal --help` says what each does)");
  }
  CLI::App* current = &app;
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word.empty() || word[0] == '-') return std::nullopt;
    CLI::App* known = nullptr;
    for (CLI::App* sub :
         current->get_subcommands([](CLI::App*) { return true; })) {
      if (sub->get_name() == word) known = sub;
    }
    if (known != nullptr) {
      current = known;
      if (i + 1 == argc && current->get_require_subcommand_min() > 0) {
        return absl::StrCat("say a command after ", word, ": ",
                            absl::StrJoin(VisibleCommands(*current), ", "));
      }
      continue;
    }
    if (current->get_require_subcommand_min() == 0) return std::nullopt;
    const std::vector<std::string> visible = VisibleCommands(*current);
    std::string message = absl::StrCat("unknown command \"", word, "\"");
    if (std::optional<std::string> closest = ClosestName(word, visible)) {
      absl::StrAppend(&message, "; did you mean \"", *closest, "\"?");
    } else {
      absl::StrAppend(&message, "; the commands are ",
                      absl::StrJoin(visible, ", "));
    }
    return message;
  }
  return std::nullopt;
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

// The status of the cluster whose head is at `address`, over a connection
// of its own.
absl::StatusOr<proto::ClusterStatus> FetchStatus(const std::string& address,
                                                 const std::string& token,
                                                 int64_t timeout_ms = 5000) {
  ASSIGN_OR_RETURN(auto loop, rpc::EventLoop::Create("shoal-cli"));
  absl::StatusOr<proto::ClusterStatus> status;
  {
    rpc::HeadClient head(loop.get(), address, token, "cli");
    status = head.ClusterStatus(timeout_ms);
  }  // closes the connection on the loop
  loop->Stop();
  return status;
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
  std::string dashboard_host = "127.0.0.1";
  int dashboard_port = -1;  // -1: none
  // When dashboard_port is taken, serve on any free port instead.
  bool dashboard_port_fallback = false;
  std::string storage;
  // A file (0600) holding the storage, so that a Redis password is in no
  // process's arguments; `shoal start` passes the session's.
  std::string storage_file;
  std::string storage_sync = "normal";
  bool discard_wal = false;
  int64_t reattach_grace_ms = 10000;
};

// The head's HTTP port (dashboard/dashboard.h); null when it serves none.
std::unique_ptr<dashboard::Dashboard> StartDashboard(
    const HeadFlags& f, const std::string& head_address,
    const std::string& token) {
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

int RunHead(const HeadFlags& f) {
  internal::SetLogComponent("head");
  RaiseFileLimit();
  sigset_t stop = BlockStopSignals();
  HeadOptions options;
  options.host = f.host.empty() ? PrimaryIpAddress() : f.host;
  options.port = f.port;
  options.token = EnvOr("SHOAL_TOKEN", "");
  options.session_dir = f.session_dir;
  options.health_timeout_ms = f.health_timeout_ms;
  options.infeasible_grace_ms = f.infeasible_grace_ms;
  options.heartbeat_interval_ms = f.heartbeat_ms;
  options.storage = f.storage;
  if (!f.storage_file.empty()) {
    absl::StatusOr<std::string> text = ReadFile(f.storage_file);
    if (!text.ok()) {
      return Fail(absl::StrCat("cannot read --storage-file: ",
                               text.status().message()));
    }
    options.storage = std::string(absl::StripAsciiWhitespace(*text));
  }
  if (absl::Status st = ParseStorageSync(f.storage_sync, &options.storage_sync);
      !st.ok()) {
    return Fail(std::string(st.message()));
  }
  options.discard_wal = f.discard_wal;
  options.reattach_grace_ms = f.reattach_grace_ms;
  if (options.token.empty()) {
    return Fail("the head needs a cluster token in SHOAL_TOKEN");
  }
  auto head = Head::Create(options);
  if (!head.ok()) return Fail(std::string(head.status().message()));
  std::string address = absl::StrCat(options.host, ":", (*head)->port());
  WriteFile(f.session_dir + "/head.pid", std::to_string(getpid()))
      .IgnoreError();
  // Before cluster_address, which `shoal start` waits for.
  std::unique_ptr<dashboard::Dashboard> dashboard =
      StartDashboard(f, address, options.token);
  if (dashboard != nullptr) {
    std::string url_host =
        f.dashboard_host == "0.0.0.0" ? options.host : f.dashboard_host;
    WriteFile(f.session_dir + "/dashboard_address",
              absl::StrCat(url_host, ":", dashboard->port()))
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

// ---- _agent ----

struct AgentFlags {
  std::string address;
  std::string node_ip;
  std::string session_dir;
  AdvertisedFlags advertised;
  std::optional<int64_t> object_store_memory;
  bool head_node = false;
  std::string node_id;
  int64_t infeasible_grace_ms = 5000;
  int64_t worker_idle_timeout_ms = 10000;
  int metrics_port = -1;  // -1: no /metrics
  int64_t head_timeout_s = 60;
};

absl::StatusOr<AgentOptions> BuildAgentOptions(const AgentFlags& f) {
  AgentOptions o;
  o.head_address = f.address;
  o.token = EnvOr("SHOAL_TOKEN", "");
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
  detect.device_root = EnvOr("SHOAL_DEVICE_ROOT", "/");
  detect.env = accel::EnvironmentSnapshot();
  // `shoal start` checked these before starting this process; checked
  // again for a hand-made `_agent` command line.
  RETURN_IF_ERROR(CheckAdvertised(f.advertised));
  detect.num_cpus = f.advertised.num_cpus;
  detect.num_gpus = f.advertised.num_gpus;
  detect.num_tpus = f.advertised.num_tpus;
  detect.object_store_memory_bytes = f.object_store_memory;
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

int RunAgent(const AgentFlags& f) {
  internal::SetLogComponent("agent");
  RaiseFileLimit();
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
  std::unique_ptr<dashboard::Dashboard> metrics;
  if (f.metrics_port >= 0) {
    dashboard::DashboardOptions o;
    o.host = options->node_ip;
    o.port = f.metrics_port;
    o.token = options->token;
    o.agent_address = (*agent)->address();
    auto started = dashboard::Dashboard::Start(o);
    if (!started.ok()) {
      return Fail(absl::StrCat("cannot serve --metrics-port: ",
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
  auto probe = FetchStatus(address, "probe", 2000);
  if (!probe.ok() &&
      probe.status().code() == absl::StatusCode::kPermissionDenied) {
    return absl::StrCat(" by a running Shoal head at ", address,
                        " (started from another temp dir; `shoal status "
                        "--address ",
                        ShellQuote(address), "` shows it)");
  }
  return " by another program";
}

// ---- start ----

struct StartFlags {
  bool head = false;
  std::string address;
  int port = 6379;
  std::string storage;  // the head's (--storage); "": the session's head.db
  std::string storage_sync;  // the head's (--storage-sync); "": normal
  bool discard_wal = false;  // the head's (--discard-wal)
  std::string node_ip;
  std::string temp_dir;
  std::string token;
  AdvertisedFlags advertised;
  std::optional<int64_t> object_store_memory;
  bool block = false;
  int64_t health_timeout_ms = 5000;
  int64_t heartbeat_ms = 500;  // head: the interval agents heartbeat at
  int64_t infeasible_grace_ms = 5000;
  std::string node_id;
  std::string dashboard_host = "127.0.0.1";
  std::optional<int> dashboard_port;  // unset: 8265, or any free port
  bool include_dashboard = true;
  int metrics_port = -1;        // the agent's /metrics; -1: none
  int64_t head_timeout_s = 60;  // the agent's (--head-timeout-s)
};

constexpr int kDefaultDashboardPort = 8265;

// What `shoal start --head` says of the dashboard its head serves.
std::string DashboardLine(const std::string& session_dir,
                          const std::string& token) {
  std::string address = ReadSessionFile(session_dir, "dashboard_address");
  if (address.empty()) return "not started (see the head's log)";
  std::string query;
  for (unsigned char c : token) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' ||
        c == '~') {
      query.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&query, absl::StrFormat("%%%02X", c));
    }
  }
  return absl::StrCat(
      "http://", address, "/?token=", query,
      " (REST API and /metrics: Authorization: Bearer <token>)");
}

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
  const AdvertisedFlags& a = f.advertised;
  if (a.num_cpus) add("--num-cpus", std::to_string(*a.num_cpus));
  if (a.num_gpus) add("--num-gpus", std::to_string(*a.num_gpus));
  if (a.num_tpus) add("--num-tpus", std::to_string(*a.num_tpus));
  if (f.object_store_memory) {
    add("--object-store-memory", std::to_string(*f.object_store_memory));
  }
  if (!a.resources_json.empty()) add("--resources", a.resources_json);
  if (!a.labels_json.empty()) add("--labels", a.labels_json);
  if (!f.node_id.empty()) add("--node-id", f.node_id);
  add("--infeasible-grace-ms", std::to_string(f.infeasible_grace_ms));
  if (f.metrics_port >= 0)
    add("--metrics-port", std::to_string(f.metrics_port));
  add("--head-timeout-s", std::to_string(f.head_timeout_s));
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

// ` --temp-dir DIR` when start was given one, for the commands it prints:
// without it they would look in the default temp dir. (A temp dir from
// SHOAL_TEMP_DIR is the user's default: their shell has it.)
std::string TempDirFlag(const StartFlags& f) {
  return f.temp_dir.empty()
             ? ""
             : absl::StrCat(" --temp-dir ", ShellQuote(Absolute(f.temp_dir)));
}

// The newest session of temp_dir whose head did not stop (it crashed or
// was killed) and left its state; "" when there is none.
std::string CrashedHeadSession(const std::string& temp_dir) {
  std::string latest = temp_dir + "/session_latest";
  std::error_code ec;
  std::string dir = std::filesystem::canonical(latest, ec).string();
  if (ec) return "";
  auto exists = [&](const char* name) {
    return std::filesystem::exists(dir + "/" + name, ec);
  };
  if ((!exists("head.db") && !exists(kStorageFile)) || exists(kStoppedMarker) ||
      (!exists("cluster_address") &&
       !exists((std::string("cluster_address") + kResumingSuffix).c_str())) ||
      LivePid(dir, "head") != 0) {
    return "";
  }
  return dir;
}

// A start that takes up a crashed session sets the files of its head aside
// (name + kResumingSuffix) while the new head starts, and puts them back if
// it fails, or is killed, before that head is up: the next start still
// finds the crashed session and takes it up, with its token, instead of
// starting a new cluster.
class SessionResume {
 public:
  explicit SessionResume(std::string dir) : dir_(std::move(dir)) {
    for (const char* file : kFiles) {
      rename(Path(file).c_str(), (Path(file) + kResumingSuffix).c_str());
    }
  }
  // The address the crashed head had: set aside now, or still in place if
  // an earlier start was killed after setting it aside.
  std::string Address() const {
    std::string address = ReadSessionFile(dir_, "cluster_address");
    if (address.empty()) {
      address = ReadSessionFile(
          dir_, std::string("cluster_address") + kResumingSuffix);
    }
    return address;
  }
  // The new head did not come up: the crashed session is as it was.
  void Restore() {
    for (const char* file : kFiles) {
      rename((Path(file) + kResumingSuffix).c_str(), Path(file).c_str());
    }
  }
  // The new head is up: what was set aside is no longer needed.
  void Done() { ForgetSetAside(dir_); }
  // Removes what a start set aside in `dir` (a running head's session);
  // a storage handed to its head (storage.next) becomes the session's.
  static void ForgetSetAside(const std::string& dir) {
    for (const char* file : kFiles) {
      unlink((dir + "/" + file + kResumingSuffix).c_str());
    }
    const std::string storage = dir + "/" + kStorageFile;
    rename((storage + ".next").c_str(), storage.c_str());
  }

 private:
  static constexpr const char* kFiles[] = {"cluster_address", "head.pid",
                                           "dashboard_address"};
  std::string Path(const char* file) const { return dir_ + "/" + file; }
  const std::string dir_;
};

// A head runs from `dir` without its node agent: a start was killed
// between the two, or the agent died. Starts the agent, with `f`'s flags.
int StartMissingAgent(const StartFlags& f, const std::string& dir,
                      int64_t head_pid) {
  const std::string address = ReadSessionFile(dir, "cluster_address");
  std::cout << "A Shoal head is already running from " << dir << " (pid "
            << head_pid << ", address " << address
            << "), without its node agent: starting it.\n";
  unlink((dir + "/agent_address").c_str());
  absl::StatusOr<pid_t> agent = StartDaemon(
      AgentArgs(f, address, dir), dir, ReadSessionFile(dir, "token"), "agent",
      "agent_address", /*block=*/false);
  if (!agent.ok()) {
    return Fail("cannot start the node agent: " +
                std::string(agent.status().message()));
  }
  std::cout << "Node agent started: node " << ReadSessionFile(dir, "node_id")
            << " at " << ReadSessionFile(dir, "agent_address") << ".\n"
            << "To see the cluster:  shoal status" << TempDirFlag(f) << "\n";
  return 0;
}

int Start(const StartFlags& f) {
  std::string temp_dir = f.temp_dir.empty() ? DefaultTempDir() : f.temp_dir;
  // Everything about the command line is checked before anything (a
  // session folder, a process) is made.
  if (f.head && !f.address.empty()) {
    return UsageFail(
        "say either --head (start a new cluster here) or --address HOST:PORT "
        "(join a cluster), not both");
  }
  if (!f.head && f.address.empty()) {
    return UsageFail(
        "say --head (start a new cluster here) or --address HOST:PORT (join "
        "a cluster)");
  }
  if (absl::Status st = CheckAdvertised(f.advertised); !st.ok()) {
    return UsageFail(std::string(st.message()));
  }
  if (!f.node_id.empty()) {
    if (absl::Status st = CheckNodeId(f.node_id); !st.ok()) {
      return UsageFail(std::string(st.message()));
    }
  }
  if (f.head && f.health_timeout_ms < 2 * f.heartbeat_ms) {
    return UsageFail(absl::StrCat(
        "--health-timeout-ms (", f.health_timeout_ms,
        ") must be at least twice --heartbeat-ms (", f.heartbeat_ms,
        "): a node would be declared dead between two of its heartbeats"));
  }
  if (StorageSync sync; !f.storage_sync.empty()) {
    if (absl::Status st = ParseStorageSync(f.storage_sync, &sync); !st.ok()) {
      return UsageFail(std::string(st.message()));
    }
  }
  if (absl::StartsWith(f.storage, "redis://")) {
    if (auto url = ParseRedisUrl(f.storage); !url.ok()) {
      return UsageFail(std::string(url.status().message()));
    }
  }
  // (A head taking up a session keeps the storage the session names.)
  auto discard_wal_misused = [&](const std::string& storage) {
    return f.discard_wal && (!f.head || storage == "memory" ||
                             absl::StartsWith(storage, "redis://"));
  };
  constexpr char kDiscardWalUse[] =
      "--discard-wal is for a head (--head) that keeps its state in SQLite: "
      "it sets a damaged write-ahead log (head.db-wal) aside";
  if (discard_wal_misused(f.storage)) return UsageFail(kDiscardWalUse);
  // (ApplyTls loaded the files.) Heads and agents serve: with TLS they
  // need a certificate.
  if (auto tls = rpc::ProcessTls(); tls.ok() && *tls != nullptr) {
    if (absl::Status st = (*tls)->CheckCanServe(); !st.ok()) {
      return UsageFail(std::string(st.message()));
    }
  }
  // One head and one node agent per temp dir.
  for (const std::string& dir : ListSessionDirs(temp_dir)) {
    int64_t head_pid = LivePid(dir, "head");
    int64_t agent_pid = LivePid(dir, "agent");
    if (f.head && head_pid != 0) {
      // Starting what already runs does nothing, as joining twice does; a
      // head on another port than the one asked for is not what was asked.
      const std::string address = ReadSessionFile(dir, "cluster_address");
      int running_port = 0;
      absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &running_port);
      if (f.port == 0 || f.port == running_port) {
        // A start killed while it took this session up left the crashed
        // head's files set aside; its head came up all the same.
        SessionResume::ForgetSetAside(dir);
        if (agent_pid == 0) return StartMissingAgent(f, dir, head_pid);
        std::cout << "A Shoal head is already running from " << temp_dir
                  << " (pid " << head_pid << ", address " << address
                  << ", session " << dir << "); nothing to do.\n"
                  << "To see the cluster:  shoal status" << TempDirFlag(f)
                  << "\nTo start it again with other options, stop it "
                     "first:  shoal stop"
                  << TempDirFlag(f) << "\n";
        return 0;
      }
      return Fail(absl::StrCat(
          "a head is already running from ", temp_dir, ": pid ", head_pid,
          ", address ", address, " (not port ", f.port, "), session ", dir,
          ". Stop it first with `shoal stop --temp-dir ", ShellQuote(temp_dir),
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
  // A head that did not stop (it crashed or was killed) left its session
  // and state: a head started here again takes them up, on the same port
  // and with the same token, so that the cluster's agents and drivers find
  // it again.
  const std::string resumed = f.head ? CrashedHeadSession(temp_dir) : "";
  std::optional<SessionResume> resume;
  std::string dir;
  // A new session folder's start that fails leaves session_latest as it
  // was, so that the next start finds the session this temp dir had.
  std::string previous_latest;
  int port = f.port;
  std::string storage = f.storage;
  std::string storage_sync = f.storage_sync;
  if (!resumed.empty()) {
    dir = resumed;
    std::string kept_storage = ReadSessionFile(dir, kStorageFile);
    if (storage.empty()) storage = kept_storage;
    if (discard_wal_misused(storage)) return UsageFail(kDiscardWalUse);
    if (storage_sync.empty()) {
      storage_sync = ReadSessionFile(dir, kStorageSyncFile);
    }
    std::string kept = ReadSessionFile(dir, "token");
    if (!token.empty() && token != kept) {
      return Fail(absl::StrCat(
          "the head of session ", dir,
          " did not stop, and a head started "
          "here takes it up with its own token: leave out --token, or "
          "`shoal stop",
          TempDirFlag(f), "` first to start a new cluster"));
    }
    token = kept;
    // (A session of an earlier version may have been open to others.)
    KeepSessionPrivate(dir);
    resume.emplace(dir);
    std::string address = resume->Address();
    absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port);
    std::cout << "Taking up session " << dir
              << ": its head did not stop (it crashed or was killed).\n";
  } else {
    auto session = CreateSessionDir(temp_dir, &previous_latest);
    if (!session.ok()) return Fail(std::string(session.status().message()));
    dir = *session;
  }
  // Puts the session back as this start found it.
  auto undo = [&] {
    if (resume) {
      resume->Restore();
    } else {
      AbandonSessionDir(temp_dir, dir, previous_latest);
    }
  };
  sigset_t stop;
  if (f.block) stop = BlockStopSignals();
  pid_t head_pid = 0;
  // Files of the session that change only once its head is up: a start
  // that fails, or is killed, leaves the ones of the crashed head.
  std::vector<std::pair<std::string, std::string>> write_when_up;
  if (f.head) {
    if (token.empty()) token = RandomHex(16);
    std::string host = f.node_ip.empty() ? PrimaryIpAddress() : f.node_ip;
    std::vector<std::string> head_argv = {
        SelfExecutable(),
        "_head",
        "--node-ip-address",
        host,
        "--port",
        std::to_string(port),
        "--session-dir",
        dir,
        "--health-timeout-ms",
        std::to_string(f.health_timeout_ms),
        "--heartbeat-ms",
        std::to_string(f.heartbeat_ms),
        "--infeasible-grace-ms",
        std::to_string(f.infeasible_grace_ms),
        "--dashboard-host",
        f.dashboard_host,
        "--dashboard-port",
        std::to_string(!f.include_dashboard ? -1
                       : f.dashboard_port   ? *f.dashboard_port
                                            : kDefaultDashboardPort),
        "--dashboard-port-fallback",
        f.dashboard_port || !f.include_dashboard ? "0" : "1"};
    // The storage goes to the head in a 0600 file, never in its arguments
    // (a Redis URL may hold a password). A session taken up with another
    // --storage keeps its own until the new head is up.
    std::string storage_path;
    if (!storage.empty()) {
      const bool kept = resume && storage == ReadSessionFile(dir, kStorageFile);
      storage_path = absl::StrCat(dir, "/", kStorageFile, kept ? "" : ".next");
      if (!kept) {
        if (absl::Status st = WriteFile(storage_path, storage, 0600);
            !st.ok()) {
          undo();
          return Fail("cannot start the head: " + std::string(st.message()));
        }
      }
      head_argv.insert(head_argv.end(), {"--storage-file", storage_path});
      if (!kept) write_when_up.emplace_back(kStorageFile, storage);
    }
    if (!storage_sync.empty()) {
      head_argv.insert(head_argv.end(), {"--storage-sync", storage_sync});
      write_when_up.emplace_back(kStorageSyncFile, storage_sync);
    }
    if (f.discard_wal) head_argv.push_back("--discard-wal");
    auto pid = StartDaemon(std::move(head_argv), dir, token, "head",
                           "cluster_address", f.block);
    if (absl::EndsWith(storage_path, ".next")) unlink(storage_path.c_str());
    if (!pid.ok()) {
      undo();
      std::string msg(pid.status().message());
      if (msg.find("already in use") != std::string::npos) {
        // A head taking up a crashed session listens where the crashed one
        // did (its agents and drivers know that address), whatever --port.
        return Fail(absl::StrCat(
            "cannot start the head: ", host, ":", port, " is already in use",
            DescribeListener(host, port, temp_dir),
            resume ? ". The crashed head's agents and programs reconnect to "
                     "that port: stop what holds it, then run `shoal start "
                     "--head` again"
                   : absl::StrCat(". Stop it with `shoal stop", TempDirFlag(f),
                                  "`, or choose another --port")));
      }
      return Fail("cannot start the head: " + msg);
    }
    head_pid = *pid;
    head_address = ReadSessionFile(dir, "cluster_address");
    if (f.discard_wal) {
      std::cout << ReadSessionFile(dir, kDiscardedWalFile) << "\n";
      unlink((dir + "/" + kDiscardedWalFile).c_str());
    }
  } else {
    WriteFile(dir + "/cluster_address", head_address).IgnoreError();
  }
  for (const auto& [name, contents] : write_when_up) {
    WriteFile(dir + "/" + name, contents, 0600).IgnoreError();
  }
  WriteFile(dir + "/token", token, 0600).IgnoreError();
  absl::StatusOr<pid_t> agent_pid = static_cast<pid_t>(LivePid(dir, "agent"));
  const bool own_agent = resumed.empty() || *agent_pid == 0;
  if (own_agent) {
    // (A taken-up session whose agent still runs keeps it.)
    unlink((dir + "/agent_address").c_str());
    agent_pid = StartDaemon(AgentArgs(f, head_address, dir), dir, token,
                            "agent", "agent_address", f.block);
  }
  if (!agent_pid.ok()) {
    if (head_pid) TerminateProcess(head_pid, 3000);
    undo();
    return Fail("cannot start the node agent: " +
                std::string(agent_pid.status().message()));
  }
  if (resume) resume->Done();
  std::string node_id = ReadSessionFile(dir, "node_id");
  // Every command printed here must work as printed in another shell on
  // this host, so each names a temp dir that was given.
  const std::string temp_dir_flag = TempDirFlag(f);
  // With TLS, the commands printed carry this one's TLS flags.
  const std::string tls_flags = TlsFlagsText();
  if (f.head) {
    std::string program_env = ShellAssignment("SHOAL_ADDRESS", head_address);
    if (!f.temp_dir.empty()) {
      // The program finds the token in the head's session folder there.
      absl::StrAppend(&program_env, " ",
                      ShellAssignment("SHOAL_TEMP_DIR", Absolute(f.temp_dir)));
    }
    rpc::TlsConfig tls = rpc::TlsConfig::FromEnvironment();
    for (auto [name, path] : {std::pair{"SHOAL_TLS_CA", &tls.ca},
                              std::pair{"SHOAL_TLS_CERT", &tls.cert},
                              std::pair{"SHOAL_TLS_KEY", &tls.key}}) {
      if (!path->empty()) {
        absl::StrAppend(&program_env, " ", ShellAssignment(name, *path));
      }
    }
    if (tls.mutual) absl::StrAppend(&program_env, " SHOAL_TLS_MUTUAL=1");
    std::cout << "Shoal head started.\n"
              << "  Session folder: " << dir << "\n"
              << "  Head address:   " << head_address << "\n"
              << "  Node:           " << node_id << " at "
              << ReadSessionFile(dir, "agent_address") << "\n"
              << "  Dashboard:      " << DashboardLine(dir, token) << "\n\n"
              << "To add another host to this cluster, run there:\n"
              << "  "
              << ShellCommand({"shoal", "start", "--address=" + head_address,
                               "--token=" + token})
              << tls_flags << "\n"
              << "(or set " << ShellAssignment("SHOAL_TOKEN", token)
              << (temp_dir_flag.empty()
                      ? "; on this host the token is found automatically)"
                      : ")")
              << "\n\n"
              << "To connect a program:  " << program_env << " ./your_program\n"
              << "To see the cluster:    shoal status" << temp_dir_flag
              << tls_flags << "\n"
              << "To stop:               shoal stop" << temp_dir_flag << "\n";
  } else {
    std::cout << "Shoal node agent started: node " << node_id << " at "
              << ReadSessionFile(dir, "agent_address") << " joined "
              << head_address << ".\n  Session folder: " << dir
              << "\nTo see the cluster: shoal status" << temp_dir_flag
              << tls_flags << "\nTo stop:            shoal stop"
              << temp_dir_flag << "\n";
  }
  std::cout.flush();
  if (f.block) {
    // Until Ctrl-C (or SIGTERM), or until the node agent this command
    // started ends by itself (its head lost for --head-timeout-s): then
    // this command ends too, with its exit code, as the process a
    // container or service manager watches.
    if (own_agent) {
      sigaddset(&stop, SIGCHLD);
      pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    }
    for (;;) {
      int wait_status = 0;
      if (own_agent &&
          waitpid(*agent_pid, &wait_status, WNOHANG) == *agent_pid) {
        std::cerr << "shoal: the node agent (pid " << *agent_pid << ") "
                  << DescribeWaitStatus(wait_status) << "; see " << dir
                  << "/logs/agent.log\n";
        if (head_pid) TerminateProcess(head_pid, 5000);
        return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) != 0
                   ? WEXITSTATUS(wait_status)
                   : 1;
      }
      int sig = 0;
      sigwait(&stop, &sig);
      if (sig != SIGCHLD) break;
    }
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
    // Stopped on purpose: the next `shoal start --head` starts a new
    // cluster instead of taking this one up.
    if (std::filesystem::exists(dir + "/head.db") ||
        std::filesystem::exists(dir + "/" + kStorageFile)) {
      WriteFile(dir + "/" + kStoppedMarker, "").IgnoreError();
    }
  }
  // The object store arenas of agents on this host that were killed.
  agent::RemoveStaleArenas("/dev/shm");
  if (stopped == 0) {
    std::cout << "No Shoal processes are running from " << temp_dir
              << "; nothing to stop.\n";
  }
  return 0;
}

// ---- status ----

int Status(std::string address, std::string token, const std::string& temp_dir,
           const std::string& format, bool verbose) {
  if (absl::Status st = CheckAddressEnvironment(address); !st.ok()) {
    return UsageFail(std::string(st.message()));
  }
  absl::Status st = ResolveClusterAddress(
      temp_dir.empty() ? DefaultTempDir() : temp_dir, &address, &token);
  if (!st.ok()) return Fail(std::string(st.message()));
  auto status = FetchStatus(address, token);
  if (!status.ok()) {
    return Fail(absl::StrCat("cannot get the status of the cluster at ",
                             address, ": ", status.status().message()));
  }
  if (format == "json") {
    std::cout << internal::FormatStatusJson(*status);
  } else {
    std::cout << internal::FormatStatusText(*status, verbose);
  }
  return 0;
}

// ---- job ----

struct JobFlags {
  std::string address, token, temp_dir;
  std::string submission_id;
  std::string working_dir;       // packed and run in
  std::vector<std::string> env;  // K=V
  double entrypoint_num_cpus = 0;
  double entrypoint_num_gpus = 0;
  std::string entrypoint_resources;  // JSON
  bool no_wait = false;
  bool follow = false;
  std::string format = "text";
};

bool JobFinished(const proto::JobInfo& info) {
  return info.state() == proto::JobInfo::SUCCEEDED ||
         info.state() == proto::JobInfo::FAILED ||
         info.state() == proto::JobInfo::STOPPED;
}

// Runs `fn` with a client of the head the one rule finds (--address, else
// SHOAL_ADDRESS, else the cluster started from this host's temp dir).
int WithJobHead(const JobFlags& f,
                const std::function<int(rpc::HeadClient&)>& fn) {
  if (absl::Status st = CheckAddressEnvironment(f.address); !st.ok()) {
    return UsageFail(std::string(st.message()));
  }
  std::string address = f.address, token = f.token;
  absl::Status found = ResolveClusterAddress(
      f.temp_dir.empty() ? DefaultTempDir() : f.temp_dir, &address, &token);
  if (!found.ok()) return Fail(std::string(found.message()));
  auto loop = rpc::EventLoop::Create("shoal-cli");
  if (!loop.ok()) return Fail(std::string(loop.status().message()));
  int rc;
  {
    rpc::HeadClient head(loop->get(), address, token, "cli");
    rc = fn(head);
  }
  (*loop)->Stop();
  return rc;
}

int JobError(const std::string& what, const absl::Status& status) {
  return Fail(absl::StrCat(what, ": ", status.message()));
}

// The exit status that stands for a job that ended as `info` says.
int JobExitStatus(const proto::JobInfo& info) {
  if (info.state() == proto::JobInfo::SUCCEEDED) return 0;
  if (info.exit_code() > 0 && info.exit_code() < 256) return info.exit_code();
  return 1;
}

// Prints the job's output from `offset` as it comes; with `follow`, until
// the job ends. Returns the job's exit status, or a failure's.
int FollowJobLogs(rpc::HeadClient& head, const std::string& id, bool follow) {
  proto::JobLogsRequest req;
  req.set_submission_id(id);
  req.set_wait_ms(follow ? 5000 : 0);
  while (true) {
    auto logs = head.GetJobLogs(req);
    if (!logs.ok())
      return JobError("cannot read the job's logs", logs.status());
    std::cout << logs->data() << std::flush;
    req.set_offset(logs->next_offset());
    if (logs->finished() || (!follow && logs->data().empty())) break;
  }
  if (!follow) return 0;
  proto::JobRef ref;
  ref.set_submission_id(id);
  auto info = head.GetJob(ref);
  if (!info.ok()) return JobError("cannot get the job", info.status());
  std::cerr << "Job " << id << " " << JobStateName(info->state()) << ": "
            << info->message() << " (" << JobDuration(*info) << ")\n";
  return JobExitStatus(*info);
}

// What a Ctrl-C says while `shoal job submit` follows a job: the job goes
// on. Made before the handler can run; the handler only writes it.
const std::string* g_job_goes_on = nullptr;

void SayJobGoesOn(int) {
  ssize_t ignored =
      write(STDERR_FILENO, g_job_goes_on->data(), g_job_goes_on->size());
  (void)ignored;
  _exit(128 + SIGINT);
}

// From now on a Ctrl-C ends only the following of job `id`, saying that
// the job still runs and how to stop it or follow it again.
void OnInterruptSayJobGoesOn(const JobFlags& f, const std::string& id) {
  std::string flags;
  if (!f.address.empty()) {
    absl::StrAppend(&flags, " --address ", ShellQuote(f.address));
  }
  if (!f.temp_dir.empty()) {
    absl::StrAppend(&flags, " --temp-dir ", ShellQuote(Absolute(f.temp_dir)));
  }
  static std::string note;
  const std::string quoted_id = ShellQuote(id);
  note = absl::StrCat(
      "\nshoal: stopped following job ", id,
      "; the job is still running.\n  stop it:          shoal job stop", flags,
      " ", quoted_id, "\n  follow it again:  shoal job logs --follow", flags,
      " ", quoted_id, "\n  its state:        shoal job status", flags, " ",
      quoted_id, "\n");
  g_job_goes_on = &note;
  struct sigaction action = {};
  action.sa_handler = SayJobGoesOn;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
}

int JobSubmit(const JobFlags& f, const std::vector<std::string>& command) {
  if (command.empty()) {
    return UsageFail(
        "say the entrypoint after --, e.g. shoal job submit -- python3 "
        "train.py");
  }
  proto::JobSpec spec;
  spec.set_submission_id(f.submission_id);
  std::vector<std::string> words;
  for (const std::string& w : command) words.push_back(ShellQuote(w));
  spec.set_entrypoint(absl::StrJoin(words, " "));
  for (const std::string& kv : f.env) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return UsageFail(
          absl::StrCat("--env takes NAME=VALUE, not \"", kv, "\""));
    }
    (*spec.mutable_env())[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  ResourceSet need;
  if (!f.entrypoint_resources.empty()) {
    auto parsed = ResourceSet::FromJson(f.entrypoint_resources);
    if (!parsed.ok()) {
      return UsageFail(
          absl::StrCat("--entrypoint-resources: ", parsed.status().message()));
    }
    need = *parsed;
  }
  auto add = [&](const char* name, double amount) -> bool {
    if (amount <= 0) return true;
    auto one = ResourceSet::FromDoubles({{name, amount}});
    if (!one.ok()) return false;
    need.Add(*one);
    return true;
  };
  if (!add("CPU", f.entrypoint_num_cpus) ||
      !add("GPU", f.entrypoint_num_gpus)) {
    return UsageFail(
        "--entrypoint-num-cpus and --entrypoint-num-gpus take "
        "a number of 0 or more");
  }
  need.ToProto(spec.mutable_entrypoint_resources());
  // As given, for the job's JSON (Ray's entrypoint_num_cpus / _gpus).
  spec.set_entrypoint_num_cpus(f.entrypoint_num_cpus);
  spec.set_entrypoint_num_gpus(f.entrypoint_num_gpus);
  return WithJobHead(f, [&](rpc::HeadClient& head) {
    if (!f.working_dir.empty()) {
      absl::Status sent =
          dashboard::AttachWorkingDir(head, f.working_dir, &spec);
      if (!sent.ok()) return Fail(std::string(sent.message()));
    }
    auto info = head.SubmitJob(spec);
    if (!info.ok()) return JobError("cannot submit the job", info.status());
    const std::string& id = info->spec().submission_id();
    if (info->state() == proto::JobInfo::FAILED) {
      return Fail(absl::StrCat("job ", id, " failed: ", info->message()));
    }
    std::cerr << "Job " << id << " submitted (node " << info->node_id()
              << ").\n";
    if (f.no_wait) {
      std::cerr << "  logs:   shoal job logs -f " << id << "\n"
                << "  status: shoal job status " << id << "\n"
                << "  stop:   shoal job stop " << id << "\n";
      std::cout << id << "\n";
      return 0;
    }
    OnInterruptSayJobGoesOn(f, id);
    return FollowJobLogs(head, id, /*follow=*/true);
  });
}

void PrintJob(const proto::JobInfo& info) {
  std::cout << info.spec().submission_id() << ": " << JobStateName(info.state())
            << " on node " << info.node_id();
  if (info.pid() > 0) std::cout << " (pid " << info.pid() << ")";
  std::cout << ", " << JobDuration(info) << "\n"
            << "  entrypoint: " << info.spec().entrypoint() << "\n";
  if (!info.message().empty()) std::cout << "  " << info.message() << "\n";
}

nlohmann::json JobJson(const proto::JobInfo& info) {
  return {{"submission_id", info.spec().submission_id()},
          {"status", JobStateName(info.state())},
          {"entrypoint", info.spec().entrypoint()},
          {"message", info.message()},
          {"exit_code", info.exit_code()},
          {"node_id", info.node_id()},
          {"start_time", info.start_time_ms()},
          {"end_time", info.end_time_ms()},
          {"driver_pid", info.pid()}};
}

int JobStatus(const JobFlags& f, const std::string& id) {
  return WithJobHead(f, [&](rpc::HeadClient& head) {
    proto::JobRef ref;
    ref.set_submission_id(id);
    auto info = head.GetJob(ref);
    if (!info.ok()) return JobError("cannot get the job", info.status());
    if (f.format == "json") {
      std::cout << dashboard::JsonText(JobJson(*info), 2) << "\n";
    } else {
      PrintJob(*info);
    }
    return 0;
  });
}

int JobStop(const JobFlags& f, const std::string& id) {
  return WithJobHead(f, [&](rpc::HeadClient& head) {
    proto::JobRef ref;
    ref.set_submission_id(id);
    auto info = head.StopJob(ref);
    if (!info.ok()) return JobError("cannot stop the job", info.status());
    if (JobFinished(*info)) {
      std::cout << "Job " << id << " already ended ("
                << JobStateName(info->state()) << ").\n";
      return 0;
    }
    std::cout << "Stopping job " << id << " (SIGTERM, then SIGKILL)...\n";
    for (int i = 0; i < 200 && !JobFinished(*info); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      info = head.GetJob(ref);
      if (!info.ok()) return JobError("cannot get the job", info.status());
    }
    if (!JobFinished(*info)) return Fail("the job did not end within 20 s");
    std::cout << "Job " << id << " " << JobStateName(info->state()) << ": "
              << info->message() << "\n";
    return 0;
  });
}

int JobLogs(const JobFlags& f, const std::string& id) {
  return WithJobHead(f, [&](rpc::HeadClient& head) {
    return FollowJobLogs(head, id, f.follow);
  });
}

int JobList(const JobFlags& f) {
  return WithJobHead(f, [&](rpc::HeadClient& head) {
    auto list = head.ListJobs();
    if (!list.ok()) return JobError("cannot list the jobs", list.status());
    if (f.format == "json") {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& info : list->jobs()) out.push_back(JobJson(info));
      std::cout << dashboard::JsonText(out, 2) << "\n";
      return 0;
    }
    if (list->jobs().empty()) {
      std::cout << "No jobs (shoal job submit -- CMD starts one).\n";
      return 0;
    }
    printf("%-24s %-10s %-14s %9s  %s\n", "SUBMISSION ID", "STATUS", "NODE",
           "DURATION", "ENTRYPOINT");
    for (const auto& info : list->jobs()) {
      printf("%-24s %-10s %-14s %9s  %s\n", info.spec().submission_id().c_str(),
             JobStateName(info.state()), info.node_id().c_str(),
             JobDuration(info).c_str(), info.spec().entrypoint().c_str());
    }
    return 0;
  });
}

// ---- list, summary, logs ----

struct ListFlags {
  std::string address, token, temp_dir;
  StateQuery query;
};

// How a list, summary or logs command finds the head: as a job command.
JobFlags Connection(const ListFlags& f) {
  JobFlags connection;
  connection.address = f.address;
  connection.token = f.token;
  connection.temp_dir = f.temp_dir;
  return connection;
}

int List(const ListFlags& f, const std::string& what) {
  return WithJobHead(Connection(f), [&](rpc::HeadClient& head) {
    return what == "summary" ? SummarizeTasks(head, f.query)
                             : ListState(head, what, f.query);
  });
}

int Logs(const ListFlags& f, const LogsQuery& query) {
  return WithJobHead(Connection(f), [&](rpc::HeadClient& head) {
    if (!query.what.empty() && query.what[0] == "job") {
      if (query.what.size() < 2) {
        return UsageFail(
            "shoal logs job needs the job's id: shoal logs job ID");
      }
      return FollowJobLogs(head, query.what[1], query.follow);
    }
    return ShowLogs(head, query);
  });
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

struct SimNodesFlags {
  sim::SimNodesOptions options;
  std::string resources_json;
};

// `shoal dev sim-nodes`: runs the simulated nodes until SIGINT or SIGTERM,
// saying when they have all registered and, every 10 s, what their
// heartbeats cost.
int SimNodesCommand(SimNodesFlags f) {
  internal::SetLogComponent("sim-nodes");
  sigset_t stop = BlockStopSignals();
  if (f.options.token.empty()) f.options.token = EnvOr("SHOAL_TOKEN", "");
  if (f.options.token.empty()) {
    return UsageFail(
        "the simulated nodes need the cluster token: --token, --token-file "
        "or SHOAL_TOKEN");
  }
  if (!f.resources_json.empty()) {
    auto extra = ResourceSet::FromJson(f.resources_json);
    if (!extra.ok()) return UsageFail(std::string(extra.status().message()));
    f.options.extra_resources = extra->ToDoubles();
  }
  const int64_t start_us = MonotonicUs();
  auto sim = sim::SimNodes::Start(f.options);
  if (!sim.ok()) return Fail(std::string(sim.status().message()));
  std::cout << "started " << f.options.count << " simulated nodes against "
            << f.options.head_address << "; registering" << std::endl;
  bool all_registered = false;
  bool all_whole = false;
  int64_t last_report_us = MonotonicUs();
  sim::SimStats last = (*sim)->Stats();
  timespec tick = {0, 200'000'000};
  while (sigtimedwait(&stop, nullptr, &tick) < 0) {
    sim::SimStats s = (*sim)->Stats();
    if (!all_registered && s.registered == s.nodes) {
      all_registered = true;
      std::cout << s.registered << " simulated nodes registered in "
                << absl::StrFormat("%.2f", (MonotonicUs() - start_us) / 1e6)
                << " s" << std::endl;
    }
    if (all_registered && !all_whole && s.views_whole == s.nodes) {
      all_whole = true;
      std::cout << s.views_whole << " simulated nodes hold the whole view in "
                << absl::StrFormat("%.2f", (MonotonicUs() - start_us) / 1e6)
                << " s" << std::endl;
    }
    int64_t now = MonotonicUs();
    if (now - last_report_us < 10'000'000) continue;
    int64_t beats = s.heartbeats - last.heartbeats;
    double seconds = (now - last_report_us) / 1e6;
    std::cout << absl::StrFormat(
                     "%d/%d registered, %d views whole; %.0f heartbeats/s, "
                     "%d bytes per request, %d per reply; %d failed; %d "
                     "leases, %d tasks",
                     s.registered, s.nodes, s.views_whole, beats / seconds,
                     beats > 0 ? (s.heartbeat_request_bytes -
                                  last.heartbeat_request_bytes) /
                                     beats
                               : 0,
                     beats > 0 ? (s.heartbeat_reply_bytes -
                                  last.heartbeat_reply_bytes) /
                                     beats
                               : 0,
                     s.heartbeat_failures - last.heartbeat_failures,
                     s.leases_granted, s.tasks_run)
              << std::endl;
    last = s;
    last_report_us = now;
  }
  sim::SimStats s = (*sim)->Stats();
  std::cout << "stopping " << f.options.count << " simulated nodes ("
            << s.leases_granted << " leases granted, " << s.tasks_run
            << " tasks run)" << std::endl;
  (*sim)->Stop();
  return 0;
}

// Parses the command line into the flags bound to `app`. Returns nullopt
// to go on, else the exit status: 0 after --help, kUsageError after saying
// what is wrong with the command line. `take_programs` are the commands
// that run a program given after `--`.
std::optional<int> Parse(CLI::App& app, int argc, char** argv,
                         const std::vector<const CLI::App*>& take_programs) {
  if (std::optional<std::string> unknown = UnknownCommand(app, argc, argv)) {
    return UsageFail(*unknown);
  }
  // The commands read before the error: `shoal start --help` lists the
  // options that matter.
  auto command_path = [](const CLI::App* failed) {
    std::string command = failed->get_name();
    for (const CLI::App* at = failed; !at->get_subcommands().empty();) {
      at = at->get_subcommands().front();
      absl::StrAppend(&command, " ", at->get_name());
    }
    return command;
  };
  app.failure_message([&](const CLI::App* failed, const CLI::Error& e) {
    return absl::StrCat("shoal: ", e.what(), "\nRun `", command_path(failed),
                        " --help` for the options.\n");
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
      // CLI11 lists the words it did not expect, last first; say which
      // option was meant, or where the program should have started.
      const CLI::App* command = &app;
      while (!command->get_subcommands().empty()) {
        command = command->get_subcommands().front();
      }
      const std::string path = command_path(&app);
      const bool takes_program =
          std::find(take_programs.begin(), take_programs.end(), command) !=
          take_programs.end();
      if (std::optional<std::string> why = ExplainUnexpected(
              *command, path, std::vector<std::string>(argv + 1, argv + argc),
              takes_program)) {
        return UsageFail(
            absl::StrCat(*why, "\nRun `", path, " --help` for the options."));
      }
    }
    // --help and --help-all "fail" with exit code 0 after printing help.
    return app.exit(e) == 0 ? 0 : kUsageError;
  }
  return std::nullopt;
}

int Dispatch(int argc, char** argv) {
  CLI::App app{"Shoal: a cluster runtime for ML workloads", "shoal"};
  app.require_subcommand(1);
  rpc::TlsConfig tls;  // the parsed command's --tls-* flags

  StartFlags start;
  auto* start_cmd = app.add_subcommand(
      "start", "Start a head (--head) or join a cluster (--address)");
  start_cmd->add_flag("--head", start.head, "Start a new cluster's head here");
  start_cmd->add_option("--address", start.address, "Head to join, HOST:PORT")
      ->check(HostPort());
  start_cmd
      ->add_option("--port", start.port,
                   "Head port (default 6379; 0 picks a free port)")
      ->check(ListenPort());
  start_cmd->add_option("--node-ip-address", start.node_ip,
                        "Address to listen on (default: this host's primary)");
  start_cmd->add_option("--temp-dir", start.temp_dir,
                        "Parent of the session folder (default /tmp/shoal)");
  AddTokenOptions(start_cmd, &start.token,
                  "Cluster token (joining; for a head: the one it takes)");
  AddTlsOptions(start_cmd, &tls);
  start_cmd->add_option(
      "--storage", start.storage,
      "Where the head keeps the cluster's state: a SQLite file (default: "
      "head.db in the session folder), a Redis server "
      "(redis://[:PASSWORD@]HOST:PORT[/DB]: a head started anywhere with the "
      "same URL and --token takes the cluster over) or `memory` (none)");
  start_cmd
      ->add_option_function<std::string>(
          "--storage-file",
          [&start](const std::string& path) {
            absl::StatusOr<std::string> text = ReadFile(path);
            if (!text.ok()) {
              throw CLI::ValidationError(
                  "--storage-file", absl::StrCat("cannot read ", path, ": ",
                                                 text.status().message()));
            }
            start.storage = std::string(absl::StripAsciiWhitespace(*text));
            if (start.storage.empty()) {
              throw CLI::ValidationError("--storage-file", path + " is empty");
            }
          },
          "--storage, read from this file (keeps a Redis password out of "
          "`ps`)")
      ->excludes("--storage");
  start_cmd->add_option(
      "--storage-sync", start.storage_sync,
      "How durable the head's writes are before it answers: `normal` "
      "(default: they survive any crash of the head; a crash of its host may "
      "lose the last ones) or `full` (fsynced: they survive the host losing "
      "power too, at one fsync per write)");
  start_cmd->add_flag(
      "--discard-wal", start.discard_wal,
      "When the head's SQLite write-ahead log (head.db-wal) is damaged, set "
      "it aside (as head.db-wal.discarded-<UTC time>, with head.db-shm) and "
      "start from what head.db alone holds: the changes only the log held "
      "are lost. Without it a damaged log stops the head. An intact log is "
      "kept and used");
  start_cmd
      ->add_option("--num-cpus", start.advertised.num_cpus,
                   "CPUs to advertise (default: detected)")
      ->check(NonNegativeNumber());
  start_cmd
      ->add_option("--num-gpus", start.advertised.num_gpus,
                   "GPUs to advertise (default: detected)")
      ->check(NonNegativeNumber());
  start_cmd
      ->add_option("--num-tpus", start.advertised.num_tpus,
                   "TPU chips to advertise (default: detected)")
      ->check(NonNegativeNumber());
  start_cmd
      ->add_option("--object-store-memory", start.object_store_memory,
                   "Bytes of the node's shared-memory object store, at least "
                   "1 MiB, or 0 for none (default 30% of RAM, within "
                   "/dev/shm's free space)")
      ->check(StoreBytes());
  start_cmd->add_option("--resources", start.advertised.resources_json,
                        "Extra resources as JSON, e.g. '{\"accel_x\": 4}'");
  start_cmd->add_option("--labels", start.advertised.labels_json,
                        "Node labels as JSON, e.g. '{\"zone\": \"a\"}'");
  start_cmd->add_option("--node-id", start.node_id, "Node id (default random)");
  start_cmd
      ->add_option("--health-timeout-ms", start.health_timeout_ms,
                   "Head: mark a silent node dead after this long")
      ->check(AtLeast(1));
  start_cmd
      ->add_option("--heartbeat-ms", start.heartbeat_ms,
                   "Head: how often nodes report to it (default 500; 1000 "
                   "for clusters of thousands of nodes)")
      ->check(AtLeast(1));
  start_cmd
      ->add_option("--infeasible-grace-ms", start.infeasible_grace_ms,
                   "How long an impossible request waits for a node")
      ->check(AtLeast(0));
  start_cmd->add_flag("--block", start.block,
                      "Stay in the foreground; stop everything on Ctrl-C");
  start_cmd->add_option("--dashboard-host", start.dashboard_host,
                        "Head: the dashboard's address (default 127.0.0.1; "
                        "0.0.0.0 for every interface)");
  start_cmd
      ->add_option("--dashboard-port", start.dashboard_port,
                   "Head: the dashboard's port (default 8265, else any free "
                   "one; 0: any free one)")
      ->check(CLI::Range(0, 65535));
  start_cmd->add_option("--include-dashboard", start.include_dashboard,
                        "Head: serve the dashboard (default true)");
  start_cmd
      ->add_option("--metrics-port", start.metrics_port,
                   "This node's /metrics in the Prometheus format (0: any "
                   "free port; default none)")
      ->check(CLI::Range(0, 65535));
  start_cmd
      ->add_option("--head-timeout-s", start.head_timeout_s,
                   "Seconds the head may go without answering this node "
                   "(gone, or another cluster's) before the node stops: its "
                   "workers end, its object store is freed (default 60, as "
                   "in Ray; room for the head to restart)")
      ->envname("SHOAL_HEAD_TIMEOUT_S")
      ->check(AtLeast(1));

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
  status_cmd->add_option("--address", status_address, "Head, HOST:PORT")
      ->check(HostPort());
  AddTokenOptions(status_cmd, &status_token);
  AddTlsOptions(status_cmd, &tls);
  status_cmd->add_option("--temp-dir", status_temp_dir,
                         "Temp dir of a local head");
  status_cmd->add_option("--format", status_format, "text (default) or json")
      ->check(OneOf({"text", "json"}));
  status_cmd->add_flag("--verbose,-v", verbose,
                       "Per-node resources and labels");

  JobFlags job;
  std::string job_id;
  auto* job_cmd = app.add_subcommand(
      "job", "Submit a command as a job and watch it (shoal job --help)");
  job_cmd->require_subcommand(1);
  auto job_connection = [&](CLI::App* cmd) {
    cmd->add_option("--address", job.address, "Head, HOST:PORT")
        ->check(HostPort());
    AddTokenOptions(cmd, &job.token);
    AddTlsOptions(cmd, &tls);
    cmd->add_option("--temp-dir", job.temp_dir, "Temp dir of a local head");
  };
  auto* job_submit = job_cmd->add_subcommand(
      "submit", "Run a command on the cluster under supervision");
  job_connection(job_submit);
  job_submit->add_option("--submission-id", job.submission_id,
                         "The job's id (default: made up)");
  // One value each (--env A=1 --env B=2): a program without its `--`
  // must not become more values.
  job_submit->add_option("--env", job.env, "NAME=VALUE for the entrypoint")
      ->allow_extra_args(false);
  job_submit->add_option(
      "--working-dir", job.working_dir,
      "A folder sent with the job; the entrypoint runs in its copy");
  job_submit
      ->add_option("--entrypoint-num-cpus", job.entrypoint_num_cpus,
                   "CPUs the entrypoint's node must have")
      ->check(AtLeast(0));
  job_submit
      ->add_option("--entrypoint-num-gpus", job.entrypoint_num_gpus,
                   "GPUs the entrypoint's node must have")
      ->check(AtLeast(0));
  job_submit->add_option("--entrypoint-resources", job.entrypoint_resources,
                         "Resources the entrypoint's node must have (JSON)");
  job_submit->add_flag("--no-wait", job.no_wait,
                       "Print the id and return; do not follow the logs");
  job_submit->footer(
      "The entrypoint follows --, e.g. shoal job submit -- python3 train.py");
  auto job_with_id = [&](const char* name, const char* help) {
    CLI::App* cmd = job_cmd->add_subcommand(name, help);
    job_connection(cmd);
    cmd->add_option("id", job_id, "The job's submission id")->required();
    return cmd;
  };
  CLI::App* job_logs = job_with_id("logs", "Print a job's output");
  job_logs->add_flag("--follow,-f", job.follow,
                     "Keep printing until the job ends");
  CLI::App* job_status = job_with_id("status", "Show a job's state");
  job_status->add_option("--format", job.format, "text (default) or json")
      ->check(OneOf({"text", "json"}));
  CLI::App* job_stop = job_with_id(
      "stop", "SIGTERM, then SIGKILL, the job's whole process group");
  auto* job_list = job_cmd->add_subcommand("list", "List the jobs");
  job_connection(job_list);
  job_list->add_option("--format", job.format, "text (default) or json")
      ->check(OneOf({"text", "json"}));

  ListFlags list;
  std::string list_what;
  auto* list_cmd = app.add_subcommand(
      "list",
      "List nodes, jobs, actors, tasks, objects, placement-groups or gangs");
  list_cmd
      ->add_option("what", list_what,
                   "nodes, jobs, actors, tasks, objects, placement-groups, "
                   "gangs")
      ->required()
      ->check(OneOf({"nodes", "jobs", "actors", "tasks", "objects",
                     "placement-groups", "gangs"}));
  auto state_connection = [&tls](CLI::App* cmd, ListFlags& flags) {
    cmd->add_option("--address", flags.address, "Head, HOST:PORT")
        ->check(HostPort());
    AddTokenOptions(cmd, &flags.token);
    AddTlsOptions(cmd, &tls);
    cmd->add_option("--temp-dir", flags.temp_dir, "Temp dir of a local head");
  };
  auto state_query = [&](CLI::App* cmd, ListFlags& flags) {
    state_connection(cmd, flags);
    cmd->add_option("--format", flags.query.format, "table (default) or json")
        ->check(OneOf({"table", "json"}));
    cmd->add_option("--filter", flags.query.filters,
                    "KEY=VALUE, e.g. state=ALIVE (repeatable)");
  };
  state_query(list_cmd, list);
  list_cmd
      ->add_option("--limit", list.query.limit, "At most N rows (default 100)")
      ->check(AtLeast(1));

  ListFlags summary;
  std::string summary_what;
  auto* summary_cmd = app.add_subcommand(
      "summary", "Count the tasks by function and state (summary tasks)");
  summary_cmd->add_option("what", summary_what, "tasks")
      ->required()
      ->check(OneOf({"tasks"}));
  state_query(summary_cmd, summary);

  ListFlags logs;
  LogsQuery logs_query;
  auto* logs_cmd = app.add_subcommand(
      "logs",
      "List the nodes' logs, or print one: head, agent [NODE], worker ID, "
      "task ID, actor ID, gang ID RANK, job ID, or a log's name");
  logs_cmd->add_option("what", logs_query.what,
                       "head | agent [NODE] | worker ID | task ID | actor ID "
                       "| gang ID [RANK] | job ID | NAME");
  state_connection(logs_cmd, logs);
  logs_cmd->add_option("--node-id", logs_query.node_id,
                       "The node whose log to read (default: the head's, or "
                       "the node that has it)");
  logs_cmd->add_flag("-f,--follow", logs_query.follow,
                     "Keep printing what is added to the log");
  logs_cmd->add_option("--tail", logs_query.tail, "Only the last N lines")
      ->check(AtLeast(0));

  HeadFlags head;
  auto* head_cmd = app.add_subcommand("_head", "Run a head in the foreground");
  head_cmd->group("");
  head_cmd->add_option("--node-ip-address", head.host);
  head_cmd->add_option("--port", head.port)->check(ListenPort());
  head_cmd->add_option("--session-dir", head.session_dir)->required();
  head_cmd->add_option("--health-timeout-ms", head.health_timeout_ms);
  head_cmd->add_option("--heartbeat-ms", head.heartbeat_ms);
  head_cmd->add_option("--infeasible-grace-ms", head.infeasible_grace_ms);
  head_cmd->add_option("--dashboard-host", head.dashboard_host);
  head_cmd->add_option("--dashboard-port", head.dashboard_port);
  head_cmd->add_option("--dashboard-port-fallback",
                       head.dashboard_port_fallback);
  head_cmd->add_option("--storage", head.storage);
  head_cmd->add_option("--storage-file", head.storage_file)
      ->excludes("--storage");
  head_cmd->add_option("--storage-sync", head.storage_sync);
  head_cmd->add_flag("--discard-wal", head.discard_wal);
  head_cmd->add_option("--reattach-grace-ms", head.reattach_grace_ms);

  AgentFlags agent;
  auto* agent_cmd =
      app.add_subcommand("_agent", "Run a node agent in the foreground");
  agent_cmd->group("");
  agent_cmd->add_option("--address", agent.address)
      ->required()
      ->check(HostPort());
  agent_cmd->add_option("--node-ip-address", agent.node_ip);
  agent_cmd->add_option("--session-dir", agent.session_dir)->required();
  agent_cmd->add_option("--num-cpus", agent.advertised.num_cpus)
      ->check(NonNegativeNumber());
  agent_cmd->add_option("--num-gpus", agent.advertised.num_gpus)
      ->check(NonNegativeNumber());
  agent_cmd->add_option("--num-tpus", agent.advertised.num_tpus)
      ->check(NonNegativeNumber());
  agent_cmd->add_option("--object-store-memory", agent.object_store_memory)
      ->check(StoreBytes());
  agent_cmd->add_option("--resources", agent.advertised.resources_json);
  agent_cmd->add_option("--labels", agent.advertised.labels_json);
  agent_cmd->add_flag("--head-node", agent.head_node);
  agent_cmd->add_option("--node-id", agent.node_id);
  agent_cmd->add_option("--infeasible-grace-ms", agent.infeasible_grace_ms);
  agent_cmd->add_option("--metrics-port", agent.metrics_port);
  agent_cmd->add_option("--worker-idle-timeout-ms",
                        agent.worker_idle_timeout_ms);
  agent_cmd->add_option("--head-timeout-s", agent.head_timeout_s)
      ->check(AtLeast(1));

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
  launch_cmd
      ->add_option("--nodes", launch_opts.nodes,
                   "Without a slice: how many nodes (default all)")
      ->check(AtLeast(0));
  launch_cmd->add_flag("--local", launch_opts.local, "Only one node");
  launch_cmd
      ->add_option("--nproc-per-node", launch_opts.nproc_per_node,
                   "Hosts without accelerators: processes per host")
      ->check(AtLeast(1));
  launch_cmd
      ->add_option("--max-restarts", launch_opts.max_restarts,
                   "Restart the whole gang up to N times on failure")
      ->check(AtLeast(0));
  launch_cmd
      ->add_option("--reserve-timeout", launch_opts.reserve_timeout_s,
                   "Seconds to wait for the gang's hosts (default 60)")
      ->check(AtLeast(1));
  launch_cmd->add_option("--no-restart-on", no_restart_on,
                         "Exit codes that fail the gang at once, e.g. 2,3");
  launch_cmd->add_option("--address", launch_opts.address, "Head, HOST:PORT")
      ->check(HostPort());
  AddTokenOptions(launch_cmd, &launch_opts.token);
  AddTlsOptions(launch_cmd, &tls);
  launch_cmd->footer(
      "The command follows --, e.g. shoal launch --per-device -- python "
      "train.py");

  FakeTpuFlags fake;
  auto* dev_cmd = app.add_subcommand("dev", "Developer helpers");
  auto* fake_cmd = dev_cmd->add_subcommand(
      "fake-tpu", "Make a fake TPU host tree; prints the variables to export");
  fake_cmd->add_option("--type", fake.type, "Accelerator type, e.g. v5p-16")
      ->required();
  fake_cmd->add_option("--worker", fake.worker, "TPU worker id of this host")
      ->check(AtLeast(0));
  fake_cmd->add_option("--root", fake.root, "Directory to create it in")
      ->required();
  fake_cmd->add_option("--name", fake.name, "Slice name (TPU_NAME)");
  fake_cmd->add_option("--hostnames", fake.hostnames,
                       "TPU_WORKER_HOSTNAMES, comma separated");
  fake_cmd->add_flag("--vfio", fake.vfio, "Chips as /dev/vfio groups");
  SimNodesFlags sim_flags;
  auto* sim_cmd = dev_cmd->add_subcommand(
      "sim-nodes",
      "Run simulated node agents in this process (scale tests); until "
      "SIGINT/SIGTERM");
  sim_cmd->add_option("--count", sim_flags.options.count, "How many nodes")
      ->required()
      ->check(AtLeast(1));
  sim_cmd
      ->add_option("--address", sim_flags.options.head_address,
                   "Head, HOST:PORT")
      ->required()
      ->check(HostPort());
  AddTokenOptions(sim_cmd, &sim_flags.options.token);
  AddTlsOptions(sim_cmd, &tls);
  sim_cmd
      ->add_option("--num-cpus", sim_flags.options.num_cpus,
                   "CPUs of each node (default 8)")
      ->check(NonNegativeNumber());
  sim_cmd->add_option("--resources", sim_flags.resources_json,
                      "More resources of each node, JSON: '{\"sim\": 1}'");
  sim_cmd->add_option("--tpu-type", sim_flags.options.tpu_type,
                      "Make the nodes the hosts of simulated TPU slices of "
                      "this type, e.g. v5p-2048 (256 hosts per slice)");
  sim_cmd->add_option("--node-id-prefix", sim_flags.options.node_id_prefix,
                      "Node ids are PREFIX-<n> (default sim)");
  sim_cmd
      ->add_option("--heartbeat-ms", sim_flags.options.heartbeat_ms,
                   "Heartbeat interval (default: the head's)")
      ->check(AtLeast(1));
  sim_cmd->add_option("--node-ip", sim_flags.options.node_ip,
                      "Where the nodes listen (default 127.0.0.1)");
  dev_cmd->require_subcommand(1);

  // Everything after `--` is the command, verbatim (CLI11 would read a
  // "[...]" argument as a list).
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) != "--") continue;
    for (int j = i + 1; j < argc; ++j) launch_opts.argv.push_back(argv[j]);
    argc = i;
    break;
  }
  if (std::optional<int> done =
          Parse(app, argc, argv, {launch_cmd, job_submit})) {
    return *done;
  }
  if (fake_cmd->parsed()) return FakeTpu(fake);
  if (absl::Status st = ApplyTls(tls); !st.ok()) {
    return UsageFail(std::string(st.message()));
  }
  if (sim_cmd->parsed()) return SimNodesCommand(sim_flags);
  if (launch_cmd->parsed()) {
    if (per_device == launch_opts.per_host) {
      return UsageFail(
          "say --per-device (one process per device) or --per-host (one "
          "process per host)");
    }
    for (absl::string_view code :
         absl::StrSplit(no_restart_on, ',', absl::SkipEmpty())) {
      int value = 0;
      if (!absl::SimpleAtoi(code, &value) || value < 0 || value > 255) {
        return UsageFail(absl::StrCat(
            "--no-restart-on takes exit codes from 0 to 255, e.g. 2,3 (got \"",
            no_restart_on, "\")"));
      }
      launch_opts.no_restart_on.insert(value);
    }
    if (absl::Status st = CheckAddressEnvironment(launch_opts.address);
        !st.ok()) {
      return UsageFail(std::string(st.message()));
    }
    return launch::RunLaunch(launch_opts);
  }
  if (job_submit->parsed()) return JobSubmit(job, launch_opts.argv);
  if (!launch_opts.argv.empty()) {
    return UsageFail(
        "a command after -- is for shoal launch and shoal job "
        "submit only");
  }
  if (job_logs->parsed()) return JobLogs(job, job_id);
  if (job_status->parsed()) return JobStatus(job, job_id);
  if (job_stop->parsed()) return JobStop(job, job_id);
  if (job_list->parsed()) return JobList(job);
  if (list_cmd->parsed()) return List(list, list_what);
  if (summary_cmd->parsed()) return List(summary, "summary");
  if (logs_cmd->parsed()) return Logs(logs, logs_query);
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

}  // namespace

int Main(int argc, char** argv) {
  // What a command, head or agent writes (session folders, the head's
  // state, logs) is its user's alone; what they start gets the user's own
  // mask back (common/process.h).
  KeepNewFilesPrivate();
  // Bad input must end in a message, never in std::terminate.
  try {
    return Dispatch(argc, argv);
  } catch (const std::exception& e) {
    return Fail(absl::StrCat("unexpected error: ", e.what()));
  }
}

}  // namespace shoal::cli
