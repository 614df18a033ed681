// How Shoal turns task arguments and results into bytes: msgpack-cxx. Any type
// msgpack can adapt works, including user structs with MSGPACK_DEFINE.
// shoal::Buffer is msgpack binary when inline, and raw bytes (not msgpack at
// all) when it lives in the object store, so that it is never copied there.
#ifndef SHOAL_SERIALIZATION_H_
#define SHOAL_SERIALIZATION_H_

#include <memory>
#include <msgpack.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "shoal/buffer.h"

namespace msgpack {
MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS) {
  namespace adaptor {

  template <>
  struct pack<shoal::Buffer> {
    template <typename Stream>
    packer<Stream>& operator()(packer<Stream>& o,
                               const shoal::Buffer& b) const {
      o.pack_bin(static_cast<uint32_t>(b.size()));
      o.pack_bin_body(reinterpret_cast<const char*>(b.data()),
                      static_cast<uint32_t>(b.size()));
      return o;
    }
  };

  template <>
  struct convert<shoal::Buffer> {
    const msgpack::object& operator()(const msgpack::object& o,
                                      shoal::Buffer& b) const {
      if (o.type != msgpack::type::BIN) throw msgpack::type_error();
      b = shoal::Buffer::Copy(o.via.bin.ptr, o.via.bin.size);
      return o;
    }
  };

  }  // namespace adaptor
}  // MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS)
}  // namespace msgpack

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

// Throws msgpack::insufficient_bytes unless `bytes` starts with a whole
// msgpack value. msgpack allocates the elements of an array or a map as soon
// as it reads their count, so without this check five bytes that claim 2^32
// elements would make it allocate ~100 GiB; a whole value holds every
// element it claims.
inline void CheckWholeValue(std::string_view bytes) {
  msgpack::null_visitor visitor;
  std::size_t offset = 0;
  if (!msgpack::parse(bytes.data(), bytes.size(), offset, visitor)) {
    throw msgpack::insufficient_bytes("msgpack value cut short");
  }
}

// Throws msgpack::type_error (or msgpack::unpack_error) on a mismatch.
template <typename T>
T Unpack(std::string_view bytes) {
  CheckWholeValue(bytes);
  msgpack::object_handle handle = msgpack::unpack(bytes.data(), bytes.size());
  return handle.get().as<T>();
}

// An object's bytes as a process sees them: msgpack, or raw bytes (a Buffer
// put into the store), kept alive by `keepalive` (a pinned store object or
// an owned string).
struct ObjectValue {
  std::string_view data;
  bool raw = false;
  std::shared_ptr<const void> keepalive;

  static ObjectValue Owned(std::string bytes) {
    auto owned = std::make_shared<std::string>(std::move(bytes));
    return {*owned, false, owned};
  }
};

// Reads a value. A Buffer points into the object (no copy) and keeps it
// alive; other types are unpacked from msgpack.
template <typename T>
T UnpackValue(const ObjectValue& value) {
  if constexpr (std::is_same_v<T, Buffer>) {
    if (value.raw) {
      return Buffer(value.data.data(), value.data.size(), value.keepalive);
    }
    // Inline: msgpack binary. Point into it rather than copy.
    CheckWholeValue(value.data);
    size_t offset = 0;
    msgpack::object_handle handle =
        msgpack::unpack(value.data.data(), value.data.size(), offset);
    const msgpack::object& o = handle.get();
    if (o.type != msgpack::type::BIN) throw msgpack::type_error();
    const char* p = o.via.bin.ptr;
    if (p >= value.data.data() && p < value.data.data() + value.data.size()) {
      return Buffer(p, o.via.bin.size, value.keepalive);
    }
    return Buffer::Copy(p, o.via.bin.size);
  } else {
    if (value.raw) {
      throw std::invalid_argument(
          "the object holds raw bytes (put with shoal::PutBuffer or returned "
          "as shoal::Buffer): read it as shoal::Buffer");
    }
    return Unpack<T>(value.data);
  }
}

// The bytes a value becomes: a Buffer stays raw (no copy); anything else is
// packed.
template <typename T>
ObjectValue PackValue(const T& value) {
  if constexpr (std::is_same_v<std::decay_t<T>, Buffer>) {
    return {std::string_view(reinterpret_cast<const char*>(value.data()),
                             value.size()),
            true, value.keepalive()};
  } else {
    return ObjectValue::Owned(Pack(value));
  }
}

// The value as msgpack (raw bytes become msgpack binary): what travels
// inline, in a task spec or result.
inline std::string ToMsgpack(const ObjectValue& value) {
  if (!value.raw) return std::string(value.data);
  return Pack(Buffer(value.data.data(), value.data.size(), nullptr));
}

}  // namespace shoal::internal

#endif  // SHOAL_SERIALIZATION_H_
