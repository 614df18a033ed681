#include "api/blocked_waits.h"

namespace shoal::internal {

void BlockedWaits::Blocked(bool blocked) {
  thread_local int waiting_at = 0;
  if (blocked) {
    waiting_at = current_depth_();
    Begin(waiting_at);
  } else {
    End(waiting_at);
  }
}

void BlockedWaits::Change(int depth, bool blocked) {
  shoal::MutexLock lock(&mu_);
  int before = depths_.empty() ? -1 : *depths_.begin();
  if (blocked) {
    depths_.insert(depth);
  } else if (auto it = depths_.find(depth); it != depths_.end()) {
    depths_.erase(it);
  }
  int after = depths_.empty() ? -1 : *depths_.begin();
  if (after != before) tell_(after);
}

}  // namespace shoal::internal
