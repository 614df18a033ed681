// The `shoal` command: start, stop, status, and the hidden `_head` and
// `_agent` subcommands that run a head or node agent in the foreground.
#ifndef SHOAL_CLI_CLI_H_
#define SHOAL_CLI_CLI_H_

namespace shoal::cli {

int Main(int argc, char** argv);

}  // namespace shoal::cli

#endif  // SHOAL_CLI_CLI_H_
