#include "object_store/arena_allocator.h"

#include <iterator>
#include <limits>

#include "absl/strings/str_cat.h"

namespace shoal::object_store {

std::optional<uint64_t> ArenaAllocator::BlockSize(uint64_t size) {
  if (size == 0) return kAlignment;
  if (size > std::numeric_limits<uint64_t>::max() - (kAlignment - 1)) {
    return std::nullopt;
  }
  return (size + kAlignment - 1) / kAlignment * kAlignment;
}

ArenaAllocator::ArenaAllocator(uint64_t capacity)
    : capacity_(capacity / kAlignment * kAlignment), free_bytes_(0) {
  if (capacity_ > 0) InsertFree(0, capacity_);
}

void ArenaAllocator::InsertFree(uint64_t offset, uint64_t size) {
  free_by_offset_.emplace(offset, size);
  free_by_size_.emplace(size, offset);
  free_bytes_ += size;
}

void ArenaAllocator::EraseFree(std::map<uint64_t, uint64_t>::iterator it) {
  free_by_size_.erase({it->second, it->first});
  free_bytes_ -= it->second;
  free_by_offset_.erase(it);
}

std::optional<uint64_t> ArenaAllocator::Allocate(uint64_t size) {
  std::optional<uint64_t> block = BlockSize(size);
  if (!block.has_value() || *block > free_bytes_) return std::nullopt;
  auto fit = free_by_size_.lower_bound({*block, 0});
  if (fit == free_by_size_.end()) return std::nullopt;
  const auto [free_size, offset] = *fit;
  EraseFree(free_by_offset_.find(offset));
  if (free_size > *block) InsertFree(offset + *block, free_size - *block);
  allocated_.emplace(offset, *block);
  return offset;
}

absl::Status ArenaAllocator::Free(uint64_t offset) {
  auto it = allocated_.find(offset);
  if (it == allocated_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no allocated block starts at offset ", offset,
                     " (freed twice, or never allocated)"));
  }
  uint64_t start = offset;
  uint64_t size = it->second;
  allocated_.erase(it);

  auto next = free_by_offset_.lower_bound(start);
  if (next != free_by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      EraseFree(prev);
    }
  }
  if (next != free_by_offset_.end() && start + size == next->first) {
    size += next->second;
    EraseFree(next);
  }
  InsertFree(start, size);
  return absl::OkStatus();
}

std::optional<uint64_t> ArenaAllocator::AllocatedSize(uint64_t offset) const {
  auto it = allocated_.find(offset);
  if (it == allocated_.end()) return std::nullopt;
  return it->second;
}

uint64_t ArenaAllocator::largest_free() const {
  return free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
}

FragmentationStats ArenaAllocator::fragmentation_stats() const {
  FragmentationStats stats;
  stats.free_bytes = free_bytes_;
  stats.largest_free = largest_free();
  stats.num_free_blocks = free_by_offset_.size();
  stats.num_allocated_blocks = allocated_.size();
  if (free_bytes_ > 0) {
    stats.fragmentation = 1.0 - static_cast<double>(stats.largest_free) /
                                    static_cast<double>(free_bytes_);
  }
  return stats;
}

}  // namespace shoal::object_store
