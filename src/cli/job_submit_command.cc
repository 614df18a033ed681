// `shoal job submit`.
#include <CLI/CLI.hpp>
#include <ostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/cluster_api.h"
#include "cli/context.h"
#include "cli/exit_status.h"
#include "cli/flag_checks.h"
#include "cli/job_commands.h"
#include "common/shell_quote.h"
#include "common/status_macros.h"
#include "scheduling/resource_set.h"

namespace shoal::cli::job_submit {
namespace {

// The job as the head takes it, from the command line alone; a UsageError
// for what is wrong with it.
absl::StatusOr<proto::JobSpec> MakeSpec(const Flags& f) {
  if (f.entrypoint.empty()) {
    return UsageError(
        "say the entrypoint after --, e.g. shoal job submit -- python3 "
        "train.py");
  }
  proto::JobSpec spec;
  spec.set_submission_id(f.submission_id);
  std::vector<std::string> words;
  for (const std::string& w : f.entrypoint) words.push_back(ShellQuote(w));
  spec.set_entrypoint(absl::StrJoin(words, " "));
  for (const std::string& kv : f.env) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return UsageError(
          absl::StrCat("--env takes NAME=VALUE, not \"", kv, "\""));
    }
    (*spec.mutable_env())[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  ResourceSet need;
  if (!f.entrypoint_resources.empty()) {
    auto parsed = ResourceSet::FromJson(f.entrypoint_resources);
    if (!parsed.ok()) {
      return UsageError(
          absl::StrCat("--entrypoint-resources: ", parsed.status().message()));
    }
    need = *parsed;
  }
  auto add = [&](const char* name, double amount) -> bool {
    if (amount <= 0) return true;
    auto one = ResourceSet::FromDoubles({{name, amount}});
    if (!one.ok()) return false;
    need.Add(*one);
    return true;
  };
  if (!add("CPU", f.entrypoint_num_cpus) ||
      !add("GPU", f.entrypoint_num_gpus)) {
    return UsageError(
        "--entrypoint-num-cpus and --entrypoint-num-gpus take "
        "a number of 0 or more");
  }
  need.ToProto(spec.mutable_entrypoint_resources());
  // As given, for the job's JSON (Ray's entrypoint_num_cpus / _gpus).
  spec.set_entrypoint_num_cpus(f.entrypoint_num_cpus);
  spec.set_entrypoint_num_gpus(f.entrypoint_num_gpus);
  return spec;
}

// What a Ctrl-C says while the command follows job `id`: the job goes on,
// and how to stop it or follow it again.
std::string JobGoesOnNote(const Flags& f, const std::string& id) {
  std::string flags;
  if (!f.connection.address.empty()) {
    absl::StrAppend(&flags, " --address ", ShellQuote(f.connection.address));
  }
  if (!f.connection.temp_dir.empty()) {
    absl::StrAppend(&flags, " --temp-dir ",
                    ShellQuote(Absolute(f.connection.temp_dir)));
  }
  const std::string quoted_id = ShellQuote(id);
  return absl::StrCat(
      "\nshoal: stopped following job ", id,
      "; the job is still running.\n  stop it:          shoal job stop", flags,
      " ", quoted_id, "\n  follow it again:  shoal job logs --follow", flags,
      " ", quoted_id, "\n  its state:        shoal job status", flags, " ",
      quoted_id, "\n");
}

}  // namespace

CLI::App* Register(CLI::App& job, Flags& f) {
  CLI::App* cmd = job.add_subcommand(
      "submit", "Run a command on the cluster under supervision");
  AddConnectionOptions(cmd, &f.connection);
  cmd->add_option("--submission-id", f.submission_id,
                  "The job's id (default: made up)");
  // One value each (--env A=1 --env B=2): a program without its `--`
  // must not become more values.
  cmd->add_option("--env", f.env, "NAME=VALUE for the entrypoint")
      ->allow_extra_args(false);
  cmd->add_option(
      "--working-dir", f.working_dir,
      "A folder sent with the job; the entrypoint runs in its copy");
  cmd->add_option("--entrypoint-num-cpus", f.entrypoint_num_cpus,
                  "CPUs the entrypoint's node must have")
      ->check(AtLeast(0));
  cmd->add_option("--entrypoint-num-gpus", f.entrypoint_num_gpus,
                  "GPUs the entrypoint's node must have")
      ->check(AtLeast(0));
  cmd->add_option("--entrypoint-resources", f.entrypoint_resources,
                  "Resources the entrypoint's node must have (JSON)");
  cmd->add_flag("--no-wait", f.no_wait,
                "Print the id and return; do not follow the logs");
  cmd->footer(
      "The entrypoint follows --, e.g. shoal job submit -- python3 train.py");
  return cmd;
}

absl::StatusOr<int> Run(const Flags& f, Context& ctx) {
  ASSIGN_OR_RETURN(proto::JobSpec spec, MakeSpec(f));
  ASSIGN_OR_RETURN(auto head, ConnectToCluster(f.connection, ctx));
  if (!f.working_dir.empty()) {
    RETURN_IF_ERROR(head->AttachWorkingDir(f.working_dir, &spec));
  }
  auto info = head->SubmitJob(spec);
  if (!info.ok()) {
    return absl::Status(
        info.status().code(),
        absl::StrCat("cannot submit the job: ", info.status().message()));
  }
  const std::string& id = info->spec().submission_id();
  if (info->state() == proto::JobInfo::FAILED) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " failed: ", info->message()));
  }
  *ctx.err << "Job " << id << " submitted (node " << info->node_id() << ").\n";
  if (f.no_wait) {
    *ctx.err << "  logs:   shoal job logs -f " << id << "\n"
             << "  status: shoal job status " << id << "\n"
             << "  stop:   shoal job stop " << id << "\n";
    *ctx.out << id << "\n";
    return 0;
  }
  ctx.on_interrupt(JobGoesOnNote(f, id));
  return PrintJobLogs(*head, id, /*follow=*/true, *ctx.out, *ctx.err);
}

}  // namespace shoal::cli::job_submit
