// Writes per second of the head's storage backends, for each
// --storage-sync: SQLite (WAL; normal: synchronous=NORMAL, full:
// synchronous=FULL) and Redis (a real redis-server on loopback, appendonly
// yes; normal: appendfsync everysec, full: appendfsync always). Each Put is
// one row of the head's tables, acknowledged once it survives a crash of
// the head (normal) or of its host (full).
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "head/redis_storage.h"
#include "head/sqlite_storage.h"
#include "tests/testing/redis_server.h"

namespace {

using shoal::TableStorage;
using shoal::testing::RedisServer;

// A row about the size of a node's or a placement group's record.
const std::string& Row() {
  static const std::string row(300, 'x');
  return row;
}

void Puts(benchmark::State& state, TableStorage* storage) {
  int64_t i = 0;
  for (auto _ : state) {
    absl::Status st =
        storage->Put("kv", absl::StrCat("key-", i++ % 1000), Row());
    if (!st.ok()) {
      state.SkipWithError(std::string(st.message()).c_str());
      return;
    }
  }
  state.SetItemsProcessed(state.iterations());
}

void SqlitePuts(benchmark::State& state, shoal::StorageSync sync) {
  char tmpl[] = "/tmp/shoal-storage-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return state.SkipWithError("mkdtemp failed");
  const std::string dir = tmpl;
  {
    auto storage = shoal::OpenSqliteTableStorage(dir + "/head.db", sync);
    if (!storage.ok()) return state.SkipWithError("cannot open SQLite");
    Puts(state, storage->get());
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}
void BM_SqlitePutSyncNormal(benchmark::State& state) {
  SqlitePuts(state, shoal::StorageSync::kNormal);
}
BENCHMARK(BM_SqlitePutSyncNormal)->UseRealTime();
void BM_SqlitePutSyncFull(benchmark::State& state) {
  SqlitePuts(state, shoal::StorageSync::kFull);
}
BENCHMARK(BM_SqlitePutSyncFull)->UseRealTime();

void RedisPuts(benchmark::State& state, shoal::StorageSync sync) {
  const bool full = sync == shoal::StorageSync::kFull;
  auto server =
      RedisServer::Start({"--appendfsync", full ? "always" : "everysec"});
  if (!server.ok()) {
    return state.SkipWithError(std::string(server.status().message()).c_str());
  }
  shoal::RedisStorageOptions options;
  options.sync = sync;
  auto storage = shoal::OpenRedisTableStorage((*server)->url(), options);
  if (!storage.ok()) {
    return state.SkipWithError(std::string(storage.status().message()).c_str());
  }
  Puts(state, storage->get());
}
void BM_RedisPutSyncNormal(benchmark::State& state) {
  RedisPuts(state, shoal::StorageSync::kNormal);
}
BENCHMARK(BM_RedisPutSyncNormal)->UseRealTime();
void BM_RedisPutSyncFull(benchmark::State& state) {
  RedisPuts(state, shoal::StorageSync::kFull);
}
BENCHMARK(BM_RedisPutSyncFull)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
