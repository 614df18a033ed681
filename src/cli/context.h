// What a subcommand's Run works through: where it prints, the host whose
// processes it starts and stops, and how it reaches a cluster. Main makes
// the real one; unit tests make one of fakes.
#ifndef SHOAL_CLI_CONTEXT_H_
#define SHOAL_CLI_CONTEXT_H_

#include <functional>
#include <iosfwd>
#include <string>

#include "cli/cluster_api.h"

namespace shoal::cli {

class Host;

struct Context {
  std::ostream* out;  // what the command reports (stdout)
  std::ostream* err;  // progress and notes for a person (stderr)
  Host* host;
  ClusterConnector connect;
  // From now on a Ctrl-C ends the command after printing `note` (shoal job
  // submit: the job goes on).
  std::function<void(const std::string& note)> on_interrupt;
};

// The context of the `shoal` process: stdout, stderr, this host, real
// connections, a SIGINT handler.
Context SystemContext();

}  // namespace shoal::cli

#endif  // SHOAL_CLI_CONTEXT_H_
