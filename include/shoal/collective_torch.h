// Collective operations on libtorch tensors. Header-only, so that Shoal's
// libraries do not depend on libtorch; include it from code that links
// torch.
//
//   shoal::collective::AllReduce(*group, param.grad());
//
// Tensors must be contiguous CPU tensors (CUDA tensors with a kNccl group) of
// float32, bfloat16, float64, int32 or int64.
#ifndef SHOAL_COLLECTIVE_TORCH_H_
#define SHOAL_COLLECTIVE_TORCH_H_

#include <torch/torch.h>

#include <string>

#include "shoal/collective.h"

namespace shoal::collective {

inline DataType DataTypeOf(const at::Tensor& tensor) {
  switch (tensor.scalar_type()) {
    case at::kFloat:
      return DataType::kFloat32;
    case at::kBFloat16:
      return DataType::kBFloat16;
    case at::kDouble:
      return DataType::kFloat64;
    case at::kInt:
      return DataType::kInt32;
    case at::kLong:
      return DataType::kInt64;
    default:
      throw CollectiveError(
          std::string("collectives take float32, bfloat16, float64, int32 or "
                      "int64 tensors, not ") +
              std::string(c10::toString(tensor.scalar_type())),
          {});
  }
}

namespace internal {
inline void CheckTensor(const at::Tensor& tensor, const char* what) {
  if (!tensor.defined()) {
    throw CollectiveError(std::string(what) + ": the tensor is undefined", {});
  }
  if (!tensor.is_contiguous()) {
    throw CollectiveError(std::string(what) +
                              ": the tensor is not contiguous; pass "
                              "tensor.contiguous() and copy the result back",
                          {});
  }
}
}  // namespace internal

inline void AllReduce(Group& group, const at::Tensor& tensor,
                      ReduceOp op = ReduceOp::kSum, uint32_t tag = 0) {
  internal::CheckTensor(tensor, "AllReduce");
  AllReduce(group, {.data = tensor.data_ptr(),
                    .count = static_cast<size_t>(tensor.numel()),
                    .type = DataTypeOf(tensor),
                    .op = op,
                    .tag = tag});
}

inline void Broadcast(Group& group, const at::Tensor& tensor, int root,
                      uint32_t tag = 0) {
  internal::CheckTensor(tensor, "Broadcast");
  Broadcast(group, {.data = tensor.data_ptr(),
                    .count = static_cast<size_t>(tensor.numel()),
                    .type = DataTypeOf(tensor),
                    .root = root,
                    .tag = tag});
}

// output has world_size times input's elements, in rank order.
inline void AllGather(Group& group, const at::Tensor& input,
                      const at::Tensor& output, uint32_t tag = 0) {
  internal::CheckTensor(input, "AllGather");
  internal::CheckTensor(output, "AllGather");
  if (output.numel() != input.numel() * group.world_size() ||
      output.scalar_type() != input.scalar_type()) {
    throw CollectiveError(
        "AllGather: the output must hold world_size x the input's elements "
        "of the same type",
        {});
  }
  AllGather(group, {.input = input.data_ptr(),
                    .output = output.data_ptr(),
                    .count = static_cast<size_t>(input.numel()),
                    .type = DataTypeOf(input),
                    .tag = tag});
}

// input has world_size times output's elements; output gets this rank's
// reduced block.
inline void ReduceScatter(Group& group, const at::Tensor& input,
                          const at::Tensor& output,
                          ReduceOp op = ReduceOp::kSum, uint32_t tag = 0) {
  internal::CheckTensor(input, "ReduceScatter");
  internal::CheckTensor(output, "ReduceScatter");
  if (input.numel() != output.numel() * group.world_size() ||
      output.scalar_type() != input.scalar_type()) {
    throw CollectiveError(
        "ReduceScatter: the input must hold world_size x the output's "
        "elements of the same type",
        {});
  }
  ReduceScatter(group, {.input = input.data_ptr(),
                        .output = output.data_ptr(),
                        .count = static_cast<size_t>(output.numel()),
                        .type = DataTypeOf(input),
                        .op = op,
                        .tag = tag});
}

}  // namespace shoal::collective

#endif  // SHOAL_COLLECTIVE_TORCH_H_
