// For collective tests: a buffer of any DataType written and read as doubles,
// and the reduction of two doubles that a ReduceOp computes.
#ifndef SHOAL_COLLECTIVE_TEST_BUFFER_H_
#define SHOAL_COLLECTIVE_TEST_BUFFER_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "collective/reduce.h"
#include "shoal/collective.h"

namespace shoal::collective::internal {

inline double Combine(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::kSum:
      return a + b;
    case ReduceOp::kMax:
      return std::max(a, b);
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kProduct:
      return a * b;
  }
  return 0;
}

// `count` elements of `type`, set from and read back as doubles.
class TypedBuffer {
 public:
  // One spare byte: data() is never null, even for no elements.
  TypedBuffer(DataType type, size_t count)
      : type_(type), bytes_(count * SizeOf(type) + 1) {}

  void* data() { return bytes_.data(); }

  void Set(size_t i, double value) {
    char* at = bytes_.data() + i * SizeOf(type_);
    switch (type_) {
      case DataType::kFloat32:
        Put<float>(at, static_cast<float>(value));
        break;
      case DataType::kBFloat16:
        Put<uint16_t>(at, FloatToBFloat16(static_cast<float>(value)));
        break;
      case DataType::kFloat64:
        Put<double>(at, value);
        break;
      case DataType::kInt32:
        Put<int32_t>(at, static_cast<int32_t>(value));
        break;
      case DataType::kInt64:
        Put<int64_t>(at, static_cast<int64_t>(value));
        break;
    }
  }

  double Get(size_t i) const {
    const char* at = bytes_.data() + i * SizeOf(type_);
    switch (type_) {
      case DataType::kFloat32:
        return Take<float>(at);
      case DataType::kBFloat16:
        return BFloat16ToFloat(Take<uint16_t>(at));
      case DataType::kFloat64:
        return Take<double>(at);
      case DataType::kInt32:
        return Take<int32_t>(at);
      case DataType::kInt64:
        return static_cast<double>(Take<int64_t>(at));
    }
    return 0;
  }

 private:
  template <typename T>
  static void Put(char* at, T value) {
    std::memcpy(at, &value, sizeof(T));
  }
  template <typename T>
  static T Take(const char* at) {
    T value;
    std::memcpy(&value, at, sizeof(T));
    return value;
  }

  DataType type_;
  std::vector<char> bytes_;
};

}  // namespace shoal::collective::internal

#endif  // SHOAL_COLLECTIVE_TEST_BUFFER_H_
