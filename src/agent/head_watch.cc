#include "agent/head_watch.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace shoal::agent {

HeadWatch::HeadWatch(std::string head_address, int64_t timeout_ms,
                     int64_t now_us)
    : head_address_(std::move(head_address)),
      timeout_ms_(timeout_ms),
      last_ok_us_(now_us) {}

void HeadWatch::Answered(int64_t now_us) {
  last_ok_us_ = now_us;
  last_error_ = absl::OkStatus();
}

void HeadWatch::Failed(const absl::Status& why) { last_error_ = why; }

int64_t HeadWatch::period_ms() const {
  return std::clamp<int64_t>(timeout_ms_ / 10, 100, 1000);
}

std::optional<std::string> HeadWatch::Check(int64_t now_us) const {
  int64_t silent_ms = (now_us - last_ok_us_) / 1000;
  if (silent_ms < timeout_ms_) return std::nullopt;
  std::string why = absl::StrCat(
      "the head at ", head_address_, " has been unreachable for ",
      timeout_ms_ / 1000.0, " s; stopping this node (--head-timeout-s)");
  if (absl::IsPermissionDenied(last_error_) ||
      absl::IsUnauthenticated(last_error_)) {
    absl::StrAppend(&why, ". It refuses this node (", last_error_.ToString(),
                    "): another cluster answers there, or the token changed");
  } else if (!last_error_.ok()) {
    absl::StrAppend(&why, ". Last error: ", last_error_.ToString());
  }
  absl::StrAppend(&why,
                  ". The node's workers end and its object store is freed; "
                  "once a head is up, join it again with `shoal start "
                  "--address=",
                  head_address_, "`");
  return why;
}

}  // namespace shoal::agent
