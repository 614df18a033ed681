// The `shoal` command: one subcommand per file (start_command.h,
// stop_command.h, status_command.h, job_commands.h, state_commands.h,
// logs_command.h, launch_command.h, dev_commands.h, and the hidden `_head`
// and `_agent` in daemon_commands.h), each with its flags, its Register
// and its Run; Main reads the command line and runs the one it names.
#ifndef SHOAL_CLI_CLI_H_
#define SHOAL_CLI_CLI_H_

namespace shoal::cli {

struct Context;

// Runs the command line with the real context (stdout, this host, real
// connections).
int Main(int argc, char** argv);
// The same with `ctx`: what unit tests run.
int Main(int argc, char** argv, Context& ctx);

}  // namespace shoal::cli

#endif  // SHOAL_CLI_CLI_H_
