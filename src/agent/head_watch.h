// Whether a node has lost its head: the head must accept a registration or
// heartbeat of the node at least once every `timeout_ms` (killed and not
// restarted, its host gone, or another cluster answering on its address:
// the node's workers and store would otherwise outlive the cluster). A head
// back within the window keeps the node. Pure: the caller brings the time.
//
// Threading: the agent's loop; not thread-safe.
#ifndef SHOAL_AGENT_HEAD_WATCH_H_
#define SHOAL_AGENT_HEAD_WATCH_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"

namespace shoal::agent {

class HeadWatch {
 public:
  // `head_address` for the messages; `now_us`: when the watch starts.
  HeadWatch(std::string head_address, int64_t timeout_ms, int64_t now_us);

  // The head accepted the node (it is there and has the node as a member).
  void Answered(int64_t now_us);
  // A call to the head failed with `why` (kept for the message).
  void Failed(const absl::Status& why);

  // nullopt while the head is within its time; else why the node stops,
  // saying what to do (a head that refuses the node is named as such).
  std::optional<std::string> Check(int64_t now_us) const;
  // How often to Check: a tenth of the timeout, within 0.1 s .. 1 s.
  int64_t period_ms() const;

 private:
  const std::string head_address_;
  const int64_t timeout_ms_;
  int64_t last_ok_us_;
  absl::Status last_error_;
};

}  // namespace shoal::agent

#endif  // SHOAL_AGENT_HEAD_WATCH_H_
