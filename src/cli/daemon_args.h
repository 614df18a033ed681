// The command lines `shoal start` runs its head and node agent with (the
// hidden `_head` and `_agent` subcommands of the same executable). Pure:
// what they hold is decided by the flags given and the session alone.
#ifndef SHOAL_CLI_DAEMON_ARGS_H_
#define SHOAL_CLI_DAEMON_ARGS_H_

#include <string>
#include <vector>

#include "cli/start_command.h"

namespace shoal::cli {

// `self _agent ...` for a node agent joining `head_address` from
// `session_dir`; a head's own node (--head) says so.
std::vector<std::string> AgentArgs(const start::Flags& f,
                                   const std::string& self,
                                   const std::string& head_address,
                                   const std::string& session_dir);

// Where a head listens and keeps its files.
struct HeadPlace {
  std::string host;  // its --node-ip-address
  int port = 0;      // 0: any free port
  std::string session_dir;
};

// `self _head ...`, without its storage flags (StartHead adds those; the
// storage itself goes in a file).
std::vector<std::string> HeadArgs(const start::Flags& f,
                                  const std::string& self,
                                  const HeadPlace& place);

}  // namespace shoal::cli

#endif  // SHOAL_CLI_DAEMON_ARGS_H_
