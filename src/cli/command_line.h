// Reading `shoal`'s command line with CLI11, and what is said when it
// cannot be read: the nearest command for a misspelled one, what a command
// that needs one more word is missing, where a program should have started.
#ifndef SHOAL_CLI_COMMAND_LINE_H_
#define SHOAL_CLI_COMMAND_LINE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace CLI {
class App;
}  // namespace CLI

namespace shoal::cli {

// The names of `app`'s subcommands that --help lists.
std::vector<std::string> VisibleCommands(CLI::App& app);

// The error for a command line whose command is not one of `app`'s (or of
// a subcommand's that needs one, as `dev` does), naming the closest visible
// command; nullopt when the commands are known (CLI11 judges the rest).
std::optional<std::string> UnknownCommand(CLI::App& app, int argc, char** argv);

// Parses the command line (cut before any `--`) into the flags bound to
// `app`. Returns nullopt to go on, else how the command ends: 0 after
// --help, kUsageError after CLI11 said what is wrong, or a UsageError.
// `take_programs` are the commands that run a program given after `--`.
std::optional<absl::StatusOr<int>> Parse(
    CLI::App& app, int argc, char** argv,
    const std::vector<const CLI::App*>& take_programs);

}  // namespace shoal::cli

#endif  // SHOAL_CLI_COMMAND_LINE_H_
