#include "cli/job_commands.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <ostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/cluster_api.h"
#include "cli/common.h"
#include "cli/context.h"
#include "cli/flag_checks.h"
#include "cli/host.h"
#include "common/status_macros.h"
#include "dashboard/formats.h"

namespace shoal::cli {
namespace {

// How `shoal job stop` waits for the job to end: polls, kStopPolls times.
constexpr int kStopPollMs = 100;
constexpr int kStopPolls = 200;

bool JobFinished(const proto::JobInfo& info) {
  return info.state() == proto::JobInfo::SUCCEEDED ||
         info.state() == proto::JobInfo::FAILED ||
         info.state() == proto::JobInfo::STOPPED;
}

absl::Status JobError(const std::string& what, const absl::Status& status) {
  return absl::Status(status.code(),
                      absl::StrCat(what, ": ", status.message()));
}

// The exit status that stands for a job that ended as `info` says.
int JobExitStatus(const proto::JobInfo& info) {
  if (info.state() == proto::JobInfo::SUCCEEDED) return 0;
  if (info.exit_code() > 0 && info.exit_code() < 256) return info.exit_code();
  return 1;
}

void PrintJob(const proto::JobInfo& info, std::ostream& out) {
  out << info.spec().submission_id() << ": " << JobStateName(info.state())
      << " on node " << info.node_id();
  if (info.pid() > 0) out << " (pid " << info.pid() << ")";
  out << ", " << JobDuration(info) << "\n"
      << "  entrypoint: " << info.spec().entrypoint() << "\n";
  if (!info.message().empty()) out << "  " << info.message() << "\n";
}

nlohmann::json JobJson(const proto::JobInfo& info) {
  return {{"submission_id", info.spec().submission_id()},
          {"status", JobStateName(info.state())},
          {"entrypoint", info.spec().entrypoint()},
          {"message", info.message()},
          {"exit_code", info.exit_code()},
          {"node_id", info.node_id()},
          {"start_time", info.start_time_ms()},
          {"end_time", info.end_time_ms()},
          {"driver_pid", info.pid()}};
}

// --address and the rest, and the job's id, for a command about one job.
CLI::App* AddJobCommand(CLI::App& job, const char* name, const char* help,
                        ConnectionFlags* connection, std::string* id) {
  CLI::App* cmd = job.add_subcommand(name, help);
  AddConnectionOptions(cmd, connection);
  cmd->add_option("id", *id, "The job's submission id")->required();
  return cmd;
}

proto::JobRef Ref(const std::string& id) {
  proto::JobRef ref;
  ref.set_submission_id(id);
  return ref;
}

}  // namespace

CLI::App* RegisterJobGroup(CLI::App& parent) {
  CLI::App* job = parent.add_subcommand(
      "job", "Submit a command as a job and watch it (shoal job --help)");
  job->require_subcommand(1);
  return job;
}

absl::StatusOr<int> PrintJobLogs(ClusterApi& head, const std::string& id,
                                 bool follow, std::ostream& out,
                                 std::ostream& err) {
  proto::JobLogsRequest req;
  req.set_submission_id(id);
  req.set_wait_ms(follow ? 5000 : 0);
  while (true) {
    auto logs = head.GetJobLogs(req);
    if (!logs.ok()) {
      return JobError("cannot read the job's logs", logs.status());
    }
    out << logs->data() << std::flush;
    req.set_offset(logs->next_offset());
    if (logs->finished() || (!follow && logs->data().empty())) break;
  }
  if (!follow) return 0;
  auto info = head.GetJob(Ref(id));
  if (!info.ok()) return JobError("cannot get the job", info.status());
  err << "Job " << id << " " << JobStateName(info->state()) << ": "
      << info->message() << " (" << JobDuration(*info) << ")\n";
  return JobExitStatus(*info);
}

namespace job_status {

CLI::App* Register(CLI::App& job, Flags& f) {
  CLI::App* cmd =
      AddJobCommand(job, "status", "Show a job's state", &f.connection, &f.id);
  cmd->add_option("--format", f.format, "text (default) or json")
      ->check(OneOf({"text", "json"}));
  return cmd;
}

absl::StatusOr<int> Run(const Flags& f, Context& ctx) {
  ASSIGN_OR_RETURN(auto head, ConnectToCluster(f.connection, ctx));
  auto info = head->GetJob(Ref(f.id));
  if (!info.ok()) return JobError("cannot get the job", info.status());
  if (f.format == "json") {
    *ctx.out << dashboard::JsonText(JobJson(*info), 2) << "\n";
  } else {
    PrintJob(*info, *ctx.out);
  }
  return 0;
}

}  // namespace job_status

namespace job_logs {

CLI::App* Register(CLI::App& job, Flags& f) {
  CLI::App* cmd =
      AddJobCommand(job, "logs", "Print a job's output", &f.connection, &f.id);
  cmd->add_flag("--follow,-f", f.follow, "Keep printing until the job ends");
  return cmd;
}

absl::StatusOr<int> Run(const Flags& f, Context& ctx) {
  ASSIGN_OR_RETURN(auto head, ConnectToCluster(f.connection, ctx));
  return PrintJobLogs(*head, f.id, f.follow, *ctx.out, *ctx.err);
}

}  // namespace job_logs

namespace job_stop {

CLI::App* Register(CLI::App& job, Flags& f) {
  return AddJobCommand(job, "stop",
                       "SIGTERM, then SIGKILL, the job's whole process group",
                       &f.connection, &f.id);
}

absl::StatusOr<int> Run(const Flags& f, Context& ctx) {
  ASSIGN_OR_RETURN(auto head, ConnectToCluster(f.connection, ctx));
  auto info = head->StopJob(Ref(f.id));
  if (!info.ok()) return JobError("cannot stop the job", info.status());
  if (JobFinished(*info)) {
    *ctx.out << "Job " << f.id << " already ended ("
             << JobStateName(info->state()) << ").\n";
    return 0;
  }
  *ctx.out << "Stopping job " << f.id << " (SIGTERM, then SIGKILL)...\n";
  for (int i = 0; i < kStopPolls && !JobFinished(*info); ++i) {
    ctx.host->SleepMs(kStopPollMs);
    info = head->GetJob(Ref(f.id));
    if (!info.ok()) return JobError("cannot get the job", info.status());
  }
  if (!JobFinished(*info)) {
    return absl::DeadlineExceededError("the job did not end within 20 s");
  }
  *ctx.out << "Job " << f.id << " " << JobStateName(info->state()) << ": "
           << info->message() << "\n";
  return 0;
}

}  // namespace job_stop

namespace job_list {

CLI::App* Register(CLI::App& job, Flags& f) {
  CLI::App* cmd = job.add_subcommand("list", "List the jobs");
  AddConnectionOptions(cmd, &f.connection);
  cmd->add_option("--format", f.format, "text (default) or json")
      ->check(OneOf({"text", "json"}));
  return cmd;
}

absl::StatusOr<int> Run(const Flags& f, Context& ctx) {
  ASSIGN_OR_RETURN(auto head, ConnectToCluster(f.connection, ctx));
  auto list = head->ListJobs();
  if (!list.ok()) return JobError("cannot list the jobs", list.status());
  std::ostream& out = *ctx.out;
  if (f.format == "json") {
    nlohmann::json jobs = nlohmann::json::array();
    for (const auto& info : list->jobs()) jobs.push_back(JobJson(info));
    out << dashboard::JsonText(jobs, 2) << "\n";
    return 0;
  }
  if (list->jobs().empty()) {
    out << "No jobs (shoal job submit -- CMD starts one).\n";
    return 0;
  }
  out << absl::StrFormat("%-24s %-10s %-14s %9s  %s\n", "SUBMISSION ID",
                         "STATUS", "NODE", "DURATION", "ENTRYPOINT");
  for (const auto& info : list->jobs()) {
    out << absl::StrFormat("%-24s %-10s %-14s %9s  %s\n",
                           info.spec().submission_id(),
                           JobStateName(info.state()), info.node_id(),
                           JobDuration(info), info.spec().entrypoint());
  }
  return 0;
}

}  // namespace job_list
}  // namespace shoal::cli
