// `shoal logs`: lists the nodes' logs, or prints one found by what wrote
// it (head, agent, worker, task, actor, gang rank, job) or by its name,
// reading it through the head from whichever node has it.
#ifndef SHOAL_CLI_LOGS_COMMAND_H_
#define SHOAL_CLI_LOGS_COMMAND_H_

#include <iosfwd>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/connection.h"

namespace CLI {
class App;
}  // namespace CLI

namespace shoal::cli {

class ClusterApi;
struct Context;

namespace logs {

struct Flags {
  ConnectionFlags connection;
  // Empty: list the logs of every node. Else one of: head; agent [NODE];
  // worker ID; task ID; actor ID; gang ID [RANK]; job ID; or a log's file
  // name.
  std::vector<std::string> what;
  std::string node_id;  // the node to look on (default: the head's, or
                        // wherever the log is found)
  bool follow = false;
  int tail = -1;  // print only the last N lines (-1: all)
};

CLI::App* Register(CLI::App& parent, Flags& flags);
absl::StatusOr<int> Run(const Flags& flags, Context& ctx);

// What Run does once connected.
absl::StatusOr<int> ShowLogs(ClusterApi& head, const Flags& flags,
                             std::ostream& out, std::ostream& err);

}  // namespace logs
}  // namespace shoal::cli

#endif  // SHOAL_CLI_LOGS_COMMAND_H_
