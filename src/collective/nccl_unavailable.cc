// The NCCL transport of a Shoal built without CUDA/NCCL: every request for
// it fails with what to do about it.
#include "collective/transport.h"

namespace shoal::collective::internal {

absl::StatusOr<std::unique_ptr<Transport>> CreateNcclTransport(
    const TransportOptions& options) {
  return absl::FailedPreconditionError(
      "Shoal was built without CUDA/NCCL; rebuild on a machine with CUDA at "
      "/usr/local/cuda (or -DSHOAL_CUDA_ROOT=...)");
}

bool NcclCompiledIn() { return false; }

}  // namespace shoal::collective::internal
