// `shoal list` and `shoal summary`.
#include <CLI/CLI.hpp>

#include "cli/cluster_api.h"
#include "cli/context.h"
#include "cli/flag_checks.h"
#include "cli/state_commands.h"
#include "common/status_macros.h"

namespace shoal::cli {
namespace {

// --format and --filter, after the connection's options.
void AddQueryOptions(CLI::App* cmd, ConnectionFlags* connection,
                     StateQuery* query) {
  AddConnectionOptions(cmd, connection);
  cmd->add_option("--format", query->format, "table (default) or json")
      ->check(OneOf({"table", "json"}));
  cmd->add_option("--filter", query->filters,
                  "KEY=VALUE, e.g. state=ALIVE (repeatable)");
}

}  // namespace

namespace list {

CLI::App* Register(CLI::App& parent, Flags& f) {
  CLI::App* cmd = parent.add_subcommand(
      "list",
      "List nodes, jobs, actors, tasks, objects, placement-groups or gangs");
  cmd->add_option("what", f.what,
                  "nodes, jobs, actors, tasks, objects, placement-groups, "
                  "gangs")
      ->required()
      ->check(OneOf({"nodes", "jobs", "actors", "tasks", "objects",
                     "placement-groups", "gangs"}));
  AddQueryOptions(cmd, &f.connection, &f.query);
  cmd->add_option("--limit", f.query.limit, "At most N rows (default 100)")
      ->check(AtLeast(1));
  return cmd;
}

absl::StatusOr<int> Run(const Flags& f, Context& ctx) {
  ASSIGN_OR_RETURN(auto head, ConnectToCluster(f.connection, ctx));
  return ListState(*head, f.what, f.query, *ctx.out);
}

}  // namespace list

namespace summary {

CLI::App* Register(CLI::App& parent, Flags& f) {
  CLI::App* cmd = parent.add_subcommand(
      "summary", "Count the tasks by function and state (summary tasks)");
  cmd->add_option("what", f.what, "tasks")->required()->check(OneOf({"tasks"}));
  AddQueryOptions(cmd, &f.connection, &f.query);
  return cmd;
}

absl::StatusOr<int> Run(const Flags& f, Context& ctx) {
  ASSIGN_OR_RETURN(auto head, ConnectToCluster(f.connection, ctx));
  return SummarizeTasks(*head, f.query, *ctx.out);
}

}  // namespace summary
}  // namespace shoal::cli
