#include "launch/launcher_contact.h"

#include <algorithm>

namespace shoal::launch {

bool LauncherContact::LostAfter(const absl::Status& report, int64_t now_us) {
  if (report.ok()) {
    unreachable_since_us_ = -1;
    return false;
  }
  if (unreachable_since_us_ < 0) unreachable_since_us_ = now_us;
  return absl::IsPermissionDenied(report) ||
         now_us - unreachable_since_us_ >= kLauncherLostUs;
}

void TrimPending(proto::LaunchReport* report) {
  auto* lines = report->mutable_lines();
  int drop = std::max(0, lines->size() - kMaxPendingLines);
  size_t bytes = 0;
  for (int i = lines->size() - 1; i >= drop; --i) {
    bytes += lines->Get(i).text().size();
    if (bytes > kMaxPendingBytes) {
      drop = i + 1;
      break;
    }
  }
  if (drop > 0) lines->DeleteSubrange(0, drop);
}

}  // namespace shoal::launch
