// shoal::Buffer: immutable bytes that may live in the node's shared-memory
// object store. A Buffer from shoal::Get (or passed to a remote function)
// points into the store without a copy and keeps the object pinned there
// while any copy of the Buffer is alive.
#ifndef SHOAL_BUFFER_H_
#define SHOAL_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace shoal {

class Buffer {
 public:
  Buffer() = default;
  // Bytes at `data` kept alive by `keepalive` (which may be null when the
  // caller guarantees the lifetime).
  Buffer(const void* data, size_t size, std::shared_ptr<const void> keepalive)
      : data_(static_cast<const uint8_t*>(data)),
        size_(size),
        keepalive_(std::move(keepalive)) {}

  // An owned copy of `size` bytes.
  static Buffer Copy(const void* data, size_t size) {
    auto owned =
        std::make_shared<std::string>(static_cast<const char*>(data), size);
    return Buffer(owned->data(), owned->size(), owned);
  }
  // Takes the string's bytes without copying them.
  static Buffer FromString(std::string bytes) {
    auto owned = std::make_shared<std::string>(std::move(bytes));
    return Buffer(owned->data(), owned->size(), owned);
  }
  template <typename T>
  static Buffer CopySpan(std::span<const T> values) {
    static_assert(std::is_trivially_copyable_v<T>);
    return Copy(values.data(), values.size_bytes());
  }

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // The bytes as an array of T. Throws std::invalid_argument when the size
  // is not a multiple of sizeof(T) or the bytes are not aligned for T.
  template <typename T>
  std::span<const T> As() const {
    static_assert(std::is_trivially_copyable_v<T>);
    if (size_ % sizeof(T) != 0 ||
        reinterpret_cast<uintptr_t>(data_) % alignof(T) != 0) {
      throw std::invalid_argument(
          "shoal::Buffer of " + std::to_string(size_) +
          " bytes is not an array of elements of size " +
          std::to_string(sizeof(T)));
    }
    return {reinterpret_cast<const T*>(data_), size_ / sizeof(T)};
  }

  // What keeps the bytes alive (a pinned store object, or an owned copy).
  const std::shared_ptr<const void>& keepalive() const { return keepalive_; }

  bool operator==(const Buffer& other) const {
    return size_ == other.size_ &&
           (size_ == 0 || std::memcmp(data_, other.data_, size_) == 0);
  }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<const void> keepalive_;
};

}  // namespace shoal

#endif  // SHOAL_BUFFER_H_
