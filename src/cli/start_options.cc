// `shoal start`'s flags.
#include <CLI/CLI.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "cli/connection.h"
#include "cli/start_command.h"
#include "common/environment.h"
#include "common/files.h"

namespace shoal::cli::start {
namespace {

// Where the head keeps the cluster's state, and how.
void AddStorageOptions(CLI::App* cmd, Flags& f) {
  cmd->add_option(
      "--storage", f.storage,
      "Where the head keeps the cluster's state: a SQLite file (default: "
      "head.db in the session folder), a Redis server "
      "(redis://[:PASSWORD@]HOST:PORT[/DB]: a head started anywhere with the "
      "same URL and --token takes the cluster over) or `memory` (none)");
  cmd->add_option_function<std::string>(
         "--storage-file",
         [&f](const std::string& path) {
           absl::StatusOr<std::string> text = ReadFile(path);
           if (!text.ok()) {
             throw CLI::ValidationError("--storage-file",
                                        absl::StrCat("cannot read ", path, ": ",
                                                     text.status().message()));
           }
           f.storage = std::string(absl::StripAsciiWhitespace(*text));
           if (f.storage.empty()) {
             throw CLI::ValidationError("--storage-file", path + " is empty");
           }
         },
         "--storage, read from this file (keeps a Redis password out of "
         "`ps`)")
      ->excludes("--storage");
  cmd->add_option(
      "--storage-sync", f.storage_sync,
      "How durable the head's writes are before it answers: `normal` "
      "(default: they survive any crash of the head; a crash of its host may "
      "lose the last ones) or `full` (fsynced: they survive the host losing "
      "power too, at one fsync per write)");
  cmd->add_flag(
      "--discard-wal", f.discard_wal,
      "When the head's SQLite write-ahead log (head.db-wal) is damaged, set "
      "it aside (as head.db-wal.discarded-<UTC time>, with head.db-shm) and "
      "start from what head.db alone holds: the changes only the log held "
      "are lost. Without it a damaged log stops the head. An intact log is "
      "kept and used");
}

// What the node advertises and is called.
void AddNodeOptions(CLI::App* cmd, Flags& f) {
  cmd->add_option("--num-cpus", f.advertised.num_cpus,
                  "CPUs to advertise (default: detected)")
      ->check(NonNegativeNumber());
  cmd->add_option("--num-gpus", f.advertised.num_gpus,
                  "GPUs to advertise (default: detected)")
      ->check(NonNegativeNumber());
  cmd->add_option("--num-tpus", f.advertised.num_tpus,
                  "TPU chips to advertise (default: detected)")
      ->check(NonNegativeNumber());
  cmd->add_option("--object-store-memory", f.object_store_memory,
                  "Bytes of the node's shared-memory object store, at least "
                  "1 MiB, or 0 for none (default 30% of RAM, within "
                  "/dev/shm's free space)")
      ->check(StoreBytes());
  cmd->add_option("--memory", f.memory,
                  "Bytes of memory tasks and actors may reserve (the "
                  "`memory` resource; default: the host's, less the "
                  "object store)")
      ->check(AtLeast(0));
  cmd->add_option("--resources", f.advertised.resources_json,
                  "Extra resources as JSON, e.g. '{\"accel_x\": 4}'");
  cmd->add_option("--labels", f.advertised.labels_json,
                  "Node labels as JSON, e.g. '{\"zone\": \"a\"}'");
  cmd->add_option("--node-id", f.node_id, "Node id (default random)");
}

// How the head watches nodes, how long requests wait, the dashboard and
// metrics ports.
void AddTimingAndPortOptions(CLI::App* cmd, Flags& f) {
  cmd->add_option("--health-timeout-ms", f.health_timeout_ms,
                  "Head: mark a silent node dead after this long")
      ->check(AtLeast(1));
  cmd->add_option("--heartbeat-ms", f.heartbeat_ms,
                  "Head: how often nodes report to it (default 500; 1000 "
                  "for clusters of thousands of nodes)")
      ->check(AtLeast(1));
  cmd->add_option("--infeasible-grace-ms", f.infeasible_grace_ms,
                  "How long an impossible request waits for a node")
      ->check(AtLeast(0));
  cmd->add_option("--worker-idle-timeout-ms", f.worker_idle_timeout_ms,
                  "End a worker that waits idle this long (default 10000); "
                  "one that owns objects others borrow is kept")
      ->check(AtLeast(1));
  cmd->add_flag("--block", f.block,
                "Stay in the foreground; stop everything on Ctrl-C");
  cmd->add_option("--dashboard-host", f.dashboard_host,
                  "Head: the dashboard's address (default 127.0.0.1; "
                  "0.0.0.0 for every interface)");
  cmd->add_option("--dashboard-port", f.dashboard_port,
                  "Head: the dashboard's port (default 8265, else any free "
                  "one; 0: any free one)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--include-dashboard", f.include_dashboard,
                  "Head: serve the dashboard (default true)");
  cmd->add_option("--metrics-port", f.metrics_port,
                  "This node's /metrics in the Prometheus format (0: any "
                  "free port; default none)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--head-timeout-s", f.head_timeout_s,
                  "Seconds the head may go without answering this node "
                  "(gone, or another cluster's) before the node stops: its "
                  "workers end, its object store is freed (default 60, as "
                  "in Ray; room for the head to restart)")
      ->envname(env::Name(env::Var::kHeadTimeoutS))
      ->check(AtLeast(1));
}

}  // namespace

CLI::App* Register(CLI::App& parent, Flags& f) {
  CLI::App* cmd = parent.add_subcommand(
      "start", "Start a head (--head) or join a cluster (--address)");
  cmd->add_flag("--head", f.head, "Start a new cluster's head here");
  cmd->add_option("--address", f.address, "Head to join, HOST:PORT")
      ->check(HostPort());
  cmd->add_option("--port", f.port,
                  "Head port (default 6379; 0 picks a free port)")
      ->check(ListenPort());
  cmd->add_option("--node-ip-address", f.node_ip,
                  "Address to listen on (default: this host's primary)");
  cmd->add_option("--temp-dir", f.temp_dir,
                  "Parent of the session folder (default /tmp/shoal)");
  AddTokenOptions(cmd, &f.token,
                  "Cluster token (joining; for a head: the one it takes)");
  AddTlsOptions(cmd, &f.tls);
  AddStorageOptions(cmd, f);
  AddNodeOptions(cmd, f);
  AddTimingAndPortOptions(cmd, f);
  return cmd;
}

}  // namespace shoal::cli::start
