#include "cli/dev_commands.h"

#include <signal.h>

#include <CLI/CLI.hpp>
#include <map>
#include <ostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "accel/fake_host.h"
#include "accel/tpu.h"
#include "cli/connection.h"
#include "cli/context.h"
#include "cli/exit_status.h"
#include "cli/flag_checks.h"
#include "common/clock.h"
#include "common/environment.h"
#include "common/files.h"
#include "common/logging.h"
#include "scheduling/resource_set.h"

namespace shoal::cli {

CLI::App* RegisterDevGroup(CLI::App& parent) {
  CLI::App* dev = parent.add_subcommand("dev", "Developer helpers");
  dev->require_subcommand(1);
  return dev;
}

namespace fake_tpu {

CLI::App* Register(CLI::App& dev, Flags& f) {
  CLI::App* cmd = dev.add_subcommand(
      "fake-tpu", "Make a fake TPU host tree; prints the variables to export");
  cmd->add_option("--type", f.type, "Accelerator type, e.g. v5p-16");
  cmd->add_option("--slices", f.slices,
                  "Every host of several slices instead of one host: "
                  "TYPE[:COUNT],..., e.g. v5p-16:2,v6e-8");
  cmd->add_option("--worker", f.worker, "TPU worker id of this host")
      ->check(AtLeast(0));
  cmd->add_option("--root", f.root, "Directory to create it in")->required();
  cmd->add_option("--name", f.name, "Slice name (TPU_NAME)");
  cmd->add_option("--hostnames", f.hostnames,
                  "TPU_WORKER_HOSTNAMES, comma separated");
  cmd->add_flag("--vfio", f.vfio, "Chips as /dev/vfio groups");
  return cmd;
}

namespace {

// --slices: every host of each slice, with an env file per host.
absl::StatusOr<int> MakeSlices(const Flags& f, Context& ctx) {
  for (absl::string_view part :
       absl::StrSplit(f.slices, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> type_count =
        absl::StrSplit(part, absl::MaxSplits(':', 1));
    int count = 1;
    if (!type_count.second.empty() &&
        (!absl::SimpleAtoi(type_count.second, &count) || count < 1 ||
         count > 1000)) {
      return UsageError(absl::StrCat("--slices ", f.slices, ": \"",
                                     type_count.second,
                                     "\" is not a count of slices (1..1000)"));
    }
    auto type = accel::ParseTpuAcceleratorType(type_count.first);
    if (!type.ok()) return UsageError(type.status().message());
    for (int k = 0; k < count; ++k) {
      const std::string name = absl::StrCat(type->name, "-", k);
      for (int worker = 0; worker < type->hosts; ++worker) {
        accel::FakeTpuHostOptions options;
        options.accelerator_type = type->name;
        options.worker_id = worker;
        options.slice_name = name;
        options.use_vfio = f.vfio;
        const std::string host_root =
            absl::StrCat(f.root, "/", name, "/host", worker);
        std::map<std::string, std::string> env;
        absl::Status st = accel::MakeFakeTpuHost(host_root, options, &env);
        if (!st.ok()) return st;
        std::string text = "export SHOAL_DEVICE_ROOT=" + host_root + "\n";
        for (const auto& [k2, v] : env) {
          absl::StrAppend(&text, "export ", k2, "=", v, "\n");
        }
        const std::string file =
            absl::StrCat(f.root, "/", name, "-", worker, ".env");
        st = WriteFile(file, text, 0600);
        if (!st.ok()) return st;
        *ctx.out << file << "\n";
      }
      *ctx.err << "Made slice " << name << " (" << type->name << ", "
               << type->hosts << " host(s) of " << type->chips_per_host
               << " chips)\n";
    }
  }
  *ctx.err << "Start a node agent per host with its file's variables set, "
              "e.g. (. FILE; shoal start --address=...)\n";
  return 0;
}

}  // namespace

absl::StatusOr<int> Run(const Flags& f, Context& ctx) {
  if (!f.slices.empty()) {
    if (!f.type.empty()) {
      return UsageError("say --type (one host) or --slices (whole slices)");
    }
    return MakeSlices(f, ctx);
  }
  if (f.type.empty()) {
    return UsageError("say --type TYPE (one host) or --slices TYPE[:N],...");
  }
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
  if (!st.ok()) return absl::Status(st.code(), st.message());
  *ctx.err << "Made a fake TPU host (" << f.type << ", worker " << f.worker
           << ") under " << f.root
           << ". Start a node agent on it with these variables set:\n";
  *ctx.out << "export SHOAL_DEVICE_ROOT=" << f.root << "\n";
  for (const auto& [k, v] : env) *ctx.out << "export " << k << "=" << v << "\n";
  return 0;
}

}  // namespace fake_tpu

namespace sim_nodes {
namespace {

// Every 10 s: what the nodes' heartbeats cost since `last`.
std::string HeartbeatReport(const sim::SimStats& s, const sim::SimStats& last,
                            double seconds) {
  int64_t beats = s.heartbeats - last.heartbeats;
  return absl::StrFormat(
      "%d/%d registered, %d views whole; %.0f heartbeats/s, "
      "%d bytes per request, %d per reply; %d failed; %d "
      "leases, %d tasks",
      s.registered, s.nodes, s.views_whole, beats / seconds,
      beats > 0
          ? (s.heartbeat_request_bytes - last.heartbeat_request_bytes) / beats
          : 0,
      beats > 0 ? (s.heartbeat_reply_bytes - last.heartbeat_reply_bytes) / beats
                : 0,
      s.heartbeat_failures - last.heartbeat_failures, s.leases_granted,
      s.tasks_run);
}

}  // namespace

CLI::App* Register(CLI::App& dev, Flags& f) {
  sim::SimNodesOptions& o = f.options;
  CLI::App* cmd = dev.add_subcommand(
      "sim-nodes",
      "Run simulated node agents in this process (scale tests); until "
      "SIGINT/SIGTERM");
  cmd->add_option("--count", o.count, "How many nodes")
      ->required()
      ->check(AtLeast(1));
  cmd->add_option("--address", o.head_address, "Head, HOST:PORT")
      ->required()
      ->check(HostPort());
  AddTokenOptions(cmd, &o.token);
  AddTlsOptions(cmd, &f.tls);
  cmd->add_option("--num-cpus", o.num_cpus, "CPUs of each node (default 8)")
      ->check(NonNegativeNumber());
  cmd->add_option("--resources", f.resources_json,
                  "More resources of each node, JSON: '{\"sim\": 1}'");
  cmd->add_option("--tpu-type", o.tpu_type,
                  "Make the nodes the hosts of simulated TPU slices of "
                  "this type, e.g. v5p-2048 (256 hosts per slice)");
  cmd->add_option("--node-id-prefix", o.node_id_prefix,
                  "Node ids are PREFIX-<n> (default sim)");
  cmd->add_option("--heartbeat-ms", o.heartbeat_ms,
                  "Heartbeat interval (default: the head's)")
      ->check(AtLeast(1));
  cmd->add_option("--node-ip", o.node_ip,
                  "Where the nodes listen (default 127.0.0.1)");
  return cmd;
}

absl::StatusOr<int> Run(const Flags& flags, Context& ctx) {
  internal::SetLogComponent("sim-nodes");
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  sim::SimNodesOptions options = flags.options;
  if (options.token.empty()) options.token = env::Get(env::Var::kToken);
  if (options.token.empty()) {
    return UsageError(
        "the simulated nodes need the cluster token: --token, --token-file "
        "or SHOAL_TOKEN");
  }
  if (!flags.resources_json.empty()) {
    auto extra = ResourceSet::FromJson(flags.resources_json);
    if (!extra.ok()) return UsageError(extra.status().message());
    options.extra_resources = extra->ToDoubles();
  }
  const int64_t start_us = MonotonicUs();
  auto since_start = [&] {
    return absl::StrFormat("%.2f", (MonotonicUs() - start_us) / 1e6);
  };
  auto sim = sim::SimNodes::Start(options);
  if (!sim.ok()) return absl::UnavailableError(sim.status().message());
  std::ostream& out = *ctx.out;
  out << "started " << options.count << " simulated nodes against "
      << options.head_address << "; registering" << std::endl;
  bool all_registered = false;
  bool all_whole = false;
  int64_t last_report_us = MonotonicUs();
  sim::SimStats last = (*sim)->Stats();
  timespec tick = {0, 200'000'000};
  while (sigtimedwait(&stop, nullptr, &tick) < 0) {
    sim::SimStats s = (*sim)->Stats();
    if (!all_registered && s.registered == s.nodes) {
      all_registered = true;
      out << s.registered << " simulated nodes registered in " << since_start()
          << " s" << std::endl;
    }
    if (all_registered && !all_whole && s.views_whole == s.nodes) {
      all_whole = true;
      out << s.views_whole << " simulated nodes hold the whole view in "
          << since_start() << " s" << std::endl;
    }
    int64_t now = MonotonicUs();
    if (now - last_report_us < 10'000'000) continue;
    out << HeartbeatReport(s, last, (now - last_report_us) / 1e6) << std::endl;
    last = s;
    last_report_us = now;
  }
  sim::SimStats s = (*sim)->Stats();
  out << "stopping " << options.count << " simulated nodes ("
      << s.leases_granted << " leases granted, " << s.tasks_run << " tasks run)"
      << std::endl;
  (*sim)->Stop();
  return 0;
}

}  // namespace sim_nodes
}  // namespace shoal::cli
