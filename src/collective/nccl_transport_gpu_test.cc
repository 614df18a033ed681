// The NCCL transport on real GPUs (label gpu): an all-reduce on one rank
// per GPU, ranks as forked processes over a file store. Skips where no GPU
// (or, for two ranks, only one) is visible.
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/file_store.h"
#include "collective/transport.h"
#include "gtest/gtest.h"

namespace shoal::collective::internal {
namespace {

// CUDA must not be initialized in a process that forks ranks, so the
// parent counts devices in a child of its own.
int VisibleGpus() {
  pid_t pid = fork();
  if (pid == 0) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    _exit(count > 100 ? 100 : count);
  }
  int wstatus = 0;
  if (pid < 0 || waitpid(pid, &wstatus, 0) != pid || !WIFEXITED(wstatus)) {
    return 0;
  }
  return WEXITSTATUS(wstatus);
}

// In a child: rank `rank` of `size` on GPU `rank` all-reduces 1M floats of
// rank+1; exits 0 if every element is the sum.
[[noreturn]] void RunRank(const std::filesystem::path& dir, int size,
                          int rank) {
  setenv("SHOAL_NCCL_DEVICE", std::to_string(rank).c_str(), 1);
  std::shared_ptr<Store> store = FileStore(dir.string());
  TransportOptions options;
  options.key_prefix = "nccl_gpu";
  options.size = size;
  options.rank = rank;
  options.store = store.get();
  options.timeout = std::chrono::milliseconds(60000);
  auto transport = CreateNcclTransport(options);
  if (!transport.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank,
                 transport.status().ToString().c_str());
    _exit(2);
  }
  constexpr size_t kCount = 1 << 20;
  std::vector<float> host(kCount, static_cast<float>(rank + 1));
  void* device = nullptr;
  if (cudaMalloc(&device, kCount * sizeof(float)) != cudaSuccess ||
      cudaMemcpy(device, host.data(), kCount * sizeof(float),
                 cudaMemcpyHostToDevice) != cudaSuccess) {
    _exit(3);
  }
  absl::Status status =
      (*transport)
          ->AllReduce(device, kCount, DataType::kFloat32, ReduceOp::kSum, 0);
  if (!status.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, status.ToString().c_str());
    _exit(4);
  }
  if (!(*transport)->Barrier(1).ok()) _exit(5);
  if (cudaMemcpy(host.data(), device, kCount * sizeof(float),
                 cudaMemcpyDeviceToHost) != cudaSuccess) {
    _exit(6);
  }
  const float want = size * (size + 1) / 2.0f;
  for (float value : host) {
    if (value != want) _exit(7);
  }
  cudaFree(device);
  transport->reset();
  _exit(0);
}

void RunRanks(int size) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              absl::StrCat("nccl_gpu_test_", getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::vector<pid_t> children;
  for (int rank = 0; rank < size; ++rank) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) RunRank(dir, size, rank);
    children.push_back(pid);
  }
  for (int rank = 0; rank < size; ++rank) {
    int wstatus = 0;
    ASSERT_EQ(waitpid(children[rank], &wstatus, 0), children[rank]);
    ASSERT_TRUE(WIFEXITED(wstatus)) << "rank " << rank << " was killed";
    EXPECT_EQ(WEXITSTATUS(wstatus), 0) << "rank " << rank;
  }
  std::filesystem::remove_all(dir);
}

TEST(NcclTransportGpuTest, OneRankAllReduce) {
  if (VisibleGpus() < 1) GTEST_SKIP() << "no CUDA device is visible";
  RunRanks(1);
}

TEST(NcclTransportGpuTest, TwoRankAllReduce) {
  int gpus = VisibleGpus();
  if (gpus < 2) {
    GTEST_SKIP() << "needs 2 visible GPUs (NCCL puts one rank per GPU); "
                 << gpus << " visible";
  }
  RunRanks(2);
}

}  // namespace
}  // namespace shoal::collective::internal
