// The NCCL transport: buffers are device memory, and every operation is one
// NCCL collective on the transport's own CUDA stream.
//
// NCCL blocks in a collective (and in ncclCommInitRank) until every rank
// joins, so a dead rank would hang the others. The communicator is therefore
// non-blocking: this rank polls the stream and the communicator's error
// state, and past the timeout aborts the communicator, which makes the
// kernels return, and names the ranks it was waiting for.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "collective/transport.h"
#include "common/environment.h"

namespace shoal::collective::internal {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

ncclDataType_t NcclType(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      break;
  }
  return ncclInt64;
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kProduct:
      break;
  }
  return ncclProd;
}

std::string VisibleDevices() {
  return env::Find(env::Var::kCudaVisibleDevices).value_or("unset");
}

// The device this process drives: SHOAL_NCCL_DEVICE when set, else the
// first visible one (a launcher gives each process its own GPU through
// CUDA_VISIBLE_DEVICES).
absl::StatusOr<int> ChooseDevice() {
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess || count == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no CUDA device is visible to this process (CUDA_VISIBLE_DEVICES=",
        VisibleDevices(), "; CUDA says: ",
        error == cudaSuccess ? "0 devices" : cudaGetErrorString(error),
        "); run it on a GPU host or use a CPU backend"));
  }
  int device = 0;
  if (std::optional<std::string> chosen = env::Find(env::Var::kNcclDevice)) {
    if (!absl::SimpleAtoi(*chosen, &device) || device < 0 || device >= count) {
      return absl::InvalidArgumentError(
          absl::StrCat("SHOAL_NCCL_DEVICE=", *chosen, " is not one of the ",
                       count, " visible CUDA devices (0..", count - 1, ")"));
    }
  }
  return device;
}

// One rank's NCCL communicator. Used by one thread at a time.
class NcclTransport final : public Transport {
 public:
  static absl::StatusOr<std::unique_ptr<Transport>> Create(
      const TransportOptions& options);
  ~NcclTransport() override;

  absl::Status AllReduce(void* data, size_t count, DataType type, ReduceOp op,
                         uint32_t tag) override;
  absl::Status AllGather(const void* input, void* output, size_t count,
                         DataType type, uint32_t tag) override;
  absl::Status ReduceScatter(const void* input, void* output, size_t count,
                             DataType type, ReduceOp op, uint32_t tag) override;
  absl::Status Broadcast(void* data, size_t count, DataType type, int root,
                         uint32_t tag) override;
  absl::Status Barrier(uint32_t tag) override;

 private:
  NcclTransport(const TransportOptions& options, int device)
      : options_(options), device_(device) {}

  // Issues an operation (`issue` returns NCCL's result) and waits for it.
  template <typename Fn>
  absl::Status Run(const char* what, Fn&& issue);
  // Waits until the communicator is ready and the stream has drained, or
  // aborts the communicator at the deadline.
  absl::Status Wait(const char* what, Clock::time_point deadline);
  absl::Status Fail(absl::StatusCode code, const std::string& message,
                    const std::vector<int>& ranks);

  const TransportOptions options_;
  const int device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;  // one float on the device, for Barrier
  absl::Status failure_;     // sticky: the first failure
};

absl::Status NcclTransport::Fail(absl::StatusCode code,
                                 const std::string& message,
                                 const std::vector<int>& ranks) {
  if (comm_ != nullptr) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  failure_ = RankFailure(code, message, ranks);
  return failure_;
}

absl::Status NcclTransport::Wait(const char* what, Clock::time_point deadline) {
  for (int polls = 0;; ++polls) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t result = ncclCommGetAsyncError(comm_, &state);
    if (result != ncclSuccess) state = result;
    if (state != ncclSuccess && state != ncclInProgress) {
      return Fail(
          absl::StatusCode::kUnavailable,
          absl::StrCat("NCCL ", what, " failed: ", ncclGetErrorString(state),
                       " (", ncclGetLastError(comm_), ") while waiting for ",
                       DescribeRanks(options_, OtherRanks(options_))),
          OtherRanks(options_));
    }
    if (state == ncclSuccess) {
      cudaError_t error =
          stream_ == nullptr ? cudaSuccess : cudaStreamQuery(stream_);
      if (error == cudaSuccess) return absl::OkStatus();
      if (error != cudaErrorNotReady) {
        return Fail(absl::StatusCode::kInternal,
                    absl::StrCat("CUDA failed during NCCL ", what, ": ",
                                 cudaGetErrorString(error)),
                    {});
      }
    }
    if (Clock::now() > deadline) {
      return Fail(
          absl::StatusCode::kDeadlineExceeded,
          absl::StrCat("NCCL ", what, ": no answer within ",
                       options_.timeout.count(), " ms while waiting for ",
                       DescribeRanks(options_, OtherRanks(options_)),
                       "; the group cannot be used any more"),
          OtherRanks(options_));
    }
    if (polls < 1000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
}

template <typename Fn>
absl::Status NcclTransport::Run(const char* what, Fn&& issue) {
  if (!failure_.ok()) return failure_;
  cudaError_t error = cudaSetDevice(device_);
  if (error != cudaSuccess) {
    return Fail(absl::StatusCode::kInternal,
                absl::StrCat("cudaSetDevice(", device_,
                             ") failed: ", cudaGetErrorString(error)),
                {});
  }
  const auto deadline = Clock::now() + options_.timeout;
  ncclResult_t result = issue();
  if (result != ncclSuccess && result != ncclInProgress) {
    return Fail(
        absl::StatusCode::kInternal,
        absl::StrCat("NCCL ", what, " failed: ", ncclGetErrorString(result),
                     " (", ncclGetLastError(comm_), ")"),
        {});
  }
  return Wait(what, deadline);
}

absl::StatusOr<std::unique_ptr<Transport>> NcclTransport::Create(
    const TransportOptions& options) {
  if (absl::Status valid = CheckRankAndStore(options, "NCCL"); !valid.ok()) {
    return valid;
  }
  absl::StatusOr<int> device = ChooseDevice();
  if (!device.ok()) return device.status();
  cudaError_t error = cudaSetDevice(*device);
  if (error != cudaSuccess) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cudaSetDevice(", *device, ") failed: ", cudaGetErrorString(error)));
  }
  auto transport =
      std::unique_ptr<NcclTransport>(new NcclTransport(options, *device));
  const auto deadline = Clock::now() + options.timeout;

  // Rank 0 makes the communicator's id; the others read it from the store.
  const std::string key = absl::StrCat(options.key_prefix, "/nccl/unique_id");
  ncclUniqueId id;
  if (options.rank == 0) {
    ncclResult_t result = ncclGetUniqueId(&id);
    if (result != ncclSuccess) {
      return absl::UnavailableError(absl::StrCat(
          "ncclGetUniqueId failed: ", ncclGetErrorString(result),
          "; check that this host has a network interface NCCL can use "
          "(NCCL_SOCKET_IFNAME)"));
    }
    try {
      options.store->Set(key, absl::Base64Escape(absl::string_view(
                                  id.internal, sizeof(id.internal))));
    } catch (const std::exception& e) {
      return absl::UnavailableError(
          absl::StrCat("could not publish NCCL's id: ", e.what()));
    }
  } else {
    std::string encoded;
    try {
      encoded = options.store->Get(key, options.timeout);
    } catch (const std::exception& e) {
      return RankFailure(
          absl::StatusCode::kDeadlineExceeded,
          absl::StrCat("NCCL rendezvous: no id from ",
                       DescribeRanks(options, {0}), " within ",
                       options.timeout.count(), " ms (", e.what(),
                       "); check that every rank created the group"),
          {0});
    }
    std::string decoded;
    if (!absl::Base64Unescape(encoded, &decoded) ||
        decoded.size() != sizeof(id.internal)) {
      return absl::InternalError(
          absl::StrCat("rendezvous key ", key, " does not hold an NCCL id"));
    }
    std::memcpy(id.internal, decoded.data(), sizeof(id.internal));
  }

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t result = ncclCommInitRankConfig(&transport->comm_, options.size,
                                               id, options.rank, &config);
  if (result != ncclSuccess && result != ncclInProgress) {
    if (transport->comm_ != nullptr) ncclCommAbort(transport->comm_);
    transport->comm_ = nullptr;
    return absl::UnavailableError(
        absl::StrCat("ncclCommInitRank failed: ", ncclGetErrorString(result),
                     " (", ncclGetLastError(nullptr), ")"));
  }
  if (absl::Status ready = transport->Wait("rendezvous", deadline);
      !ready.ok()) {
    return ready;
  }
  error = cudaStreamCreateWithFlags(&transport->stream_, cudaStreamNonBlocking);
  if (error == cudaSuccess) error = cudaMalloc(&transport->scratch_, 4);
  if (error != cudaSuccess) {
    return absl::ResourceExhaustedError(
        absl::StrCat("CUDA could not make a stream and a scratch buffer on "
                     "device ",
                     *device, ": ", cudaGetErrorString(error)));
  }
  return transport;
}

NcclTransport::~NcclTransport() {
  cudaSetDevice(device_);
  if (comm_ != nullptr) {
    // (A failure aborted the communicator already.) Finalizing flushes
    // NCCL's work with the peers; if that does not end within the timeout,
    // abort rather than hang in the destructor.
    ncclResult_t state = ncclCommFinalize(comm_);
    const auto deadline = Clock::now() + options_.timeout;
    while (state == ncclInProgress && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) break;
    }
    if (state == ncclSuccess) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
  }
  if (scratch_ != nullptr) cudaFree(scratch_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::Status NcclTransport::AllReduce(void* data, size_t count, DataType type,
                                      ReduceOp op, uint32_t tag) {
  if (count == 0) return failure_;
  return Run("all-reduce", [&] {
    return ncclAllReduce(data, data, count, NcclType(type), NcclOp(op), comm_,
                         stream_);
  });
}

absl::Status NcclTransport::AllGather(const void* input, void* output,
                                      size_t count, DataType type,
                                      uint32_t tag) {
  if (count == 0) return failure_;
  return Run("all-gather", [&] {
    return ncclAllGather(input, output, count, NcclType(type), comm_, stream_);
  });
}

absl::Status NcclTransport::ReduceScatter(const void* input, void* output,
                                          size_t count, DataType type,
                                          ReduceOp op, uint32_t tag) {
  if (count == 0) return failure_;
  return Run("reduce-scatter", [&] {
    return ncclReduceScatter(input, output, count, NcclType(type), NcclOp(op),
                             comm_, stream_);
  });
}

absl::Status NcclTransport::Broadcast(void* data, size_t count, DataType type,
                                      int root, uint32_t tag) {
  if (absl::Status valid = CheckBroadcastRoot(root, options_.size);
      !valid.ok()) {
    return valid;
  }
  if (count == 0) return failure_;
  return Run("broadcast", [&] {
    return ncclBroadcast(data, data, count, NcclType(type), root, comm_,
                         stream_);
  });
}

absl::Status NcclTransport::Barrier(uint32_t tag) {
  return Run("barrier", [&] {
    return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_,
                         stream_);
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> CreateNcclTransport(
    const TransportOptions& options) {
  return NcclTransport::Create(options);
}

bool NcclCompiledIn() { return true; }

}  // namespace shoal::collective::internal
