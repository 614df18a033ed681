// How Shoal turns task arguments and results into bytes: msgpack-cxx. Any type
// msgpack can adapt works, including user structs with MSGPACK_DEFINE.
#ifndef SHOAL_SERIALIZATION_H_
#define SHOAL_SERIALIZATION_H_

#include <msgpack.hpp>
#include <string>
#include <string_view>

namespace shoal::internal {

template <typename T>
std::string Pack(const T& value) {
  msgpack::sbuffer buffer;
  msgpack::pack(buffer, value);
  return std::string(buffer.data(), buffer.size());
}

inline std::string PackNil() {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer>(buffer).pack_nil();
  return std::string(buffer.data(), buffer.size());
}

// Throws msgpack::type_error (or msgpack::unpack_error) on a mismatch.
template <typename T>
T Unpack(std::string_view bytes) {
  msgpack::object_handle handle = msgpack::unpack(bytes.data(), bytes.size());
  return handle.get().as<T>();
}

}  // namespace shoal::internal

#endif  // SHOAL_SERIALIZATION_H_
