#include "launch/launch_supervisor.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace shoal::launch {
namespace {

// How long one wait for the gang's events lasts before the supervisor looks
// at the user's stop request again.
constexpr int64_t kPollMs = 200;
constexpr int64_t kBackoffSliceUs = 200'000;
constexpr char kInterrupted[] =
    "shoal launch: interrupted; every process of the gang was stopped";

}  // namespace

bool IsRankFailure(const RankExit& exit) {
  return exit.exit_code != 0 && !exit.stopped;
}

LaunchOutcome LaunchSupervisor::Run() {
  for (int attempt = 0;; ++attempt) {
    outcome_.restarts = attempt;
    Attempt a = RunAttempt(attempt);
    if (Decide(attempt, a) == Next::kDone) break;
    Backoff(attempt + 1);
    if (gang_->StopRequested()) {
      outcome_.exit_code = 130;
      outcome_.summary = kInterrupted;
      break;
    }
  }
  outcome_.stopped_by_user = gang_->StopRequested();
  return outcome_;
}

LaunchSupervisor::Attempt LaunchSupervisor::RunAttempt(int attempt) {
  Attempt a;
  // Non-zero exits from the runners' results, for a failure whose report
  // never reached the launcher.
  std::vector<RankExit> unreported;
  const int hosts = gang_->StartRanks(attempt);
  for (int ended = 0; ended < hosts;) {
    GangEvent event = gang_->WaitForEvent(kPollMs);
    if (event.kind == GangEvent::Kind::kRankExited) {
      const RankExit& e = event.rank_exit;
      if (IsRankFailure(e) && (!a.failed || e.time_us < a.failure.time_us)) {
        a.failed = true;
        a.failure = e;
      }
      if (IsRankFailure(e)) gang_->StopRanks();
    } else if (event.kind == GangEvent::Kind::kHostEnded) {
      ++ended;
      OnHostEnded(event.host, &a, &unreported);
    }
    if (gang_->StopRequested()) gang_->StopRanks();
  }
  for (const RankExit& e : unreported) {
    if (a.failed) break;
    if (!IsRankFailure(e)) continue;
    a.failed = true;
    a.failure = e;
  }
  return a;
}

void LaunchSupervisor::OnHostEnded(const HostOutcome& host, Attempt* a,
                                   std::vector<RankExit>* unreported) {
  for (const RankExit& e : host.exits) {
    if (e.exit_code == 0) {
      ++a->exited_zero;
    } else {
      unreported->push_back(e);
    }
  }
  std::string error = host.error;
  if (error.empty() &&
      static_cast<int>(host.exits.size()) < host.num_processes) {
    error = absl::StrCat("the runner on host ", host.host_index, " (",
                         host.address, ") accounted for ", host.exits.size(),
                         " of its ", host.num_processes, " processes");
  }
  if (!host.lost_node.empty()) a->lost_nodes.insert(host.lost_node);
  if (error.empty()) return;
  if (a->runner_error.empty()) a->runner_error = error;
  gang_->StopRanks();
}

LaunchSupervisor::Next LaunchSupervisor::Decide(int attempt, const Attempt& a) {
  const bool stopped = gang_->StopRequested();
  if (!a.failed && a.runner_error.empty() && !stopped &&
      a.exited_zero == expected_processes_) {
    outcome_.exit_code = 0;
    outcome_.summary = absl::StrCat("shoal launch: all ", a.exited_zero,
                                    " processes exited 0");
    return Next::kDone;
  }
  if (stopped) {
    outcome_.exit_code = 130;
    outcome_.summary = kInterrupted;
    return Next::kDone;
  }
  if (!a.failed && !a.lost_nodes.empty() && policy_.can_place_again &&
      attempt < policy_.max_restarts) {
    return PlaceAgain(attempt, a);
  }
  if (!a.failed) {
    std::string why = a.runner_error;
    if (why.empty()) {
      why = absl::StrCat(a.exited_zero, " of ", expected_processes_,
                         " processes ran to their end and exited 0; the "
                         "others were stopped");
    }
    outcome_.exit_code = 1;
    outcome_.summary = absl::StrCat("shoal launch: ", why);
    return Next::kDone;
  }
  return RestartAfterFailure(attempt, a);
}

// A host of the gang died (its runner with it): the gang is placed again on
// nodes that are alive and starts over.
LaunchSupervisor::Next LaunchSupervisor::PlaceAgain(int attempt,
                                                    const Attempt& a) {
  gang_->Say(absl::StrCat("shoal launch: ", a.runner_error,
                          "; placing the gang again (restart ", attempt + 1,
                          " of ", policy_.max_restarts, ")"));
  lost_nodes_.insert(a.lost_nodes.begin(), a.lost_nodes.end());
  absl::Status placed = gang_->PlaceAgain(lost_nodes_);
  if (placed.ok()) return Next::kRestart;
  outcome_.exit_code = 1;
  outcome_.summary =
      absl::StrCat("shoal launch: ", a.runner_error,
                   "; the gang cannot be placed again: ", placed.message());
  return Next::kDone;
}

LaunchSupervisor::Next LaunchSupervisor::RestartAfterFailure(int attempt,
                                                             const Attempt& a) {
  const int code = a.failure.exit_code;
  outcome_.exit_code = code;
  outcome_.summary = absl::StrCat("shoal launch: rank ", a.failure.rank,
                                  " failed first: ", a.failure.description,
                                  "; the gang was stopped");
  if (attempt >= policy_.max_restarts) return Next::kDone;
  if (policy_.no_restart_on.count(code) > 0) {
    absl::StrAppend(&outcome_.summary, " (exit code ", code,
                    " is in --no-restart-on: not restarted)");
    return Next::kDone;
  }
  gang_->Say(absl::StrCat(outcome_.summary, "; restarting the gang (restart ",
                          attempt + 1, " of ", policy_.max_restarts, ")"));
  return Next::kRestart;
}

// Waits before restart `restart`, in slices, so that a stop from the user
// cuts it short (the next attempt then ends at once, stopped).
void LaunchSupervisor::Backoff(int restart) {
  if (policy_.backoff_us <= 0) return;
  int64_t wait = policy_.backoff_us;
  for (int k = 1; k < restart && wait < policy_.max_backoff_us; ++k) wait *= 2;
  if (policy_.max_backoff_us > 0) wait = std::min(wait, policy_.max_backoff_us);
  const int64_t until = gang_->NowUs() + wait;
  for (int64_t now = gang_->NowUs(); now < until && !gang_->StopRequested();
       now = gang_->NowUs()) {
    gang_->SleepUs(std::min(until - now, kBackoffSliceUs));
  }
}

}  // namespace shoal::launch
