// `shoal stop`: stops the heads and node agents that `shoal start` started
// from a temp dir, agents first.
#ifndef SHOAL_CLI_STOP_COMMAND_H_
#define SHOAL_CLI_STOP_COMMAND_H_

#include <string>

#include "absl/status/statusor.h"

namespace CLI {
class App;
}  // namespace CLI

namespace shoal::cli {

struct Context;

namespace stop {

struct Flags {
  std::string temp_dir;  // "": the default temp dir
  bool force = false;    // SIGKILL at once
};

CLI::App* Register(CLI::App& parent, Flags& flags);
absl::StatusOr<int> Run(const Flags& flags, Context& ctx);

}  // namespace stop
}  // namespace shoal::cli

#endif  // SHOAL_CLI_STOP_COMMAND_H_
