// Where the runners' reports arrive at the launcher (LAUNCH_REPORT): each
// report's lines go to the launcher's terminal as the ranks printed them,
// its exits are kept for the supervisor, and the reply tells the runner
// whether to stop. A rank that fails on its own stops the gang at once,
// without waiting for the supervisor, so that every runner hears it in its
// next report.
//
// Threading: thread-safe; Receive runs on the launcher's event loop, the
// rest on the supervisor's thread.
#ifndef SHOAL_LAUNCH_REPORT_INBOX_H_
#define SHOAL_LAUNCH_REPORT_INBOX_H_

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "launch/launch_supervisor.h"
#include "launch/output_lines.h"
#include "shoal/shoal.pb.h"

namespace shoal::launch {

RankExit RankExitOf(const proto::LaunchExit& exit);

class ReportInbox {
 public:
  // `print` writes the ranks' output (bytes) to the terminal; it is called
  // with the inbox's lock held, so output stays in report order.
  explicit ReportInbox(std::function<void(std::string_view)> print)
      : print_(std::move(print)) {}

  // Takes reports of attempt `launch_id` from now on; earlier attempts'
  // stragglers are told to stop. Forgets the stop and the exits not taken.
  void BeginAttempt(const std::string& launch_id);

  // Takes one runner's report; returns whether the runner should stop
  // (always, when `stop_requested` by the user).
  bool Receive(const proto::LaunchReport& report, bool stop_requested);

  // Tells every runner of the attempt to stop, in its next report's reply.
  void RequestStop();

  // The exits reported since the last call, in the order they came.
  std::vector<proto::LaunchExit> TakeNewExits();

 private:
  const std::function<void(std::string_view)> print_;
  shoal::Mutex mu_;
  std::string launch_id_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<proto::LaunchExit> new_exits_ ABSL_GUARDED_BY(mu_);
  LinePrinter printer_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shoal::launch

#endif  // SHOAL_LAUNCH_REPORT_INBOX_H_
