// libtorch tensors through the object store (header-only; include it where
// libtorch is available).
//
//   shoal::TensorRef ref = shoal::PutTensor(weights);   // one copy
//   torch::Tensor view = shoal::GetTensor(ref);         // no copy
//
// PutTensor copies a CPU tensor's bytes once into the node's shared memory
// (a non-contiguous tensor is made contiguous first). GetTensor returns a
// tensor whose storage is that shared memory: the object stays pinned while
// the tensor (or any tensor sharing its storage) lives. Objects are
// immutable: treat such a tensor as read-only (clone() it to modify it).
// Inside a remote function, a tensor's bytes arrive as the shoal::Buffer of
// ref.data; AsTensor views them with the shape kept in the TensorRef.
#ifndef SHOAL_OBJECT_TORCH_H_
#define SHOAL_OBJECT_TORCH_H_

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "shoal/api.h"

namespace shoal {

struct TensorRef {
  ObjectRef<Buffer> data;
  torch::Dtype dtype = torch::kFloat32;
  std::vector<int64_t> sizes;
};

// A tensor over `bytes` (no copy) that keeps them alive. Throws
// std::invalid_argument when the sizes do not match the byte count.
inline torch::Tensor AsTensor(const Buffer& bytes, torch::Dtype dtype,
                              const std::vector<int64_t>& sizes) {
  int64_t elements = 1;
  for (int64_t s : sizes) elements *= s;
  const size_t want = static_cast<size_t>(elements) * torch::elementSize(dtype);
  if (bytes.size() != want) {
    throw std::invalid_argument(
        "a tensor of " + std::to_string(elements) + " elements of " +
        std::to_string(torch::elementSize(dtype)) + " bytes needs " +
        std::to_string(want) + " bytes; the object holds " +
        std::to_string(bytes.size()));
  }
  auto keep = bytes.keepalive();
  return torch::from_blob(
      const_cast<uint8_t*>(bytes.data()), sizes,
      [keep](void*) mutable { keep.reset(); },
      torch::TensorOptions().dtype(dtype));
}

inline TensorRef PutTensor(const torch::Tensor& tensor) {
  if (!tensor.device().is_cpu()) {
    throw std::invalid_argument(
        "PutTensor takes CPU tensors: call .cpu() first");
  }
  torch::Tensor contiguous = tensor.contiguous();
  TensorRef ref;
  ref.data = PutBuffer(contiguous.data_ptr(), contiguous.nbytes());
  ref.dtype = contiguous.scalar_type();
  ref.sizes = contiguous.sizes().vec();
  return ref;
}

inline torch::Tensor GetTensor(const TensorRef& ref, int64_t timeout_ms = -1) {
  return AsTensor(Get(ref.data, timeout_ms), ref.dtype, ref.sizes);
}

}  // namespace shoal

#endif  // SHOAL_OBJECT_TORCH_H_
