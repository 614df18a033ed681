// The hidden `_head` and `_agent` subcommands: a head or node agent in the
// foreground, as `shoal start` runs them (daemon_args.h), until SIGTERM or
// SIGINT.
#ifndef SHOAL_CLI_DAEMON_COMMANDS_H_
#define SHOAL_CLI_DAEMON_COMMANDS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "cli/flag_checks.h"

namespace CLI {
class App;
}  // namespace CLI

namespace shoal {
struct AgentOptions;
}  // namespace shoal

namespace shoal::cli {
namespace head_daemon {

struct Flags {
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

CLI::App* Register(CLI::App& parent, Flags& flags);
// Serves until stopped: 0, or the error that kept the head from starting.
absl::StatusOr<int> Run(const Flags& flags);

}  // namespace head_daemon

namespace agent_daemon {

struct Flags {
  std::string address;
  std::string node_ip;
  std::string session_dir;
  AdvertisedFlags advertised;
  std::optional<int64_t> object_store_memory;
  std::optional<int64_t> memory;  // bytes for tasks (`memory`)
  bool head_node = false;
  std::string node_id;
  int64_t infeasible_grace_ms = 5000;
  int64_t worker_idle_timeout_ms = 10000;
  int metrics_port = -1;  // -1: no /metrics
  int64_t head_timeout_s = 60;
};

CLI::App* Register(CLI::App& parent, Flags& flags);
// The node agent's options: the flags, SHOAL_TOKEN, and the accelerators
// detected under SHOAL_DEVICE_ROOT (default /).
absl::StatusOr<AgentOptions> BuildOptions(const Flags& flags);
// Serves until stopped (0) or until the node stops by itself, its head
// lost (1).
absl::StatusOr<int> Run(const Flags& flags);

}  // namespace agent_daemon
}  // namespace shoal::cli

#endif  // SHOAL_CLI_DAEMON_COMMANDS_H_
