// `shoal start`: starts a new cluster's head and this host's node agent
// (--head), or joins this host to a cluster (--address), in the background
// or, with --block, in the foreground; takes up the session of a head that
// crashed; does nothing when what is asked for already runs.
#ifndef SHOAL_CLI_START_COMMAND_H_
#define SHOAL_CLI_START_COMMAND_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "cli/flag_checks.h"
#include "rpc/tls.h"

namespace CLI {
class App;
}  // namespace CLI

namespace shoal::cli {

struct Context;

namespace start {

inline constexpr int kDefaultDashboardPort = 8265;

struct Flags {
  bool head = false;
  std::string address;
  int port = 6379;
  std::string storage;  // the head's (--storage); "": the session's head.db
  std::string storage_sync;  // the head's (--storage-sync); "": normal
  bool discard_wal = false;  // the head's (--discard-wal)
  std::string node_ip;
  std::string temp_dir;
  std::string token;
  rpc::TlsConfig tls;
  AdvertisedFlags advertised;
  std::optional<int64_t> object_store_memory;
  std::optional<int64_t> memory;  // bytes for tasks; default: detected
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
  int64_t worker_idle_timeout_ms = 10000;
};

CLI::App* Register(CLI::App& parent, Flags& flags);

// What the command line asks that cannot be (both --head and --address, a
// node id the node would refuse, ...): a UsageError, before anything is
// made.
absl::Status CheckFlags(const Flags& flags);

// The exit status: 0 once everything runs (or already ran); with --block,
// when the agent ended by itself, its exit status (1 when it had none).
absl::StatusOr<int> Run(const Flags& flags, Context& ctx);

}  // namespace start
}  // namespace shoal::cli

#endif  // SHOAL_CLI_START_COMMAND_H_
