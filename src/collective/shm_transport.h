// The shared-memory transport: the ranks of one host (processes or threads)
// exchange data through one shared segment.
//
// Layout (shm_segment.h): a header, a control block per rank (futex words on
// their own cache lines), then kPipelineDepth buffers of one slot per rank.
// Every operation
// is a sequence of steps numbered alike on every rank; step k uses buffer
// k % kPipelineDepth. A step has up to three phases, each ending with the
// rank publishing a counter that the others wait on (futex, no busy wait):
//
//   in       the rank copied its piece of the step's data into its slot
//   reduced  the rank reduced its share (1/n of the step) across all slots
//   done     the rank finished reading the buffer; it may be reused
//
// Large all-reduces are pipelined over steps of slot-sized chunks so that the
// slots stay in cache; data crosses DRAM once in (the caller's buffer) and
// once out. Small ones take a single step in which every rank reduces all
// slots itself, in rank order (one wait instead of two).
//
// Failure: while waiting, a rank checks every ~100 ms that its peers' pids
// are alive and that the timeout has not passed; on a failure it marks the
// segment aborted (with a message and the ranks at fault, in the group's
// numbering) and wakes everyone, so that every rank fails fast with the same
// error. The segment stays aborted: later operations fail at once.
//
// Threading: used by one thread at a time.
#ifndef SHOAL_COLLECTIVE_SHM_TRANSPORT_H_
#define SHOAL_COLLECTIVE_SHM_TRANSPORT_H_

#include <memory>

#include "collective/transport.h"

namespace shoal::collective::internal {

class SharedMemoryTransport : public Transport {
 public:
  static absl::StatusOr<std::unique_ptr<SharedMemoryTransport>> Create(
      const TransportOptions& options);

  // Reduces every rank's data into root's data (the others' data may be
  // overwritten).
  virtual absl::Status Reduce(void* data, size_t count, DataType type,
                              ReduceOp op, int root, uint32_t tag) = 0;
  // Marks the segment aborted with `status` (which should name its ranks
  // with GroupRankFailure) so that every rank's pending and later operations
  // fail with it. Keeps the first abort.
  virtual void Abort(const absl::Status& status) = 0;
};

}  // namespace shoal::collective::internal

#endif  // SHOAL_COLLECTIVE_SHM_TRANSPORT_H_
