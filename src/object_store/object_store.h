// The node's object store: which objects live in the node's shared-memory
// arena, where, and who is using them. Processes on the node (drivers and
// workers, "clients", each named by an id the caller picks) ask the node
// agent to create, seal, get and release objects; the agent calls this class
// and hands back offsets into the arena, which the clients have mapped, so
// that a sealed object is read without a copy.
//
// Lifecycle of an object:
//   Create -> (the producer writes data then metadata at the offset) -> Seal
//   -> Get/Release by any client (a Get pins it for that client) -> Delete
//   by its owner. A producer that gives up calls Abort.
//
// Memory pressure: an object is pinned while any client holds a Get; a
// sealed object nobody pins is kept in LRU order. To make room, Create (and
// restoring a spilled object) first evicts secondary copies (pulled from
// another node, so they can be pulled again), least recently used first,
// then spills primary copies (the only copy there is) to the SpillStorage
// and frees their memory; a Get of a spilled object restores it. Objects
// being created and pinned objects are never evicted or spilled.
//
// Threading: not thread-safe. The store runs on the node agent's event loop;
// every call, including the on_evicted callback it makes, happens there.
#ifndef SHOAL_OBJECT_STORE_OBJECT_STORE_H_
#define SHOAL_OBJECT_STORE_OBJECT_STORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "object_store/arena_allocator.h"
#include "object_store/object_ledger.h"
#include "object_store/shm_arena.h"
#include "object_store/spill_storage.h"

namespace shoal::object_store {

// Opaque bytes, at most ObjectStore::kMaxIdSize long.
using ObjectId = std::string;
// A process on the node, as the caller numbers them.
using ClientId = int64_t;

enum class ObjectState {
  kCreated,  // Being written by its producer.
  kSealed,   // Immutable and in memory.
  kSpilled,  // Sealed, moved to the spill storage; Get restores it.
};

enum class CopyKind {
  kPrimary,    // The original: spilled under pressure, never just dropped.
  kSecondary,  // Pulled from another node: evicted under pressure.
};

// Where an object's bytes are: data at [offset, offset + data_size), then
// metadata right after it.
struct ObjectLocation {
  uint64_t offset = 0;
  uint64_t data_size = 0;
  uint64_t metadata_size = 0;

  uint64_t size() const { return data_size + metadata_size; }
};

struct ObjectInfo {
  ObjectState state = ObjectState::kCreated;
  CopyKind copy = CopyKind::kPrimary;
  uint64_t data_size = 0;
  uint64_t metadata_size = 0;
  std::string owner;
  ClientId creator = 0;
  int64_t pins = 0;      // Over all clients.
  bool deleted = false;  // Deleted by its owner, freed at its last Release.
  std::optional<ObjectLocation> location;  // When in memory.
  std::string spill_location;              // When spilled.
};

// Byte counts of objects in memory are of their blocks (64-byte aligned).
struct ObjectStoreStats {
  uint64_t capacity = 0;
  uint64_t used_bytes = 0;
  uint64_t pinned_bytes = 0;     // Sealed and held by some client.
  uint64_t creating_bytes = 0;   // Being written.
  uint64_t evictable_bytes = 0;  // Sealed, unpinned: reclaimable.
  uint64_t largest_free = 0;
  double fragmentation = 0;  // See FragmentationStats.

  uint64_t num_objects = 0;  // In any state.
  uint64_t num_created = 0;
  uint64_t num_sealed = 0;  // In memory.
  uint64_t num_pinned = 0;
  uint64_t num_spilled = 0;
  uint64_t spilled_bytes = 0;  // Of objects now spilled.

  // Totals since the store started.
  uint64_t evictions = 0;
  uint64_t evicted_bytes = 0;
  uint64_t spills = 0;
  uint64_t spilled_bytes_total = 0;
  uint64_t restores = 0;
  uint64_t spill_failures = 0;
};

struct ObjectStoreOptions {
  // Told of each secondary copy evicted, so the agent can tell the owner
  // that this node no longer holds it. Must not call back into the store.
  std::function<void(const ObjectId&)> on_evicted;
};

class ObjectStore {
 public:
  static constexpr size_t kMaxIdSize = 64;

  // Objects live in `arena`. `spill` may be null: then primary copies are
  // never spilled, and a store full of them refuses new objects.
  ObjectStore(std::unique_ptr<ShmArena> arena,
              std::unique_ptr<SpillStorage> spill,
              ObjectStoreOptions options = {});
  ~ObjectStore();

  ObjectStore(const ObjectStore&) = delete;
  ObjectStore& operator=(const ObjectStore&) = delete;

  // Reserves room for an object that `client` will write, making room under
  // pressure (see the top of this file). The object is neither pinned nor
  // visible to Get until Seal.
  // Errors: InvalidArgument for a bad id or an object larger than the whole
  // store; AlreadyExists; ResourceExhausted when pinned objects and objects
  // being created leave no room (the message says how much each holds).
  absl::StatusOr<ObjectLocation> Create(const ObjectId& id, uint64_t data_size,
                                        uint64_t metadata_size, ClientId client,
                                        CopyKind copy,
                                        const std::string& owner = "");

  // Makes the object immutable and readable. REQUIRES: `client` created it.
  // An object its owner deleted while it was being written is freed here.
  absl::Status Seal(const ObjectId& id, ClientId client);

  // The producer gave up: frees the object. REQUIRES: `client` created it
  // and has not sealed it.
  absl::Status Abort(const ObjectId& id, ClientId client);

  // Pins the object for `client` (once per call; Release once per Get) and
  // returns where it is, restoring it first when spilled (which may evict or
  // spill others). NotFound for an unknown or deleted object; Unavailable
  // while it is still being created (wait and retry).
  absl::StatusOr<ObjectLocation> Get(const ObjectId& id, ClientId client);

  // Drops one pin `client` holds. At zero pins the object becomes
  // evictable (or is freed, when its owner has deleted it).
  absl::Status Release(const ObjectId& id, ClientId client);

  // The owner freed the object: it is freed now, or at its last Release
  // when pinned, or at Seal/Abort when being created; a spill copy is
  // removed. Deleting twice is fine. NotFound for an unknown id; when the
  // spill copy cannot be removed, the object is gone and the error says so.
  absl::Status Delete(const ObjectId& id);

  // `client` exited: drops every pin it held and aborts the objects it was
  // creating. Returns the number of pins dropped plus objects aborted.
  // O(number of objects): a process exit is rare.
  int64_t ReleaseClient(ClientId client);

  // Known and not deleted, in any state.
  bool Contains(const ObjectId& id) const;
  // Sealed (in memory or spilled) and not deleted: a Get will succeed.
  bool IsSealed(const ObjectId& id) const;
  std::optional<ObjectInfo> Lookup(const ObjectId& id) const;
  // Calls `fn` for each object, in no particular order, until it returns
  // false.
  void ForEach(
      const std::function<bool(const ObjectId&, const ObjectInfo&)>& fn) const;

  ObjectStoreStats Stats() const;
  // Usable bytes: the arena's size rounded down to the allocator's alignment.
  uint64_t capacity() const;

  // The arena; the agent reads objects through data() + offset.
  const ShmArena& arena() const { return *arena_; }

 private:
  struct Entry {
    ObjectState state = ObjectState::kCreated;
    CopyKind copy = CopyKind::kPrimary;
    uint64_t offset = 0;
    uint64_t block_size = 0;  // 0 when not in memory.
    uint64_t data_size = 0;
    uint64_t metadata_size = 0;
    std::string owner;
    ClientId creator = 0;
    std::map<ClientId, int64_t> pins;  // Only clients with pins > 0.
    int64_t total_pins = 0;
    bool deleted = false;
    std::string spill_location;
    ObjectLedger::Record ledger;  // Set by Account.
  };
  using Entries = std::unordered_map<ObjectId, Entry>;

  static ObjectLedger::Category CategoryOf(const Entry& entry);
  static ObjectInfo InfoOf(const Entry& entry);
  // Every change to an entry's state, pins or memory happens between
  // Unaccount and Account, which keep the ledger right.
  void Unaccount(Entry& entry);
  void Account(const ObjectId& id, Entry& entry);

  // A block of at least `size` bytes, evicting and spilling as needed.
  // `what` names the request in the error ("create object x").
  absl::StatusOr<uint64_t> AllocateMakingRoom(uint64_t size,
                                              const std::string& what);
  void Evict(Entries::iterator it);
  absl::Status Spill(Entries::iterator it);
  // Frees the entry's memory and spill copy and forgets it.
  absl::Status Erase(Entries::iterator it);
  void DropPins(Entries::iterator it, ClientId client, int64_t count);

  std::unique_ptr<ShmArena> arena_;
  std::unique_ptr<SpillStorage> spill_;
  ObjectStoreOptions options_;
  ArenaAllocator allocator_;
  Entries entries_;
  ObjectLedger ledger_;
  ObjectStoreStats totals_;  // Only the "since start" fields are used.
};

}  // namespace shoal::object_store

#endif  // SHOAL_OBJECT_STORE_OBJECT_STORE_H_
