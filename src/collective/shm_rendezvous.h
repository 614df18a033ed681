// How the ranks of a shared-memory group meet at each step: each rank
// publishes counters in its RankControl, and waits for its peers' counters
// to reach a step, spinning briefly and then sleeping on a futex. While it
// waits it notices a peer that left, died or fell silent past the timeout,
// and an abort by any rank; the first failure is recorded in the segment's
// header, so that every rank reports the same one.
//
// Threading: one per rank, used by that rank's thread only (Abort excepted:
// any thread may call it).
#ifndef SHOAL_COLLECTIVE_SHM_RENDEZVOUS_H_
#define SHOAL_COLLECTIVE_SHM_RENDEZVOUS_H_

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "collective/shm_segment.h"
#include "collective/transport.h"

namespace shoal::collective::internal::shm {

class Rendezvous {
 public:
  using Clock = std::chrono::steady_clock;
  struct Deadline {
    Clock::time_point end;
    Clock::time_point next_liveness_check;
  };

  // `header` and `control` are the mapped segment's; `options` outlives this.
  Rendezvous(const TransportOptions& options, Header* header,
             RankControl* control);

  // The deadline of a wait that starts now.
  Deadline StartWait() const;

  // Sets this rank's counter and wakes its waiters.
  static void Publish(Counter* counter, uint32_t value);
  // Records this rank's operation at `step` (for CheckDescriptor).
  void Describe(uint32_t step, OpKind kind, DataType type, ReduceOp op,
                int root, size_t count);

  // Waits until `peer`'s `counter` reaches `target`.
  absl::Status WaitOne(Counter* counter, int peer, uint32_t target,
                       Deadline* deadline);
  // Waits for every peer's counter `which`; checks their descriptors of
  // `describe_step` when it is >= 0.
  absl::Status WaitAll(Counter RankControl::*which, uint32_t target,
                       int64_t describe_step);
  // Fails the group unless `peer` described the same operation at `step`.
  // REQUIRES: peer has published `in` for `step`.
  absl::Status CheckDescriptor(uint32_t step, int peer);

  // The group's recorded failure, if any rank aborted it.
  absl::Status CheckAborted();
  // Records `status` as the group's failure (the first one wins) and wakes
  // every waiter.
  void Abort(const absl::Status& status);
  // Aborts with `status`, returning the failure the group recorded.
  absl::Status Fail(const absl::Status& status);

 private:
  absl::Status AbortedStatus();
  absl::Status CheckPeers();
  absl::Status TimedOut(Counter* counter, uint32_t target);

  const TransportOptions& options_;
  const int size_;
  const int rank_;
  const std::chrono::milliseconds timeout_;
  const int spins_;
  Header* const header_;
  RankControl* const control_;
};

}  // namespace shoal::collective::internal::shm

#endif  // SHOAL_COLLECTIVE_SHM_RENDEZVOUS_H_
