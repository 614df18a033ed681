// The bytes of the objects this process puts and gets: small values stay in
// its object table (owned_objects.h), large ones go through the object
// store of the node agent on this host; a stored object this node has no
// copy of is pulled here first, and on a host with no agent it is pulled
// straight into this process's memory. A Get whose every copy is lost asks
// for the object to be rebuilt and waits for it again.
//
// Threading: Put, PutPieces, Get, Wait and PrepareArgs are called from any
// thread (they block); Forget and TakeContained from the runtime's loop,
// where the refs held inside values live (`post` takes them there).
#ifndef SHOAL_API_OBJECT_IO_H_
#define SHOAL_API_OBJECT_IO_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "api/owned_objects.h"
#include "shoal/internal/runtime.h"

namespace shoal::proto {
class ActorArgs;
class StoredObject;
}  // namespace shoal::proto

namespace shoal::internal {

// The object store of this node, as a process that is not the agent sees
// it (api/object_client.h is the real one).
class NodeStore {
 public:
  // A sealed object mapped into this process, kept mapped by `keepalive`.
  struct Mapped {
    std::string_view data;
    std::string_view metadata;
    std::shared_ptr<const void> keepalive;
  };
  virtual ~NodeStore() = default;
  virtual const std::string& node_id() const = 0;
  // host:port of the node's transfer server.
  virtual const std::string& transfer_address() const = 0;
  // Writes object `id` of `size` bytes (`fill` writes them) and seals it,
  // as owned by `owner` (this process).
  virtual absl::Status Put(const std::string& id, const std::string& owner,
                           size_t size, std::string_view metadata,
                           const std::function<void(uint8_t*)>& fill) = 0;
  // This node's copy; NotFound when it has none.
  virtual absl::StatusOr<Mapped> Get(const std::string& id) = 0;
  // Pulls a copy to this node from the nodes that hold one, then maps it.
  // DataLoss when no copy is left anywhere.
  virtual absl::StatusOr<Mapped> Pull(const proto::StoredObject& object) = 0;
};

// The store of the node agent at `agent_address` (ObjectClient).
absl::StatusOr<std::unique_ptr<NodeStore>> ConnectNodeStore(
    const std::string& agent_address, const std::string& token,
    const std::string& peer_name);

class ObjectIo {
 public:
  struct Hooks {
    // A new object id.
    std::function<std::string()> new_id;
    // Runs `fn` on the runtime's loop, later.
    std::function<void(std::function<void()> fn)> post;
    // Every copy of stored object `id` is gone: starts rebuilding it (OK)
    // or says why it cannot be. Blocking.
    std::function<absl::Status(const std::string& id,
                               const proto::StoredObject& failed)>
        rebuild;
    // Pulls a stored object into `dest` from `where`'s sources, for a
    // process with no store on its host (object_plane::PullObject).
    std::function<absl::Status(const proto::StoredObject& where, uint8_t* dest,
                               uint64_t size)>
        pull_into_memory;
    // Told before and after a thread waits for an object.
    OwnedObjects::BlockedFn blocked;
  };

  // REQUIRES: `objects` outlives this.
  ObjectIo(OwnedObjects* objects, uint64_t inline_threshold, Hooks hooks);
  ObjectIo(const ObjectIo&) = delete;
  ObjectIo& operator=(const ObjectIo&) = delete;

  // Large objects go to `store` from now on (null: none on this host, they
  // stay in this process). Before any Put. `owner` names this process.
  void SetStore(std::unique_ptr<NodeStore> store, std::string owner);
  bool has_store() const { return store_ != nullptr; }

  absl::StatusOr<std::shared_ptr<RefHandle>> Put(
      ObjectValue value, std::vector<std::shared_ptr<RefHandle>> contained);
  // Raw bytes made of pieces (see shoal::internal::PutPieces); the gaps are
  // zeroed.
  absl::StatusOr<std::shared_ptr<RefHandle>> PutPieces(
      const std::vector<BufferPiece>& pieces, size_t size);
  // The object's value, waiting up to `timeout_ms` (-1: no limit) for it
  // to be made; a stored object is mapped (pulled first if need be).
  absl::StatusOr<ObjectValue> Get(const RefHandle& ref, int64_t timeout_ms);
  std::vector<size_t> Wait(const std::vector<const RefHandle*>& refs,
                           size_t num_ready, int64_t timeout_ms);

  // Large arguments passed by value go through the store like Put; the
  // task holds their refs until it is done. Small ones are copied now, so
  // nothing the caller owns is read after Remote() returns.
  absl::Status PrepareArgs(std::vector<TaskArg>& args);
  // An actor's constructor arguments, prepared, into `out` (they travel in
  // its spec, so that a restart, even after this process is gone, makes the
  // actor the same way): values as they are, refs once ready, as values or
  // stored objects. `keep` gets what must stay alive with this process.
  // Waits while refs are pending, without telling `blocked` (the waiting
  // thread runs no task), until `stop` is set: then Cancelled. An error: a
  // ref's own.
  absl::Status WriteActorArgs(std::vector<TaskArg>& args, proto::ActorArgs* out,
                              std::vector<std::shared_ptr<RefHandle>>* keep,
                              const std::atomic<bool>& stop);
  // Whether no ref among `args` is pending or failed now (an unknown one
  // counts as ready: writing it says what is wrong).
  bool ArgsReady(const std::vector<TaskArg>& args) const;

  // Loop: `refs` are inside object `id`'s value, kept until it is gone.
  void KeepContained(const std::string& id,
                     std::vector<std::shared_ptr<RefHandle>> refs) {
    contained_[id] = std::move(refs);
  }
  // Loop: object `id` is gone; so are the refs inside its value.
  void Forget(const std::string& id) { contained_.erase(id); }
  // Loop, at shutdown: every ref held inside values, to drop off the loop.
  std::unordered_map<std::string, std::vector<std::shared_ptr<RefHandle>>>
  TakeContained();

 private:
  // Writes object `id` of `size` bytes into this node's store with `fill`
  // and records it as owned here.
  absl::Status Store(const std::string& id, size_t size, bool raw,
                     const std::function<void(uint8_t*)>& fill);
  // Maps a stored object from this node's store, pulling it here first
  // when the node has no copy.
  absl::StatusOr<ObjectValue> FetchStored(const proto::StoredObject& where,
                                          bool have_copy);
  absl::StatusOr<ObjectValue> FetchIntoMemory(const proto::StoredObject& where);

  OwnedObjects* const objects_;
  const uint64_t threshold_;
  const Hooks hooks_;
  // Set before the first Put, read-only after.
  std::unique_ptr<NodeStore> store_;
  std::string owner_;
  // Loop thread only. Refs inside each object's value, by object id: kept
  // while it lives.
  std::unordered_map<std::string, std::vector<std::shared_ptr<RefHandle>>>
      contained_;
};

}  // namespace shoal::internal

#endif  // SHOAL_API_OBJECT_IO_H_
