// `shoal list` and `shoal summary tasks`: the cluster's state as the head
// keeps it (nodes, jobs, actors, placement groups, gangs, task records) or
// asks the nodes' agents for (objects), as a table or JSON.
#ifndef SHOAL_CLI_STATE_COMMANDS_H_
#define SHOAL_CLI_STATE_COMMANDS_H_

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

struct StateQuery {
  std::string format = "table";      // or json
  std::vector<std::string> filters;  // KEY=VALUE
  int limit = 100;
};

// `what`: nodes, jobs, actors, tasks, objects, placement-groups, gangs.
absl::StatusOr<int> ListState(ClusterApi& head, const std::string& what,
                              const StateQuery& query, std::ostream& out);
absl::StatusOr<int> SummarizeTasks(ClusterApi& head, const StateQuery& query,
                                   std::ostream& out);

// A failed request about the cluster's state: the head's InvalidArgument
// (a filter it cannot apply) is a usage error; anything else says what
// could not be done ("cannot list tasks: ...").
absl::Status StateError(const std::string& what, const absl::Status& status);

namespace list {

struct Flags {
  ConnectionFlags connection;
  std::string what;  // nodes, jobs, actors, tasks, objects, ...
  StateQuery query;
};
CLI::App* Register(CLI::App& parent, Flags& flags);
absl::StatusOr<int> Run(const Flags& flags, Context& ctx);

}  // namespace list

namespace summary {

struct Flags {
  ConnectionFlags connection;
  std::string what;  // tasks
  StateQuery query;
};
CLI::App* Register(CLI::App& parent, Flags& flags);
absl::StatusOr<int> Run(const Flags& flags, Context& ctx);

}  // namespace summary
}  // namespace shoal::cli

#endif  // SHOAL_CLI_STATE_COMMANDS_H_
