#include "launch/host_runner.h"

#include <signal.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/environment.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/net.h"
#include "launch/framework_env.h"
#include "launch/gang_plan.h"
#include "launch/launcher_contact.h"
#include "launch/rank_processes.h"
#include "launch/runner_link.h"
#include "shoal/api.h"
#include "shoal/shoal.pb.h"

namespace shoal::launch {
namespace {

constexpr int64_t kReportIntervalUs = 100000;
constexpr int64_t kStopGraceUs = 3'000'000;
constexpr int kPollMs = 50;

// This host's ranks: their environments (with the rendezvous port) and how
// to start them.
absl::StatusOr<std::vector<RankProcessPlan>> PlanHost(
    const proto::LaunchHostSpec& spec, int port) {
  LaunchSpec gang = GangOf(spec);
  gang.rendezvous.master_port = port;
  gang.rendezvous.coordinator_port = port;
  auto envs = ComputeLaunchEnvironments(gang);
  if (!envs.ok()) return envs.status();
  std::string session = env::Get(env::Var::kSessionDir);
  std::string log_dir = absl::StrCat(session.empty() ? "/tmp" : session,
                                     "/logs/launch-", spec.launch_id());
  MakeDirs(log_dir).IgnoreError();
  // Gloo (torch.distributed's CPU backend) finds its own address by
  // resolving the hostname, which Debian maps to a loopback address: peers
  // on other hosts could not reach it. Point it at the interface that holds
  // this host's address in the gang, unless the user chose one.
  std::string gloo_interface;
  if (!env::Find(env::Var::kGlooSocketIfname)) {
    gloo_interface = InterfaceOf(spec.hosts(spec.host_index()).address());
  }
  return PlanRanks(spec, *envs, gloo_interface, log_dir);
}

// Runs the ranks to their end: reports their output and exits to the
// launcher every kReportIntervalUs, and stops them all (SIGTERM, then
// SIGKILL after a grace period) once one fails, the launcher says so, or
// the launcher is lost (then `result` says why).
void SuperviseHost(const proto::LaunchHostSpec& spec, const std::string& where,
                   RunnerLink& link, RankProcesses& procs,
                   proto::LaunchHostResult* result) {
  proto::LaunchReport report;
  report.set_launch_id(spec.launch_id());
  report.set_host_index(spec.host_index());
  *report.mutable_exits() = result->exits();
  bool stopping = result->exits_size() > 0;
  int64_t stop_deadline_us = 0;
  int64_t last_report = 0;
  LauncherContact contact;
  bool launcher_lost = false;
  while (procs.running() > 0 || (!launcher_lost && (report.lines_size() > 0 ||
                                                    report.exits_size() > 0))) {
    stopping |= procs.Poll(kPollMs, stopping, &report, result);
    int64_t now = MonotonicUs();
    bool due = now - last_report >= kReportIntervalUs || procs.running() == 0;
    if (!launcher_lost && due) {
      last_report = now;
      absl::StatusOr<bool> stop = link.Report(&report);
      if (stop.ok() && *stop) stopping = true;
      if (contact.LostAfter(stop.status(), now)) {
        // Nobody hears this gang: stop it, and say why in the result.
        launcher_lost = true;
        stopping = true;
        result->set_error(absl::StrCat(
            where, " lost its launcher at ", spec.launcher_address(), ": ",
            stop.status().message(), "; its processes were stopped"));
        SHOAL_LOG(WARNING) << result->error();
      }
      if (!stop.ok()) TrimPending(&report);
    }
    if (stopping && stop_deadline_us == 0) {
      stop_deadline_us = now + kStopGraceUs;
      procs.Signal(SIGTERM);
    }
    if (stop_deadline_us != 0 && now > stop_deadline_us) {
      procs.Signal(SIGKILL);
    }
  }
}

std::string Failed(proto::LaunchHostResult* result, const std::string& error) {
  result->set_error(error);
  return result->SerializeAsString();
}

}  // namespace

std::string RunLaunchHost(std::string spec_bytes) {
  proto::LaunchHostSpec spec;
  proto::LaunchHostResult result;
  if (!spec.ParseFromString(spec_bytes)) {
    return Failed(&result, "malformed launch spec");
  }
  // The launcher, the head and the ranks all use the cluster's token: the
  // launcher sends the one it resolved, the worker holds the agent's.
  std::string token =
      !spec.token().empty() ? spec.token() : env::Get(env::Var::kToken);
  const proto::LaunchHost& self = spec.hosts(spec.host_index());
  std::string where =
      absl::StrCat("host ", spec.host_index(), " (", self.address(), ", node ",
                   self.node_id(), ")");
  auto link = RunnerLink::Create(spec, env::Get(env::Var::kAddress), token);
  if (!link.ok()) return Failed(&result, std::string(link.status().message()));
  auto port = (*link)->RendezvousPort(spec);
  if (!port.ok()) {
    link->reset();
    return Failed(&result, absl::StrCat(where, ": ", port.status().message()));
  }
  auto plans = PlanHost(spec, *port);
  if (!plans.ok()) {
    link->reset();
    return Failed(&result, absl::StrCat(where, ": ", plans.status().message()));
  }
  {
    RankProcesses procs;
    procs.Start(*plans, &result);
    SuperviseHost(spec, where, **link, procs, &result);
  }
  link->reset();
  return result.SerializeAsString();
}

SHOAL_REMOTE(RunLaunchHost);

}  // namespace shoal::launch
