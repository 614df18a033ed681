#include "launch/report_inbox.h"

namespace shoal::launch {

RankExit RankExitOf(const proto::LaunchExit& exit) {
  RankExit e;
  e.rank = exit.rank();
  e.exit_code = exit.exit_code();
  e.description = exit.description();
  e.time_us = exit.time_us();
  e.stopped = exit.stopped();
  return e;
}

void ReportInbox::BeginAttempt(const std::string& launch_id) {
  shoal::MutexLock lock(&mu_);
  launch_id_ = launch_id;
  stop_ = false;
  new_exits_.clear();
}

bool ReportInbox::Receive(const proto::LaunchReport& report,
                          bool stop_requested) {
  shoal::MutexLock lock(&mu_);
  if (report.launch_id() != launch_id_) return true;  // a straggler
  print_(printer_.Format(report));
  for (const proto::LaunchExit& e : report.exits()) {
    new_exits_.push_back(e);
    if (IsRankFailure(RankExitOf(e))) stop_ = true;
  }
  if (stop_requested) stop_ = true;
  return stop_;
}

void ReportInbox::RequestStop() {
  shoal::MutexLock lock(&mu_);
  stop_ = true;
}

std::vector<proto::LaunchExit> ReportInbox::TakeNewExits() {
  shoal::MutexLock lock(&mu_);
  std::vector<proto::LaunchExit> taken;
  taken.swap(new_exits_);
  return taken;
}

}  // namespace shoal::launch
