// `shoal config`: every environment variable Shoal reads or sets for the
// processes it starts (common/environment.h's table), with its type,
// default and meaning, and the value this process sees.
#ifndef SHOAL_CLI_CONFIG_COMMAND_H_
#define SHOAL_CLI_CONFIG_COMMAND_H_

#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/environment.h"

namespace CLI {
class App;
}  // namespace CLI

namespace shoal::cli {

struct Context;

namespace config {

struct Flags {
  std::vector<std::string> names;  // empty: all of them
  bool json = false;
};

CLI::App* Register(CLI::App& parent, Flags& flags);
absl::StatusOr<int> Run(const Flags& flags, Context& ctx);

// What Run prints, with the values `lookup` gives (nullopt: unset).
using Lookup = std::function<std::optional<std::string>(env::Var)>;
absl::StatusOr<int> PrintTable(const Flags& flags, const Lookup& lookup,
                               std::ostream& out);

}  // namespace config
}  // namespace shoal::cli

#endif  // SHOAL_CLI_CONFIG_COMMAND_H_
