// `shoal status`: the cluster's nodes, resources, placement groups, actors,
// leases and demands, as text (Ray's layout) or JSON.
#ifndef SHOAL_CLI_STATUS_COMMAND_H_
#define SHOAL_CLI_STATUS_COMMAND_H_

#include <string>

#include "absl/status/statusor.h"
#include "cli/connection.h"

namespace CLI {
class App;
}  // namespace CLI

namespace shoal::cli {

struct Context;

namespace status {

struct Flags {
  ConnectionFlags connection;
  std::string format = "text";  // or json
  bool verbose = false;         // per-node resources and labels
};

CLI::App* Register(CLI::App& parent, Flags& flags);
absl::StatusOr<int> Run(const Flags& flags, Context& ctx);

}  // namespace status
}  // namespace shoal::cli

#endif  // SHOAL_CLI_STATUS_COMMAND_H_
