// `shoal job submit|status|logs|stop|list`: jobs as Ray's job CLI has them,
// a command the cluster runs under supervision with its output kept.
#ifndef SHOAL_CLI_JOB_COMMANDS_H_
#define SHOAL_CLI_JOB_COMMANDS_H_

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

// `shoal job`, which holds the job subcommands.
CLI::App* RegisterJobGroup(CLI::App& parent);

// Prints job `id`'s output as it comes to `out`; with `follow`, until the
// job ends, then its end to `err`. Returns the job's exit status (0 without
// `follow`).
absl::StatusOr<int> PrintJobLogs(ClusterApi& head, const std::string& id,
                                 bool follow, std::ostream& out,
                                 std::ostream& err);

namespace job_submit {

struct Flags {
  ConnectionFlags connection;
  std::string submission_id;
  std::string working_dir;       // packed and run in
  std::vector<std::string> env;  // K=V
  double entrypoint_num_cpus = 0;
  double entrypoint_num_gpus = 0;
  std::string entrypoint_resources;  // JSON
  bool no_wait = false;
  std::vector<std::string> entrypoint;  // the words after `--`
};

CLI::App* Register(CLI::App& job, Flags& flags);
// 0 with --no-wait; else the job's exit status once it ends.
absl::StatusOr<int> Run(const Flags& flags, Context& ctx);

}  // namespace job_submit

namespace job_status {

struct Flags {
  ConnectionFlags connection;
  std::string id;
  std::string format = "text";  // or json
};
CLI::App* Register(CLI::App& job, Flags& flags);
absl::StatusOr<int> Run(const Flags& flags, Context& ctx);

}  // namespace job_status

namespace job_logs {

struct Flags {
  ConnectionFlags connection;
  std::string id;
  bool follow = false;
};
CLI::App* Register(CLI::App& job, Flags& flags);
absl::StatusOr<int> Run(const Flags& flags, Context& ctx);

}  // namespace job_logs

namespace job_stop {

struct Flags {
  ConnectionFlags connection;
  std::string id;
};
CLI::App* Register(CLI::App& job, Flags& flags);
absl::StatusOr<int> Run(const Flags& flags, Context& ctx);

}  // namespace job_stop

namespace job_list {

struct Flags {
  ConnectionFlags connection;
  std::string format = "text";  // or json
};
CLI::App* Register(CLI::App& job, Flags& flags);
absl::StatusOr<int> Run(const Flags& flags, Context& ctx);

}  // namespace job_list
}  // namespace shoal::cli

#endif  // SHOAL_CLI_JOB_COMMANDS_H_
