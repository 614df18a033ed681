// The threads of a worker that wait in Get or Wait, by the depth of the
// task each waits in. While one waits, its node may lend the worker's CPU
// to deeper requests (the nested tasks the wait is for): the node hears
// the shallowest waiting depth whenever it changes, and -1 when no thread
// waits any more.
//
// Threading: thread-safe. `tell` runs under the lock, so that what it
// posts reaches the node in order.
#ifndef SHOAL_API_BLOCKED_WAITS_H_
#define SHOAL_API_BLOCKED_WAITS_H_

#include <functional>
#include <set>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"

namespace shoal::internal {

class BlockedWaits {
 public:
  // The shallowest waiting depth, or -1: none waits.
  using TellFn = std::function<void(int shallowest)>;

  // `current_depth`: the depth of the task the calling thread runs.
  BlockedWaits(std::function<int()> current_depth, TellFn tell)
      : current_depth_(std::move(current_depth)), tell_(std::move(tell)) {}

  // Called on the waiting thread before (true) and after (false) its wait.
  // The wait counts at the depth it began at: a thread a task started
  // reads the depth of the latest task, which may change while it waits.
  void Blocked(bool blocked);
  // A thread begins / ends a wait in a task of `depth`.
  void Begin(int depth) { Change(depth, /*blocked=*/true); }
  void End(int depth) { Change(depth, /*blocked=*/false); }

 private:
  void Change(int depth, bool blocked);

  const std::function<int()> current_depth_;
  const TellFn tell_;
  shoal::Mutex mu_;
  std::multiset<int> depths_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shoal::internal

#endif  // SHOAL_API_BLOCKED_WAITS_H_
