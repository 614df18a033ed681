// Objects through the C++ API on one node, one line per figure as
// `name value unit`:
//   put_GBps            shoal::PutBuffer of 256 MiB (one copy into the
//                       node's shared memory), best of 5
//   get_GBps            shoal::Get of that 256 MiB object as a Buffer (it
//                       maps the object: no copy), best of 5
//   get_and_read_GBps   the same Get, then every byte read once
//   put_calls_per_s     shoal::Put of a small value (8 bytes, inline)
//   get_calls_per_s     shoal::Get of a small value
//   store_put_calls_per_s / store_get_calls_per_s
//                       the same through the store (128 KiB objects, just
//                       above the inline threshold)
//   put_ceiling_memcpy_GBps  single-thread memcpy of 256 MiB between private
//                       buffers (the ceiling for put)
//
//   ./build/bin/object_api_bench
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <vector>

#include "shoal/api.h"
#include "tests/testing/test_cluster.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

constexpr size_t kLarge = 256 << 20;

double MemcpyGBps() {
  std::vector<uint8_t> a(kLarge, 1), b(kLarge, 2);
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    auto t0 = Clock::now();
    memcpy(b.data(), a.data(), kLarge);
    best = std::max(best, kLarge / Seconds(t0) / 1e9);
    a[i] = b[kLarge - 1 - i];  // keep the copies observable
  }
  return best;
}

}  // namespace

int main() {
  shoal::testing::ClusterSpec spec;
  spec.nodes = {{"bench-0", 2, "", int64_t{2} << 30}};
  auto cluster = shoal::testing::TestCluster::Start(spec);
  if (!cluster.ok()) {
    fprintf(stderr, "cannot start the cluster: %s\n",
            std::string(cluster.status().message()).c_str());
    return 1;
  }
  (*cluster)->Connect();

  std::vector<uint8_t> data(kLarge);
  std::iota(data.begin(), data.end(), uint8_t{0});
  double put_best = 0, get_best = 0, read_best = 0;
  uint64_t checksum = 0;
  for (int i = 0; i < 5; ++i) {
    auto t0 = Clock::now();
    auto ref = shoal::PutBuffer(data.data(), data.size());
    double put_gbps = kLarge / Seconds(t0) / 1e9;
    printf("# round %d: put %.2f GB/s%s\n", i, put_gbps,
           i == 0 ? " (store pages touched for the first time)" : "");
    put_best = std::max(put_best, put_gbps);
    t0 = Clock::now();
    shoal::Buffer got = shoal::Get(ref);
    double get_s = Seconds(t0);
    get_best = std::max(get_best, kLarge / get_s / 1e9);
    const uint64_t* words = reinterpret_cast<const uint64_t*>(got.data());
    uint64_t sum = 0;
    for (size_t w = 0; w < kLarge / 8; ++w) sum += words[w];
    checksum += sum;
    read_best = std::max(read_best, kLarge / Seconds(t0) / 1e9);
  }

  auto calls_per_s = [](auto&& one_call, int n) {
    auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) one_call(i);
    return n / Seconds(t0);
  };
  std::vector<shoal::ObjectRef<int64_t>> small;
  small.reserve(100000);
  double put_calls = calls_per_s(
      [&](int i) { small.push_back(shoal::Put(int64_t{i})); }, 100000);
  int64_t total = 0;
  double get_calls =
      calls_per_s([&](int i) { total += shoal::Get(small[i]); }, 100000);
  small.clear();

  std::vector<uint8_t> medium(128 << 10, 7);
  std::vector<shoal::ObjectRef<shoal::Buffer>> stored;
  double store_put_calls = calls_per_s(
      [&](int) {
        stored.push_back(shoal::PutBuffer(medium.data(), medium.size()));
      },
      5000);
  double store_get_calls = calls_per_s(
      [&](int i) { total += shoal::Get(stored[i]).data()[0]; }, 5000);
  stored.clear();

  double memcpy_gbps = MemcpyGBps();
  shoal::Shutdown();
  (*cluster)->Stop();

  printf("# object API on one node; checksum %lu, total %ld\n",
         static_cast<unsigned long>(checksum), static_cast<long>(total));
  printf("put_GBps %.2f GB/s\n", put_best);
  printf("get_GBps %.1f GB/s\n", get_best);
  printf("get_and_read_GBps %.2f GB/s\n", read_best);
  printf("put_calls_per_s %.0f calls/s\n", put_calls);
  printf("get_calls_per_s %.0f calls/s\n", get_calls);
  printf("store_put_calls_per_s %.0f calls/s\n", store_put_calls);
  printf("store_get_calls_per_s %.0f calls/s\n", store_get_calls);
  printf("put_ceiling_memcpy_GBps %.2f GB/s\n", memcpy_gbps);
  return 0;
}
