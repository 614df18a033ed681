// The NCCL transport where no GPU is needed: it is linked in when Shoal was
// built with CUDA, and without a visible GPU it fails with an error that
// says so instead of crashing.
#include <memory>

#include "absl/status/status.h"
#include "collective/transport.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::collective::internal {
namespace {

using ::testing::HasSubstr;

TEST(NcclTransportTest, CompiledInExactlyWhenBuiltWithCuda) {
#ifdef SHOAL_WITH_NCCL
  EXPECT_TRUE(NcclCompiledIn());
#else
  EXPECT_FALSE(NcclCompiledIn());
#endif
}

TEST(NcclTransportTest, CreateFailsClearlyWithoutAGpu) {
  std::shared_ptr<Store> store = InProcessStore();
  TransportOptions options;
  options.key_prefix = "nccl_test";
  options.store = store.get();
  options.timeout = std::chrono::milliseconds(2000);
  auto transport = CreateNcclTransport(options);
  if (transport.ok()) {
    GTEST_SKIP() << "a GPU is visible; nccl_transport_gpu_test covers it";
  }
  EXPECT_EQ(transport.status().code(), absl::StatusCode::kFailedPrecondition)
      << transport.status();
  if (NcclCompiledIn()) {
    EXPECT_THAT(transport.status().message(),
                HasSubstr("no CUDA device is visible to this process "
                          "(CUDA_VISIBLE_DEVICES="));
  } else {
    EXPECT_THAT(transport.status().message(),
                HasSubstr("built without CUDA/NCCL"));
  }
}

TEST(NcclTransportTest, RejectsAMissingStore) {
  TransportOptions options;
  auto transport = CreateNcclTransport(options);
  EXPECT_FALSE(transport.ok());
}

}  // namespace
}  // namespace shoal::collective::internal
