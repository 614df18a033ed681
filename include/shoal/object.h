// Objects: ObjectRef, Put, Get and Wait. Values travel as msgpack; large
// ones live in the node's shared-memory object store.
#ifndef SHOAL_OBJECT_H_
#define SHOAL_OBJECT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "shoal/buffer.h"
#include "shoal/internal/runtime.h"
#include "shoal/serialization.h"

namespace shoal {

template <typename T>
class ObjectRef {
 public:
  ObjectRef() = default;
  explicit ObjectRef(std::shared_ptr<internal::RefHandle> handle)
      : handle_(std::move(handle)) {}
  const std::string& id() const { return handle_->id(); }
  bool valid() const { return handle_ != nullptr; }
  const std::shared_ptr<internal::RefHandle>& handle() const { return handle_; }
  bool operator==(const ObjectRef& other) const {
    return handle_ == other.handle_;
  }

 private:
  std::shared_ptr<internal::RefHandle> handle_;
};

}  // namespace shoal

// An ObjectRef inside a value (a struct member, a vector of refs) is its
// object id; the object made of the value keeps the referred objects alive.
namespace msgpack {
MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS) {
  namespace adaptor {

  template <typename T>
  struct pack<shoal::ObjectRef<T>> {
    template <typename Stream>
    packer<Stream>& operator()(packer<Stream>& o,
                               const shoal::ObjectRef<T>& ref) const {
      if (!ref.valid()) return o.pack_nil();
      shoal::internal::RefCapture::Note(ref.handle());
      return o.pack(ref.id());
    }
  };

  template <typename T>
  struct convert<shoal::ObjectRef<T>> {
    const msgpack::object& operator()(const msgpack::object& o,
                                      shoal::ObjectRef<T>& ref) const {
      if (o.type == msgpack::type::NIL) {
        ref = shoal::ObjectRef<T>();
        return o;
      }
      if (o.type != msgpack::type::STR) throw msgpack::type_error();
      ref = shoal::ObjectRef<T>(shoal::internal::HandleFor(
          std::string(o.via.str.ptr, o.via.str.size)));
      return o;
    }
  };

  }  // namespace adaptor
}  // MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS)
}  // namespace msgpack

namespace shoal {

template <typename T>
struct WaitResult {
  std::vector<ObjectRef<T>> ready;
  std::vector<ObjectRef<T>> not_ready;
};

// ---- Objects ----
//
// Values whose serialized size reaches the inline threshold (100 KiB; the
// SHOAL_INLINE_THRESHOLD_BYTES variable changes it) go into the object store
// of this process's node; smaller ones stay in the memory of the process
// that made them (their owner). Task arguments and results follow the same
// rule. An object lives while a reference to it does (ObjectRef copies here,
// and refs held by pending tasks); then it is freed on every node.

template <typename T>
ObjectRef<std::decay_t<T>> Put(const T& value) {
  internal::RefCapture refs;
  internal::ObjectValue packed = internal::PackValue(value);
  return ObjectRef<std::decay_t<T>>(
      internal::PutObject(std::move(packed), refs.Take()));
}

// Puts `size` raw bytes, copied once into shared memory. Get it back as a
// shoal::Buffer, which maps it without a copy.
inline ObjectRef<Buffer> PutBuffer(const void* data, size_t size) {
  return Put(Buffer(data, size, nullptr));
}

// timeout_ms < 0 waits as long as it takes. For ObjectRef<Buffer> the result
// points into the node's shared memory (pulled to this node first when the
// object is elsewhere) and keeps the object alive.
template <typename T>
T Get(const ObjectRef<T>& ref, int64_t timeout_ms = -1) {
  internal::ObjectValue value = internal::GetObject(*ref.handle(), timeout_ms);
  if constexpr (!std::is_void_v<T>) return internal::UnpackValue<T>(value);
}

// Cancels the task that makes `ref` (Ray's cancel): a task still waiting for
// its arguments or a worker fails at once; a running one is interrupted (a
// Python task raises KeyboardInterrupt; a C++ task runs on) or, with
// `force`, its worker is ended. With `recursive` (the default, as in Ray),
// the tasks it submitted are cancelled too, with the same `force`, and
// theirs in turn. Its Get then throws TaskCancelledError; a task that had
// ended keeps its result. Returns whether it was pending.
template <typename T>
bool Cancel(const ObjectRef<T>& ref, bool force = false,
            bool recursive = true) {
  return internal::CancelTask(*ref.handle(), force, recursive);
}

template <typename T>
std::vector<T> Get(const std::vector<ObjectRef<T>>& refs,
                   int64_t timeout_ms = -1) {
  std::vector<T> out;
  out.reserve(refs.size());
  for (const auto& ref : refs) out.push_back(Get(ref, timeout_ms));
  return out;
}

template <typename T>
WaitResult<T> Wait(const std::vector<ObjectRef<T>>& refs, size_t num_ready,
                   int64_t timeout_ms = -1) {
  std::vector<const internal::RefHandle*> handles;
  for (const auto& r : refs) handles.push_back(r.handle().get());
  std::vector<size_t> ready =
      internal::WaitReady(handles, num_ready, timeout_ms);
  WaitResult<T> result;
  std::vector<bool> is_ready(refs.size(), false);
  for (size_t i : ready) is_ready[i] = true;
  for (size_t i = 0; i < refs.size(); ++i) {
    (is_ready[i] ? result.ready : result.not_ready).push_back(refs[i]);
  }
  return result;
}

}  // namespace shoal

#endif  // SHOAL_OBJECT_H_
