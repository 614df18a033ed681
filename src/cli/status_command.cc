#include "cli/status_command.h"

#include <CLI/CLI.hpp>
#include <ostream>

#include "absl/strings/str_cat.h"
#include "cli/cluster_api.h"
#include "cli/context.h"
#include "cli/flag_checks.h"
#include "common/status_macros.h"
#include "presentation/status_format.h"

namespace shoal::cli::status {

// How long `shoal status` waits for the head.
constexpr int64_t kStatusTimeoutMs = 5000;

CLI::App* Register(CLI::App& parent, Flags& flags) {
  CLI::App* cmd =
      parent.add_subcommand("status", "Show nodes, resources, demands");
  AddConnectionOptions(cmd, &flags.connection);
  cmd->add_option("--format", flags.format, "text (default) or json")
      ->check(OneOf({"text", "json"}));
  cmd->add_flag("--verbose,-v", flags.verbose, "Per-node resources and labels");
  return cmd;
}

absl::StatusOr<int> Run(const Flags& flags, Context& ctx) {
  ASSIGN_OR_RETURN(ClusterAddress cluster, ResolveCluster(flags.connection));
  absl::StatusOr<proto::ClusterStatus> status =
      [&]() -> absl::StatusOr<proto::ClusterStatus> {
    ASSIGN_OR_RETURN(std::unique_ptr<ClusterApi> head,
                     ctx.connect(cluster.address, cluster.token));
    return head->ClusterStatus(kStatusTimeoutMs);
  }();
  if (!status.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot get the status of the cluster at ",
                     cluster.address, ": ", status.status().message()));
  }
  if (flags.format == "json") {
    *ctx.out << internal::FormatStatusJson(*status);
  } else {
    *ctx.out << internal::FormatStatusText(*status, flags.verbose);
  }
  return 0;
}

}  // namespace shoal::cli::status
