// A subcommand as `shoal` runs it: its CLI11 node (made by the subcommand's
// Register, which binds its flags) and how it runs once parsed.
#ifndef SHOAL_CLI_COMMAND_H_
#define SHOAL_CLI_COMMAND_H_

#include <functional>

#include "absl/status/statusor.h"

namespace CLI {
class App;
}  // namespace CLI

namespace shoal::rpc {
struct TlsConfig;
}  // namespace shoal::rpc

namespace shoal::cli {

struct Context;

struct Command {
  // What the command makes of a program given after `--`.
  enum class Program {
    kRefused,  // a usage error: the program is for launch and job submit
    kTaken,    // it runs it (launch, job submit)
    kIgnored,  // dev helpers
  };

  CLI::App* app = nullptr;
  // The exit status (a child's, for the commands that run a program), or
  // an error for ExitCode.
  std::function<absl::StatusOr<int>(Context&)> run;
  Program program = Program::kRefused;
  // Its --tls-* flags (nullptr: it has none, SHOAL_TLS_* still apply).
  const rpc::TlsConfig* tls = nullptr;
  // False: it runs without looking at TLS at all (dev fake-tpu).
  bool uses_tls = true;
};

}  // namespace shoal::cli

#endif  // SHOAL_CLI_COMMAND_H_
