// `shoal launch`: a command run as a gang, one process per device or per
// host, on every host of a TPU slice or on N nodes (launch/launcher.h).
#ifndef SHOAL_CLI_LAUNCH_COMMAND_H_
#define SHOAL_CLI_LAUNCH_COMMAND_H_

#include <string>

#include "absl/status/statusor.h"
#include "launch/launcher.h"
#include "rpc/tls.h"

namespace CLI {
class App;
}  // namespace CLI

namespace shoal::cli::launch_command {

struct Flags {
  launch::LaunchOptions options;  // argv: the words after `--`
  bool per_device = false;
  std::string no_restart_on;  // exit codes, "2,3"
  rpc::TlsConfig tls;
};

CLI::App* Register(CLI::App& parent, Flags& flags);
// The launcher's options from the flags; a UsageError for what the command
// line asks that cannot be.
absl::StatusOr<launch::LaunchOptions> Options(const Flags& flags);
// The gang's exit status, as the launcher gives it.
absl::StatusOr<int> Run(const Flags& flags);

}  // namespace shoal::cli::launch_command

#endif  // SHOAL_CLI_LAUNCH_COMMAND_H_
