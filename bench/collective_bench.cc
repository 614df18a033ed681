// All-reduce bandwidth of Shoal's collective groups, 4 ranks as 4 processes
// on this host, printed as `name value unit` lines:
//
//   allreduce_busbw_<S>MiB_1host     4 ranks on one host (shared memory)
//   allreduce_busbw_<S>MiB_2hosts    "2 hosts x 2 ranks": host ids a,a,b,b
//                                    (hierarchical: shared memory inside a
//                                    host, Gloo over loopback between)
//   allreduce_max_rel_error_<layout> largest |got - exact| / |exact|
//
// for float32 buffers of 1, 16 and 64 MiB. Method (as the baselines'
// scripts in bench/peers): 2 warm-up ops, then 50 / 20 / 10 timed ops, each
// preceded by a barrier; an op's time is the slowest rank's; the median is
// reported; busbw = bytes * 2(n-1)/n / time, GB = 1e9 bytes. Values stay
// exact: every element starts as a small integer and each op multiplies the
// (then equal) values by 4.
//
// The ranks meet through a store in a temp directory (no cluster needed).
//
//   ./build/bin/collective_bench [--layout 1host|2hosts|both]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "collective/file_store.h"
#include "collective/transport.h"
#include "shoal/collective.h"

namespace {

namespace coll = shoal::collective;

constexpr int kRanks = 4;
constexpr int kWarmup = 2;

struct Size {
  int mib;
  int iterations;
};
constexpr Size kSizes[] = {{1, 50}, {16, 20}, {64, 10}};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// One rank: every size in turn; rank 0 prints.
int RunRank(int rank, const std::string& dir, bool two_hosts) {
  const char* layout = two_hosts ? "2hosts" : "1host";
  coll::GroupOptions options;
  options.store = coll::internal::FileStore(dir);
  options.host_id = two_hosts ? (rank < 2 ? "host-a" : "host-b") : "host-a";
  options.interface_address = "127.0.0.1";
  options.timeout = std::chrono::milliseconds(20000);
  auto group = coll::Group::Create("bench", kRanks, rank, options);
  if (rank == 0) {
    printf("# %s: %d ranks, backend %s, %d host(s)\n", layout, kRanks,
           coll::BackendName(group->backend()), group->num_hosts());
    fflush(stdout);
  }
  double max_error = 0;
  for (const Size& size : kSizes) {
    const size_t count = static_cast<size_t>(size.mib) << 20 >> 2;
    std::vector<float> data(count);
    for (size_t i = 0; i < count; ++i) {
      data[i] = static_cast<float>(i % 61 + rank);
    }
    std::vector<double> times;
    for (int it = 0; it < kWarmup + size.iterations; ++it) {
      coll::Barrier(*group);
      auto t0 = std::chrono::steady_clock::now();
      coll::AllReduce(*group, data);
      std::chrono::duration<double> took =
          std::chrono::steady_clock::now() - t0;
      if (it >= kWarmup) times.push_back(took.count());
    }
    // Exact: sum over ranks of (i % 61 + r), times 4 per further op.
    const int ops = kWarmup + size.iterations;
    for (size_t i = 0; i < count; ++i) {
      double expected = std::ldexp(4.0 * (i % 61) + 6.0, 2 * (ops - 1));
      max_error = std::max(max_error, std::fabs(data[i] - expected) / expected);
    }
    coll::AllReduce(*group, times, coll::ReduceOp::kMax);
    if (rank == 0) {
      double t = Median(times);
      double bytes = static_cast<double>(count) * sizeof(float);
      printf("# %s %2d MiB: %8.3f ms/op (algbw %.3f GB/s)\n", layout, size.mib,
             t * 1e3, bytes / t / 1e9);
      printf("allreduce_busbw_%dMiB_%s %.3f GB/s\n", size.mib, layout,
             bytes * 2 * (kRanks - 1) / kRanks / t / 1e9);
      fflush(stdout);
    }
  }
  std::vector<double> error = {max_error};
  coll::AllReduce(*group, error, coll::ReduceOp::kMax);
  if (rank == 0) {
    printf("allreduce_max_rel_error_%s %g ratio\n", layout, error[0]);
    fflush(stdout);
  }
  return 0;
}

int RunLayout(bool two_hosts) {
  char tmpl[] = "/tmp/shoal-collective-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return 1;
  std::string dir = tmpl;
  std::vector<pid_t> pids;
  for (int r = 0; r < kRanks; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      int code = 1;
      try {
        code = RunRank(r, dir, two_hosts);
      } catch (const std::exception& e) {
        fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      fflush(stdout);
      _exit(code);
    }
    pids.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string layout = "both";
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--layout") == 0) layout = argv[i + 1];
  }
  int rc = 0;
  if (layout == "1host" || layout == "both") rc |= RunLayout(false);
  if (layout == "2hosts" || layout == "both") {
    rc |= RunLayout(true);
  }
  return rc;
}
