// A process's handle on its node's object store: one blocking connection to
// the node agent (its pins die with the process) and the agent's arena
// mapped whole, so that a sealed object is read where it lies.
//
// Threading: thread-safe.
#ifndef SHOAL_API_OBJECT_CLIENT_H_
#define SHOAL_API_OBJECT_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace shoal::object_store {
class ShmArena;
}
namespace shoal::rpc {
class BlockingChannel;
}
namespace shoal::proto {
class StoredObject;
}

namespace shoal::internal {

// Values whose bytes reach this size go through the object store: 100 KiB,
// or SHOAL_INLINE_THRESHOLD_BYTES.
uint64_t InlineThresholdBytes();

// The one-byte metadata of a stored object: its data is msgpack, or raw
// bytes (a shoal::Buffer).
inline constexpr char kFormatMsgpack = 'M';
inline constexpr char kFormatRaw = 'R';

class ObjectClient;

// One object pinned in the node's store for this process; the pin is
// released when the view goes away.
class StoredView {
 public:
  StoredView(std::shared_ptr<ObjectClient> client, std::string id,
             const uint8_t* data, uint64_t data_size, uint64_t metadata_size)
      : client_(std::move(client)),
        id_(std::move(id)),
        data_(data),
        data_size_(data_size),
        metadata_size_(metadata_size) {}
  ~StoredView();
  StoredView(const StoredView&) = delete;
  StoredView& operator=(const StoredView&) = delete;

  std::string_view data() const {
    return {reinterpret_cast<const char*>(data_), data_size_};
  }
  std::string_view metadata() const {
    return {reinterpret_cast<const char*>(data_ + data_size_), metadata_size_};
  }

 private:
  std::shared_ptr<ObjectClient> client_;
  std::string id_;
  const uint8_t* data_;
  uint64_t data_size_, metadata_size_;
};

class ObjectClient : public std::enable_shared_from_this<ObjectClient> {
 public:
  // Connects to the node agent at `agent_address` and maps its arena.
  // FailedPrecondition when the node has no object store.
  static absl::StatusOr<std::shared_ptr<ObjectClient>> Connect(
      const std::string& agent_address, const std::string& token,
      const std::string& peer_name);
  ~ObjectClient();

  const std::string& node_id() const { return node_id_; }
  const std::string& agent_address() const { return agent_address_; }
  // Where other nodes pull this node's objects from.
  const std::string& transfer_address() const { return transfer_address_; }

  // Creates object `id` owned by `owner`, lets `write` fill its data_size
  // bytes in place, appends `metadata` and seals it. Nothing stays pinned.
  // When `owned_here`, this process is the owner: the agent frees the
  // object if the process goes without freeing it. The store's own errors
  // (full, already exists) come back as they are.
  absl::Status Put(const std::string& id, const std::string& owner,
                   uint64_t data_size, std::string_view metadata,
                   const std::function<void(uint8_t* dest)>& write,
                   bool owned_here = false);
  // Pins object `id` if this node holds a sealed copy.
  absl::StatusOr<std::shared_ptr<StoredView>> Get(const std::string& id);
  // Pins a copy on this node, pulled from `object`'s sources first when the
  // node has none. DataLoss when no source could supply it.
  absl::StatusOr<std::shared_ptr<StoredView>> Pull(
      const proto::StoredObject& object, int64_t timeout_ms);
  absl::Status Delete(const std::string& id);

 private:
  friend class StoredView;
  ObjectClient() = default;
  void Release(const std::string& id);
  absl::StatusOr<std::shared_ptr<StoredView>> MakeView(
      const std::string& id, const std::string& place_payload);

  std::unique_ptr<rpc::BlockingChannel> channel_;
  std::unique_ptr<object_store::ShmArena> arena_;
  std::string node_id_, agent_address_, transfer_address_;
};

}  // namespace shoal::internal

#endif  // SHOAL_API_OBJECT_CLIENT_H_
