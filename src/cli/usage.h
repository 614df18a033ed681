// What `shoal` says about a command line it cannot take: the nearest name
// for a misspelled command, option or value, and where a command meant for
// `shoal launch` or `shoal job submit` should have started.
//
// Pure functions of the command line and the CLI11 description of the
// commands; nothing here prints.
#ifndef SHOAL_CLI_USAGE_H_
#define SHOAL_CLI_USAGE_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace shoal::cli {

// Optimal string alignment distance: inserting, deleting or changing a
// letter, or swapping two neighbours, each count 1 ("stauts" is 1 from
// "status").
size_t EditDistance(std::string_view a, std::string_view b);

// The name in `names` nearest to `word`, when it is near enough to be a
// typo of it ("xyz" is no typo of "stop"); nullopt otherwise.
std::optional<std::string> ClosestName(std::string_view word,
                                       const std::vector<std::string>& names);

// Explains why CLI11 found words it did not expect on the command line
// `args` (argv without the program's name, cut before any `--`), parsed as
// far as `command` (the deepest subcommand read): an unknown option, with
// the nearest option of `command` ("unknown option --adress; did you mean
// --address?"), or, when `command` takes a program after `--`, a program
// given without it (`shoal launch --per-host echo hi`). nullopt when it is
// neither; `path` is how the user names `command` ("shoal launch").
std::optional<std::string> ExplainUnexpected(
    const CLI::App& command, const std::string& path,
    const std::vector<std::string>& args, bool takes_program);

}  // namespace shoal::cli

#endif  // SHOAL_CLI_USAGE_H_
