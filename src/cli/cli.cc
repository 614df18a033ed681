#include "cli/cli.h"

#include <CLI/CLI.hpp>
#include <exception>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/command.h"
#include "cli/command_line.h"
#include "cli/config_command.h"
#include "cli/connection.h"
#include "cli/context.h"
#include "cli/daemon_commands.h"
#include "cli/dev_commands.h"
#include "cli/exit_status.h"
#include "cli/job_commands.h"
#include "cli/launch_command.h"
#include "cli/logs_command.h"
#include "cli/start_command.h"
#include "cli/state_commands.h"
#include "cli/status_command.h"
#include "cli/stop_command.h"
#include "cli/symmetric_run_command.h"
#include "common/process.h"
#include "common/version.h"

namespace shoal::cli {
namespace {

// Every subcommand's flags, bound to the command line while it is parsed
// and read by the one that runs.
struct AllFlags {
  start::Flags start;
  stop::Flags stop;
  status::Flags status;
  job_submit::Flags job_submit;
  job_logs::Flags job_logs;
  job_status::Flags job_status;
  job_stop::Flags job_stop;
  job_list::Flags job_list;
  list::Flags list;
  summary::Flags summary;
  logs::Flags logs;
  head_daemon::Flags head;
  agent_daemon::Flags agent;
  launch_command::Flags launch;
  symmetric_run::Flags symmetric_run;
  fake_tpu::Flags fake_tpu;
  sim_nodes::Flags sim_nodes;
  config::Flags config;
};

using Program = Command::Program;

// The subcommands, in the order --help lists them. `program` is the words
// after `--`, for the commands that take a program.
std::vector<Command> RegisterAll(CLI::App& app, AllFlags& f,
                                 const std::vector<std::string>& program) {
  std::vector<Command> c;
  c.push_back({start::Register(app, f.start),
               [&](Context& ctx) { return start::Run(f.start, ctx); },
               Program::kRefused, &f.start.tls});
  c.push_back({stop::Register(app, f.stop),
               [&](Context& ctx) { return stop::Run(f.stop, ctx); }});
  c.push_back({status::Register(app, f.status),
               [&](Context& ctx) { return status::Run(f.status, ctx); },
               Program::kRefused, &f.status.connection.tls});
  CLI::App& job = *RegisterJobGroup(app);
  c.push_back({job_submit::Register(job, f.job_submit),
               [&](Context& ctx) {
                 f.job_submit.entrypoint = program;
                 return job_submit::Run(f.job_submit, ctx);
               },
               Program::kTaken, &f.job_submit.connection.tls});
  c.push_back({job_logs::Register(job, f.job_logs),
               [&](Context& ctx) { return job_logs::Run(f.job_logs, ctx); },
               Program::kRefused, &f.job_logs.connection.tls});
  c.push_back({job_status::Register(job, f.job_status),
               [&](Context& ctx) { return job_status::Run(f.job_status, ctx); },
               Program::kRefused, &f.job_status.connection.tls});
  c.push_back({job_stop::Register(job, f.job_stop),
               [&](Context& ctx) { return job_stop::Run(f.job_stop, ctx); },
               Program::kRefused, &f.job_stop.connection.tls});
  c.push_back({job_list::Register(job, f.job_list),
               [&](Context& ctx) { return job_list::Run(f.job_list, ctx); },
               Program::kRefused, &f.job_list.connection.tls});
  c.push_back({list::Register(app, f.list),
               [&](Context& ctx) { return list::Run(f.list, ctx); },
               Program::kRefused, &f.list.connection.tls});
  c.push_back({summary::Register(app, f.summary),
               [&](Context& ctx) { return summary::Run(f.summary, ctx); },
               Program::kRefused, &f.summary.connection.tls});
  c.push_back({logs::Register(app, f.logs),
               [&](Context& ctx) { return logs::Run(f.logs, ctx); },
               Program::kRefused, &f.logs.connection.tls});
  c.push_back({head_daemon::Register(app, f.head),
               [&](Context&) { return head_daemon::Run(f.head); }});
  c.push_back({agent_daemon::Register(app, f.agent),
               [&](Context&) { return agent_daemon::Run(f.agent); }});
  c.push_back({launch_command::Register(app, f.launch),
               [&](Context&) {
                 f.launch.options.argv = program;
                 return launch_command::Run(f.launch);
               },
               Program::kTaken, &f.launch.tls});
  c.push_back({symmetric_run::Register(app, f.symmetric_run),
               [&](Context& ctx) {
                 f.symmetric_run.argv = program;
                 return symmetric_run::Run(f.symmetric_run, ctx);
               },
               Program::kTaken});
  c.push_back({config::Register(app, f.config),
               [&](Context& ctx) { return config::Run(f.config, ctx); },
               Program::kRefused, nullptr, /*uses_tls=*/false});
  CLI::App& dev = *RegisterDevGroup(app);
  c.push_back({fake_tpu::Register(dev, f.fake_tpu),
               [&](Context& ctx) { return fake_tpu::Run(f.fake_tpu, ctx); },
               Program::kIgnored, nullptr, /*uses_tls=*/false});
  c.push_back({sim_nodes::Register(dev, f.sim_nodes),
               [&](Context& ctx) { return sim_nodes::Run(f.sim_nodes, ctx); },
               Program::kIgnored, &f.sim_nodes.tls});
  return c;
}

// Runs the command that was parsed: its TLS first (a bad file fails it at
// once), then the command, unless it was given a program it does not take.
absl::StatusOr<int> RunParsed(const Command& command,
                              const std::vector<std::string>& program,
                              Context& ctx) {
  if (command.uses_tls) {
    const rpc::TlsConfig none;
    absl::Status st = ApplyTls(command.tls ? *command.tls : none);
    if (!st.ok()) return UsageError(st.message());
  }
  if (command.program == Program::kRefused && !program.empty()) {
    return UsageError(
        "a command after -- is for shoal launch, shoal job submit and shoal "
        "symmetric-run only");
  }
  return command.run(ctx);
}

absl::StatusOr<int> ParseAndRun(int argc, char** argv, Context& ctx) {
  CLI::App app{"Shoal: a cluster runtime for ML workloads", "shoal"};
  app.require_subcommand(1);
  app.set_version_flag("--version",
                       absl::StrCat("shoal, version ", ShoalVersion()),
                       "Print Shoal's version and exit");
  // Everything after `--` is the program, verbatim (CLI11 would read a
  // "[...]" argument as a list).
  std::vector<std::string> program;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) != "--") continue;
    program.assign(argv + i + 1, argv + argc);
    argc = i;
    break;
  }
  AllFlags flags;
  const std::vector<Command> commands = RegisterAll(app, flags, program);
  std::vector<const CLI::App*> take_programs;
  for (const Command& c : commands) {
    if (c.program == Program::kTaken) take_programs.push_back(c.app);
  }
  if (auto done = Parse(app, argc, argv, take_programs)) return *done;
  for (const Command& c : commands) {
    if (c.app->parsed()) return RunParsed(c, program, ctx);
  }
  return 1;
}

}  // namespace

int Main(int argc, char** argv, Context& ctx) {
  // Bad input must end in a message, never in std::terminate.
  try {
    return ExitCode(ParseAndRun(argc, argv, ctx), *ctx.err);
  } catch (const std::exception& e) {
    return ExitCode(
        absl::InternalError(absl::StrCat("unexpected error: ", e.what())),
        *ctx.err);
  }
}

int Main(int argc, char** argv) {
  // What a command, head or agent writes (session folders, the head's
  // state, logs) is its user's alone; what they start gets the user's own
  // mask back (common/process.h).
  KeepNewFilesPrivate();
  Context ctx = SystemContext();
  return Main(argc, argv, ctx);
}

}  // namespace shoal::cli
