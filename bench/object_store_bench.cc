// The object store's costs: how many store calls the agent's loop can serve
// for small objects, and how fast a Put's write into the shared-memory arena
// is compared with a plain copy between private buffers.
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "object_store/object_store.h"

namespace shoal::object_store {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// A fresh arena of `capacity` bytes; null, with the benchmark marked
// skipped, when it cannot be created.
std::unique_ptr<ShmArena> NewArena(benchmark::State& state, uint64_t capacity) {
  static int counter = 0;
  auto arena = ShmArena::Create(
      absl::StrCat("bench-", getpid(), "-", counter++), capacity);
  if (!arena.ok()) {
    state.SkipWithError("cannot create the arena");
    return nullptr;
  }
  return *std::move(arena);
}

// Cycles through 1,024 objects, each created, sealed, read, released and
// deleted (five store calls) per iteration.
void RunStoreCycles(benchmark::State& state, ObjectStore& store,
                    uint64_t size) {
  std::vector<std::string> ids;
  for (int i = 0; i < 1024; ++i) ids.push_back(absl::StrCat("object-", i));
  size_t next = 0;
  for (auto _ : state) {
    const std::string& id = ids[next++ & 1023];
    auto created = store.Create(id, size, 0, 1, CopyKind::kPrimary);
    benchmark::DoNotOptimize(created);
    (void)store.Seal(id, 1);
    auto got = store.Get(id, 2);
    benchmark::DoNotOptimize(got);
    (void)store.Release(id, 2);
    (void)store.Delete(id);
  }
  state.counters["calls/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * 5, benchmark::Counter::kIsRate);
}

// Objects of state.range(0) bytes in an otherwise empty store.
void BM_StoreCycle(benchmark::State& state) {
  std::unique_ptr<ShmArena> arena = NewArena(state, 64 * kMiB);
  if (arena == nullptr) return;
  ObjectStore store(std::move(arena), nullptr);
  RunStoreCycles(state, store, state.range(0));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_StoreCycle)->Arg(64)->Arg(1024)->Arg(64 * 1024);

// The same with 1,000 other objects resident, so the hash map and the
// allocator's trees are not trivially small.
void BM_StoreCycleBusy(benchmark::State& state) {
  std::unique_ptr<ShmArena> arena = NewArena(state, 256 * kMiB);
  if (arena == nullptr) return;
  ObjectStore store(std::move(arena), nullptr);
  for (int i = 0; i < 1000; ++i) {
    std::string id = absl::StrCat("resident-", i);
    (void)store.Create(id, 100 + i * 37 % 4096, 0, 1, CopyKind::kPrimary);
    (void)store.Seal(id, 1);
  }
  RunStoreCycles(state, store, 1024);
}
BENCHMARK(BM_StoreCycleBusy);

constexpr uint64_t kCopySize = 256 * kMiB;

std::vector<uint8_t> Source() {
  std::vector<uint8_t> source(kCopySize);
  for (uint64_t i = 0; i < kCopySize; i += 4096) source[i] = i >> 12;
  return source;
}

// The write a Put does into pages already in memory (a store in use).
void BM_MemcpyIntoArena(benchmark::State& state) {
  std::vector<uint8_t> source = Source();
  std::unique_ptr<ShmArena> arena = NewArena(state, kCopySize);
  if (arena == nullptr) return;
  std::memset(arena->data(), 0, kCopySize);  // Fault the pages in first.
  for (auto _ : state) {
    std::memcpy(arena->data(), source.data(), kCopySize);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kCopySize);
}
BENCHMARK(BM_MemcpyIntoArena)->Unit(benchmark::kMillisecond)->UseRealTime();

// The same into a fresh arena: every page is faulted in by the copy (the
// first Puts into a new store pay this).
void BM_MemcpyIntoFreshArena(benchmark::State& state) {
  std::vector<uint8_t> source = Source();
  for (auto _ : state) {
    state.PauseTiming();
    std::unique_ptr<ShmArena> arena = NewArena(state, kCopySize);
    if (arena == nullptr) return;
    state.ResumeTiming();
    std::memcpy(arena->data(), source.data(), kCopySize);
    benchmark::ClobberMemory();
    state.PauseTiming();
    arena.reset();
    state.ResumeTiming();
  }
  state.SetBytesProcessed(state.iterations() * kCopySize);
}
BENCHMARK(BM_MemcpyIntoFreshArena)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The baseline: a copy between two private buffers already in memory.
void BM_MemcpyPrivate(benchmark::State& state) {
  std::vector<uint8_t> source = Source();
  std::vector<uint8_t> dest(kCopySize);
  std::memset(dest.data(), 0, kCopySize);
  for (auto _ : state) {
    std::memcpy(dest.data(), source.data(), kCopySize);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kCopySize);
}
BENCHMARK(BM_MemcpyPrivate)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace shoal::object_store

BENCHMARK_MAIN();
