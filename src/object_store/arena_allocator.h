// Hands out 64-byte aligned blocks of an address range [0, capacity): the
// object store's memory manager. It stores only offsets, never touches the
// memory itself, so it works the same over shared memory, a private buffer,
// or a range in a test.
//
// Best fit with coalescing: the smallest free block that fits is split (the
// lowest offset among equal sizes, which keeps allocations packed at the
// front); a freed block merges with free neighbours. Allocate and Free are
// O(log n) in the number of blocks.
//
// Threading: not thread-safe; the owner (the object store, on the agent's
// event loop) serializes calls.
#ifndef SHOAL_OBJECT_STORE_ARENA_ALLOCATOR_H_
#define SHOAL_OBJECT_STORE_ARENA_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"

namespace shoal::object_store {

struct FragmentationStats {
  uint64_t free_bytes = 0;
  uint64_t largest_free = 0;
  uint64_t num_free_blocks = 0;
  uint64_t num_allocated_blocks = 0;
  // 1 - largest_free / free_bytes: 0 when all free memory is one block, near
  // 1 when it is scattered in many small holes. 0 when nothing is free.
  double fragmentation = 0;
};

class ArenaAllocator {
 public:
  static constexpr uint64_t kAlignment = 64;

  // Rounds `size` up to a multiple of kAlignment (at least kAlignment, so
  // that an empty object still gets its own offset). Returns nullopt when the
  // rounded size would overflow.
  static std::optional<uint64_t> BlockSize(uint64_t size);

  // Manages [0, capacity); capacity is rounded down to kAlignment.
  explicit ArenaAllocator(uint64_t capacity);

  ArenaAllocator(const ArenaAllocator&) = delete;
  ArenaAllocator& operator=(const ArenaAllocator&) = delete;

  // Returns the offset of a block of at least `size` bytes (BlockSize(size)
  // exactly), aligned to kAlignment, or nullopt when no free block is large
  // enough.
  std::optional<uint64_t> Allocate(uint64_t size);

  // Returns the block at `offset` to the free pool. InvalidArgument when
  // `offset` is not the start of an allocated block (a double free).
  absl::Status Free(uint64_t offset);

  // The size of the allocated block at `offset`, or nullopt.
  std::optional<uint64_t> AllocatedSize(uint64_t offset) const;

  uint64_t capacity() const { return capacity_; }
  uint64_t free_bytes() const { return free_bytes_; }
  uint64_t used_bytes() const { return capacity_ - free_bytes_; }
  uint64_t largest_free() const;
  uint64_t num_allocated() const { return allocated_.size(); }
  FragmentationStats fragmentation_stats() const;

 private:
  void InsertFree(uint64_t offset, uint64_t size);
  void EraseFree(std::map<uint64_t, uint64_t>::iterator it);

  const uint64_t capacity_;
  uint64_t free_bytes_;
  // Free blocks by offset (for coalescing) and by (size, offset) (for fit).
  std::map<uint64_t, uint64_t> free_by_offset_;
  std::set<std::pair<uint64_t, uint64_t>> free_by_size_;
  std::unordered_map<uint64_t, uint64_t> allocated_;  // offset -> size
};

}  // namespace shoal::object_store

#endif  // SHOAL_OBJECT_STORE_ARENA_ALLOCATOR_H_
