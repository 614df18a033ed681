// `shoal dev ...`: developer helpers. `fake-tpu` makes a fake TPU host's
// device tree; `sim-nodes` runs simulated node agents in this process, for
// scale tests of a head.
#ifndef SHOAL_CLI_DEV_COMMANDS_H_
#define SHOAL_CLI_DEV_COMMANDS_H_

#include <string>

#include "absl/status/statusor.h"
#include "rpc/tls.h"
#include "sim/sim_nodes.h"

namespace CLI {
class App;
}  // namespace CLI

namespace shoal::cli {

struct Context;

// `shoal dev`, which holds the helpers.
CLI::App* RegisterDevGroup(CLI::App& parent);

namespace fake_tpu {

struct Flags {
  std::string type;
  int worker = 0;
  std::string root;
  std::string name = "my-tpu";
  std::string hostnames;  // comma separated
  bool vfio = false;
  // Every host of several slices: "v5p-16:2,v6e-8" (type[:count]).
  std::string slices;
};
CLI::App* Register(CLI::App& dev, Flags& flags);
// Prints `export NAME=VALUE` lines for the host made; with --slices, makes
// every host of each slice under root/<slice>/host<i>, writes each host's
// variables to root/<slice>-<i>.env and prints those files' paths.
absl::StatusOr<int> Run(const Flags& flags, Context& ctx);

}  // namespace fake_tpu

namespace sim_nodes {

struct Flags {
  sim::SimNodesOptions options;
  std::string resources_json;
  rpc::TlsConfig tls;
};
CLI::App* Register(CLI::App& dev, Flags& flags);
// Runs the nodes until SIGINT or SIGTERM, saying when they have all
// registered and, every 10 s, what their heartbeats cost.
absl::StatusOr<int> Run(const Flags& flags, Context& ctx);

}  // namespace sim_nodes
}  // namespace shoal::cli

#endif  // SHOAL_CLI_DEV_COMMANDS_H_
