// How a host's runner keeps in touch with its launcher: whether the
// launcher counts as lost after a failed report, and how much undelivered
// output is kept for it meanwhile.
//
// Pure: the caller passes the time. Threading: one thread.
#ifndef SHOAL_LAUNCH_LAUNCHER_CONTACT_H_
#define SHOAL_LAUNCH_LAUNCHER_CONTACT_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "shoal/shoal.pb.h"

namespace shoal::launch {

// A runner that cannot reach its launcher for this long stops its
// processes and fails (a launcher that refuses its token: at once).
inline constexpr int64_t kLauncherLostUs = 10'000'000;
// Undelivered output kept while the launcher is unreachable.
inline constexpr int kMaxPendingLines = 10000;
inline constexpr size_t kMaxPendingBytes = 16 << 20;

class LauncherContact {
 public:
  // Takes the outcome of a report made at `now_us`; returns whether the
  // launcher is now lost: it refused the runner (PermissionDenied), or no
  // report reached it for kLauncherLostUs.
  bool LostAfter(const absl::Status& report, int64_t now_us);

 private:
  int64_t unreachable_since_us_ = -1;  // -1: the last report got through
};

// Keeps the newest kMaxPendingLines lines and kMaxPendingBytes of the
// report's output that could not be delivered yet.
void TrimPending(proto::LaunchReport* report);

}  // namespace shoal::launch

#endif  // SHOAL_LAUNCH_LAUNCHER_CONTACT_H_
