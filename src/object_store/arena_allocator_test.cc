#include "object_store/arena_allocator.h"

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace shoal::object_store {
namespace {

constexpr uint64_t kA = ArenaAllocator::kAlignment;

TEST(BlockSizeTest, RoundsUpToAlignment) {
  struct Case {
    uint64_t size;
    uint64_t block;
  };
  const Case cases[] = {
      {0, kA},
      {1, kA},
      {kA - 1, kA},
      {kA, kA},
      {kA + 1, 2 * kA},
      {1000, 1024},
      {uint64_t{1} << 30, uint64_t{1} << 30},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ArenaAllocator::BlockSize(c.size), c.block) << c.size;
  }
  EXPECT_EQ(ArenaAllocator::BlockSize(UINT64_MAX), std::nullopt);
}

// Each case allocates `sizes` in order from an arena of `capacity` and
// expects the offsets (nullopt: no room).
TEST(ArenaAllocatorTest, AllocatesAlignedBlocksFromTheFront) {
  struct Case {
    const char* name;
    uint64_t capacity;
    std::vector<uint64_t> sizes;
    std::vector<std::optional<uint64_t>> offsets;
  };
  const std::vector<Case> cases = {
      {"aligned sizes", 4 * kA, {kA, kA, 2 * kA}, {0, kA, 2 * kA}},
      {"odd sizes round up", 4 * kA, {1, 65, 0}, {0, kA, 3 * kA}},
      {"exhaustion", 2 * kA, {kA, kA, 1}, {0, kA, std::nullopt}},
      {"too large", 2 * kA, {3 * kA, kA}, {std::nullopt, 0}},
      {"capacity rounds down", 2 * kA + 10, {2 * kA, 1}, {0, std::nullopt}},
      {"empty arena", 10, {1}, {std::nullopt}},
      {"huge size", 4 * kA, {UINT64_MAX}, {std::nullopt}},
  };
  for (const Case& c : cases) {
    ArenaAllocator allocator(c.capacity);
    for (size_t i = 0; i < c.sizes.size(); ++i) {
      std::optional<uint64_t> offset = allocator.Allocate(c.sizes[i]);
      EXPECT_EQ(offset, c.offsets[i]) << c.name << " #" << i;
      if (offset.has_value()) {
        EXPECT_EQ(*offset % kA, 0u) << c.name;
      }
    }
  }
}

TEST(ArenaAllocatorTest, CountsBytes) {
  ArenaAllocator allocator(16 * kA);
  EXPECT_EQ(allocator.capacity(), 16 * kA);
  EXPECT_EQ(allocator.free_bytes(), 16 * kA);
  std::optional<uint64_t> a = allocator.Allocate(100);  // 2 blocks
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(allocator.AllocatedSize(*a), 2 * kA);
  EXPECT_EQ(allocator.used_bytes(), 2 * kA);
  EXPECT_EQ(allocator.largest_free(), 14 * kA);
  EXPECT_EQ(allocator.num_allocated(), 1u);
  ASSERT_TRUE(allocator.Free(*a).ok());
  EXPECT_EQ(allocator.used_bytes(), 0u);
  EXPECT_EQ(allocator.AllocatedSize(*a), std::nullopt);
}

TEST(ArenaAllocatorTest, DoubleFreeIsAnError) {
  ArenaAllocator allocator(4 * kA);
  uint64_t a = *allocator.Allocate(kA);
  ASSERT_TRUE(allocator.Free(a).ok());
  absl::Status again = allocator.Free(a);
  EXPECT_EQ(again.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(allocator.Free(kA / 2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(allocator.free_bytes(), 4 * kA);
}

TEST(ArenaAllocatorTest, FragmentsThenCoalesces) {
  ArenaAllocator allocator(8 * kA);
  std::vector<uint64_t> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(*allocator.Allocate(kA));
  EXPECT_EQ(allocator.Allocate(1), std::nullopt);

  // Free every other block: half the memory free, but in single blocks.
  for (int i = 0; i < 8; i += 2) ASSERT_TRUE(allocator.Free(blocks[i]).ok());
  FragmentationStats holes = allocator.fragmentation_stats();
  EXPECT_EQ(holes.free_bytes, 4 * kA);
  EXPECT_EQ(holes.largest_free, kA);
  EXPECT_EQ(holes.num_free_blocks, 4u);
  EXPECT_DOUBLE_EQ(holes.fragmentation, 0.75);
  EXPECT_EQ(allocator.Allocate(2 * kA), std::nullopt);

  // Freeing the rest merges left, right and both ways into one block.
  for (int i : {1, 5, 3, 7}) ASSERT_TRUE(allocator.Free(blocks[i]).ok());
  FragmentationStats whole = allocator.fragmentation_stats();
  EXPECT_EQ(whole.num_free_blocks, 1u);
  EXPECT_EQ(whole.largest_free, 8 * kA);
  EXPECT_DOUBLE_EQ(whole.fragmentation, 0.0);
  EXPECT_EQ(allocator.Allocate(8 * kA), 0u);
}

TEST(ArenaAllocatorTest, PicksTheBestFit) {
  ArenaAllocator allocator(10 * kA);
  // Layout: [a:1][b:3][c:1][d:2][e:3], then free b and d: holes of 3 and 2.
  uint64_t a = *allocator.Allocate(kA);
  uint64_t b = *allocator.Allocate(3 * kA);
  uint64_t c = *allocator.Allocate(kA);
  uint64_t d = *allocator.Allocate(2 * kA);
  uint64_t e = *allocator.Allocate(3 * kA);
  ASSERT_TRUE(allocator.Free(b).ok());
  ASSERT_TRUE(allocator.Free(d).ok());
  EXPECT_EQ(allocator.Allocate(2 * kA), d);  // The 2-block hole, not b's.
  EXPECT_EQ(allocator.Allocate(kA), b);      // Lowest offset of equal fits.
  (void)a;
  (void)c;
  (void)e;
}

// Random allocations and frees checked against a model of the arena: no two
// live blocks overlap, all are aligned and inside the arena, the byte counts
// agree, and once everything is freed the arena is one block again.
TEST(ArenaAllocatorTest, RandomFuzzAgainstModel) {
  for (uint32_t seed : {1u, 2u, 3u, 42u}) {
    std::mt19937_64 rng(seed);
    const uint64_t capacity = 1 << 20;
    ArenaAllocator allocator(capacity);
    std::map<uint64_t, uint64_t> live;  // offset -> block size
    uint64_t live_bytes = 0;
    for (int step = 0; step < 20000; ++step) {
      bool allocate = live.empty() || rng() % 100 < 55;
      if (allocate) {
        // Mostly small, some large, a few empty.
        uint64_t size = rng() % 10 == 0 ? rng() % (capacity / 8) : rng() % 4096;
        std::optional<uint64_t> offset = allocator.Allocate(size);
        uint64_t block = *ArenaAllocator::BlockSize(size);
        if (!offset.has_value()) {
          EXPECT_LT(allocator.largest_free(), block) << "seed " << seed;
          continue;
        }
        ASSERT_EQ(*offset % kA, 0u);
        ASSERT_LE(*offset + block, capacity);
        auto next = live.lower_bound(*offset);
        if (next != live.end()) {
          ASSERT_LE(*offset + block, next->first) << "overlaps next block";
        }
        if (next != live.begin()) {
          auto prev = std::prev(next);
          ASSERT_LE(prev->first + prev->second, *offset)
              << "overlaps previous block";
        }
        live.emplace(*offset, block);
        live_bytes += block;
      } else {
        auto victim = live.begin();
        std::advance(victim, rng() % live.size());
        ASSERT_TRUE(allocator.Free(victim->first).ok());
        live_bytes -= victim->second;
        live.erase(victim);
      }
      ASSERT_EQ(allocator.used_bytes(), live_bytes);
      ASSERT_EQ(allocator.num_allocated(), live.size());
    }
    for (const auto& [offset, size] : live) {
      ASSERT_TRUE(allocator.Free(offset).ok());
    }
    FragmentationStats stats = allocator.fragmentation_stats();
    EXPECT_EQ(stats.num_free_blocks, 1u) << "seed " << seed;
    EXPECT_EQ(stats.largest_free, capacity);
  }
}

}  // namespace
}  // namespace shoal::object_store
