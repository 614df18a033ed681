// The segment behind the shared-memory transport (shm_transport.h): its
// layout, how the ranks of a host come to share it, and the futex words
// they wait on.
//
// Layout: a Header, a RankControl per rank (futex words on their own cache
// lines), then kPipelineDepth buffers of one slot per rank.
//
// Setup: rank 0 makes the segment as a memfd (so that nothing outlives the
// ranks even if they crash) and publishes /proc/<pid>/fd/<fd> in the store;
// the others open that path and map it. Rank 0 keeps the fd open until every
// rank has mapped the segment.
//
// Threading: the words in the segment are shared by processes; a Segment
// (one rank's mapping) is used by one thread at a time.
#ifndef SHOAL_COLLECTIVE_SHM_SEGMENT_H_
#define SHOAL_COLLECTIVE_SHM_SEGMENT_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "collective/transport.h"

namespace shoal::collective::internal::shm {

inline constexpr uint32_t kPipelineDepth = 2;
// Two cache lines: no false sharing via the adjacent-line prefetcher.
inline constexpr size_t kLine = 128;
inline constexpr size_t kMaxAbortRanks = 64;

size_t RoundUp(size_t value, size_t multiple);

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Futexes on shared memory: not FUTEX_PRIVATE, the waiters are in other
// processes. FutexWait returns when *word != expected, on a wake, or after
// `timeout`.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected,
               std::chrono::milliseconds timeout);
void FutexWakeAll(std::atomic<uint32_t>* word);

// value has reached target, modulo 2^32 (step numbers wrap).
inline bool Reached(uint32_t value, uint32_t target) {
  return static_cast<int32_t>(value - target) >= 0;
}

// A phase counter that ranks publish and their peers wait on; `waiters`
// lets the publisher skip the wake syscall when nobody sleeps.
struct alignas(kLine) Counter {
  std::atomic<uint32_t> value;
  std::atomic<uint32_t> waiters;
};

enum class OpKind : uint32_t {
  kAllReduce = 1,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kBarrier,
  kReduce,
};

// What a rank is doing at the first step of an operation; compared with its
// peers' so that mismatched calls fail instead of mixing data.
struct OpDescriptor {
  uint32_t step;
  uint32_t kind;
  uint32_t type;
  uint32_t op;
  int32_t root;
  uint64_t count;

  bool operator==(const OpDescriptor&) const = default;
  std::string ToString() const;
};

struct RankControl {
  Counter in;
  Counter reduced;
  Counter done;
  alignas(kLine) std::atomic<int32_t> pid;
  std::atomic<uint32_t> left;
  // By step % kPipelineDepth; plain data published by `in`.
  OpDescriptor ops[kPipelineDepth];
};
static_assert(sizeof(RankControl) % kLine == 0);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

struct Header {
  uint64_t magic;
  uint64_t nonce;
  uint64_t size;
  uint64_t slot_bytes;
  uint64_t control_offset;
  uint64_t data_offset;
  alignas(kLine) std::atomic<uint32_t> attached;
  alignas(kLine) std::atomic<uint32_t> abort_state;  // 0 no, 1 writing, 2 set
  int32_t abort_code;
  uint32_t num_abort_ranks;
  int32_t abort_ranks[kMaxAbortRanks];
  char abort_message[1024];
};

// One rank's mapping of the segment; unmapped when destroyed. A
// default-constructed Segment maps nothing (a group of one needs none).
class Segment {
 public:
  // Rank 0 creates the segment and waits until every rank has mapped it;
  // the others map it. A slot is SHOAL_SHM_SLOT_BYTES when set, else
  // 64 MiB / kPipelineDepth / size clamped to 64..512 KiB (in pages).
  // REQUIRES: options.size > 1, options.store != nullptr.
  static absl::StatusOr<Segment> Attach(const TransportOptions& options);

  Segment() = default;
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  ~Segment();

  bool mapped() const { return base_ != nullptr; }
  Header* header() const { return reinterpret_cast<Header*>(base_); }
  RankControl* control() const {
    return reinterpret_cast<RankControl*>(base_ + header()->control_offset);
  }
  char* data() const { return base_ + header()->data_offset; }
  size_t slot_bytes() const { return header()->slot_bytes; }

 private:
  Segment(char* base, size_t bytes) : base_(base), bytes_(bytes) {}

  char* base_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace shoal::collective::internal::shm

#endif  // SHOAL_COLLECTIVE_SHM_SEGMENT_H_
