#include "collective/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace shoal::collective::internal {
namespace {

template <typename T, typename F>
void Apply(void* out, const void* a, const void* b, size_t count, F f) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < count; ++i) o[i] = f(x[i], y[i]);
}

template <typename T>
void ApplyOp(ReduceOp op, void* out, const void* a, const void* b,
             size_t count) {
  switch (op) {
    case ReduceOp::kSum:
      Apply<T>(out, a, b, count, [](T x, T y) { return x + y; });
      break;
    case ReduceOp::kMax:
      Apply<T>(out, a, b, count, [](T x, T y) { return std::max(x, y); });
      break;
    case ReduceOp::kMin:
      Apply<T>(out, a, b, count, [](T x, T y) { return std::min(x, y); });
      break;
    case ReduceOp::kProduct:
      Apply<T>(out, a, b, count, [](T x, T y) { return x * y; });
      break;
  }
}

void ApplyBFloat16(ReduceOp op, void* out, const void* a, const void* b,
                   size_t count) {
  uint16_t* o = static_cast<uint16_t*>(out);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < count; ++i) {
    float fx = BFloat16ToFloat(x[i]);
    float fy = BFloat16ToFloat(y[i]);
    float r = 0;
    switch (op) {
      case ReduceOp::kSum:
        r = fx + fy;
        break;
      case ReduceOp::kMax:
        r = std::max(fx, fy);
        break;
      case ReduceOp::kMin:
        r = std::min(fx, fy);
        break;
      case ReduceOp::kProduct:
        r = fx * fy;
        break;
    }
    o[i] = FloatToBFloat16(r);
  }
}

}  // namespace

float BFloat16ToFloat(uint16_t value) {
  uint32_t bits = static_cast<uint32_t>(value) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint16_t FloatToBFloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

void ReduceTwo(DataType type, ReduceOp op, void* out, const void* a,
               const void* b, size_t count) {
  switch (type) {
    case DataType::kFloat32:
      ApplyOp<float>(op, out, a, b, count);
      break;
    case DataType::kFloat64:
      ApplyOp<double>(op, out, a, b, count);
      break;
    case DataType::kInt32:
      ApplyOp<int32_t>(op, out, a, b, count);
      break;
    case DataType::kInt64:
      ApplyOp<int64_t>(op, out, a, b, count);
      break;
    case DataType::kBFloat16:
      ApplyBFloat16(op, out, a, b, count);
      break;
  }
}

void ReduceInto(DataType type, ReduceOp op, void* acc, const void* in,
                size_t count) {
  ReduceTwo(type, op, acc, acc, in, count);
}

}  // namespace shoal::collective::internal
