#include "object_store/object_store.h"

#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "object_store/format_util.h"

namespace shoal::object_store {
namespace {

constexpr char kFix[] =
    "Release references to objects you no longer need, or start the node "
    "with a larger --object-store-memory";

absl::Status CheckId(const ObjectId& id) {
  if (id.empty() || id.size() > ObjectStore::kMaxIdSize) {
    return absl::InvalidArgumentError(absl::StrCat("object id must be 1 to ",
                                                   ObjectStore::kMaxIdSize,
                                                   " bytes, not ", id.size()));
  }
  return absl::OkStatus();
}

// Why a request of `size` bytes found no room, and what to do.
std::string FullMessage(const ObjectLedger& ledger,
                        const ArenaAllocator& allocator,
                        const SpillStorage* spill, uint64_t size,
                        const std::string& what,
                        const absl::Status& spill_error) {
  std::string message = absl::StrCat(
      "object store is full: cannot ", what, " of ", FormatBytes(size),
      " (store capacity ", FormatBytes(allocator.capacity()), "; ",
      FormatBytes(ledger.bytes(ObjectLedger::kPinned)), " pinned by ",
      ledger.count(ObjectLedger::kPinned), " objects in use; ",
      FormatBytes(ledger.bytes(ObjectLedger::kCreating)), " being created by ",
      ledger.count(ObjectLedger::kCreating), " objects; largest free block ",
      FormatBytes(allocator.largest_free()));
  if (spill == nullptr && ledger.evictable_primary_bytes() > 0) {
    absl::StrAppend(&message, "; ",
                    FormatBytes(ledger.evictable_primary_bytes()),
                    " of unpinned objects cannot be spilled: spilling is "
                    "disabled");
  }
  if (!spill_error.ok()) {
    absl::StrAppend(&message, "; spilling to ", spill->Describe(),
                    " failed: ", spill_error.message());
  }
  absl::StrAppend(&message, "). ", kFix);
  return message;
}

}  // namespace

ObjectStore::ObjectStore(std::unique_ptr<ShmArena> arena,
                         std::unique_ptr<SpillStorage> spill,
                         ObjectStoreOptions options)
    : arena_(std::move(arena)),
      spill_(std::move(spill)),
      options_(std::move(options)),
      allocator_(arena_->capacity()) {}

ObjectStore::~ObjectStore() {
  // Spill copies belong to this store's lifetime; memory goes with the arena.
  if (spill_ == nullptr) return;
  for (auto& [id, entry] : entries_) {
    if (!entry.spill_location.empty()) {
      spill_->Remove(entry.spill_location).IgnoreError();
    }
  }
}

ObjectLedger::Category ObjectStore::CategoryOf(const Entry& entry) {
  if (entry.state == ObjectState::kCreated) return ObjectLedger::kCreating;
  if (entry.state == ObjectState::kSpilled) return ObjectLedger::kSpilledOut;
  return entry.total_pins > 0 ? ObjectLedger::kPinned
                              : ObjectLedger::kEvictable;
}

void ObjectStore::Unaccount(Entry& entry) { ledger_.Remove(&entry.ledger); }

void ObjectStore::Account(const ObjectId& id, Entry& entry) {
  ObjectLedger::Category category = CategoryOf(entry);
  uint64_t bytes = category == ObjectLedger::kSpilledOut
                       ? entry.data_size + entry.metadata_size
                       : entry.block_size;
  // A deleted object at zero pins is erased right after; never evictable.
  ledger_.Add(id, category, bytes, entry.copy == CopyKind::kPrimary,
              /*queue=*/!entry.deleted, &entry.ledger);
}

absl::StatusOr<ObjectLocation> ObjectStore::Create(
    const ObjectId& id, uint64_t data_size, uint64_t metadata_size,
    ClientId client, CopyKind copy, const std::string& owner) {
  if (absl::Status valid = CheckId(id); !valid.ok()) return valid;
  if (auto it = entries_.find(id); it != entries_.end()) {
    if (it->second.deleted) {
      return absl::AlreadyExistsError(absl::StrCat(
          "object ", FormatId(id), " was deleted but ", it->second.total_pins,
          " references to it are still held; create it again once they are "
          "released"));
    }
    return absl::AlreadyExistsError(
        absl::StrCat("object ", FormatId(id), " already exists"));
  }
  if (data_size > std::numeric_limits<uint64_t>::max() - metadata_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("object ", FormatId(id), " size overflows: data ",
                     data_size, " + metadata ", metadata_size, " bytes"));
  }
  uint64_t size = data_size + metadata_size;
  std::optional<uint64_t> block = ArenaAllocator::BlockSize(size);
  if (!block.has_value() || *block > allocator_.capacity()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "object ", FormatId(id), " of ", FormatBytes(size),
        " is larger than the whole object store (", FormatBytes(capacity()),
        "); start the node with --object-store-memory of at least ",
        FormatBytes(size), ", or split the object into smaller ones"));
  }
  absl::StatusOr<uint64_t> offset =
      AllocateMakingRoom(size, absl::StrCat("create object ", FormatId(id)));
  if (!offset.ok()) return offset.status();

  auto [it, inserted] = entries_.try_emplace(id);
  Entry& entry = it->second;
  entry.state = ObjectState::kCreated;
  entry.copy = copy;
  entry.offset = *offset;
  entry.block_size = *block;
  entry.data_size = data_size;
  entry.metadata_size = metadata_size;
  entry.owner = owner;
  entry.creator = client;
  Account(id, entry);
  return ObjectLocation{*offset, data_size, metadata_size};
}

absl::Status ObjectStore::Seal(const ObjectId& id, ClientId client) {
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat("cannot seal object ", FormatId(id),
                                            ": it was never created"));
  }
  Entry& entry = it->second;
  if (entry.state != ObjectState::kCreated) {
    return absl::FailedPreconditionError(
        absl::StrCat("object ", FormatId(id), " is already sealed"));
  }
  if (entry.creator != client) {
    return absl::FailedPreconditionError(
        absl::StrCat("object ", FormatId(id), " is being created by client ",
                     entry.creator, ", not by client ", client));
  }
  if (entry.deleted) return Erase(it);
  Unaccount(entry);
  entry.state = ObjectState::kSealed;
  Account(id, entry);
  return absl::OkStatus();
}

absl::Status ObjectStore::Abort(const ObjectId& id, ClientId client) {
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "cannot abort object ", FormatId(id), ": it was never created"));
  }
  const Entry& entry = it->second;
  if (entry.state != ObjectState::kCreated) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot abort object ", FormatId(id),
                     ": it is already sealed (its owner deletes it instead)"));
  }
  if (entry.creator != client) {
    return absl::FailedPreconditionError(
        absl::StrCat("object ", FormatId(id), " is being created by client ",
                     entry.creator, ", not by client ", client));
  }
  return Erase(it);
}

absl::StatusOr<ObjectLocation> ObjectStore::Get(const ObjectId& id,
                                                ClientId client) {
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.deleted) {
    return absl::NotFoundError(absl::StrCat("object ", FormatId(id),
                                            it == entries_.end()
                                                ? " is not in this node's store"
                                                : " was deleted by its owner"));
  }
  Entry* entry = &it->second;
  if (entry->state == ObjectState::kCreated) {
    return absl::UnavailableError(absl::StrCat(
        "object ", FormatId(id), " is still being written by client ",
        entry->creator, "; wait until it is sealed"));
  }
  if (entry->state == ObjectState::kSpilled) {
    uint64_t size = entry->data_size + entry->metadata_size;
    absl::StatusOr<uint64_t> offset = AllocateMakingRoom(
        size, absl::StrCat("restore spilled object ", FormatId(id)));
    if (!offset.ok()) return offset.status();
    // Making room erased only in-memory entries; `entry` is still valid.
    absl::Status read =
        spill_->Read(entry->spill_location, arena_->data() + *offset, size);
    if (!read.ok()) {
      allocator_.Free(*offset).IgnoreError();  // We just allocated it.
      return absl::Status(read.code(),
                          absl::StrCat("cannot restore spilled object ",
                                       FormatId(id), ": ", read.message()));
    }
    // The object is back; a leftover file would only waste disk.
    spill_->Remove(entry->spill_location).IgnoreError();
    Unaccount(*entry);
    entry->state = ObjectState::kSealed;
    entry->offset = *offset;
    entry->block_size = *allocator_.AllocatedSize(*offset);
    entry->spill_location.clear();
    ++totals_.restores;
    Account(id, *entry);
  }
  Unaccount(*entry);
  ++entry->pins[client];
  ++entry->total_pins;
  Account(id, *entry);
  return ObjectLocation{entry->offset, entry->data_size, entry->metadata_size};
}

absl::Status ObjectStore::Release(const ObjectId& id, ClientId client) {
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "cannot release object ", FormatId(id), ": it is not in the store"));
  }
  if (!it->second.pins.contains(client)) {
    return absl::FailedPreconditionError(
        absl::StrCat("client ", client, " holds no reference to object ",
                     FormatId(id), " (released more often than got?)"));
  }
  DropPins(it, client, 1);
  return absl::OkStatus();
}

void ObjectStore::DropPins(Entries::iterator it, ClientId client,
                           int64_t count) {
  Entry& entry = it->second;
  Unaccount(entry);
  auto pin = entry.pins.find(client);
  pin->second -= count;
  entry.total_pins -= count;
  if (pin->second == 0) entry.pins.erase(pin);
  Account(it->first, entry);
  if (entry.total_pins == 0 && entry.deleted) {
    // The owner deleted it while pinned; the spill copy cannot exist (a
    // pinned object is in memory), so this cannot fail.
    Erase(it).IgnoreError();
  }
}

absl::Status ObjectStore::Delete(const ObjectId& id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "cannot delete object ", FormatId(id), ": it is not in the store"));
  }
  Entry& entry = it->second;
  if (entry.state == ObjectState::kCreated || entry.total_pins > 0) {
    Unaccount(entry);
    entry.deleted = true;
    Account(id, entry);
    return absl::OkStatus();
  }
  return Erase(it);
}

absl::Status ObjectStore::Erase(Entries::iterator it) {
  Entry& entry = it->second;
  Unaccount(entry);
  if (entry.block_size > 0) allocator_.Free(entry.offset).IgnoreError();
  absl::Status removed;
  if (!entry.spill_location.empty()) {
    removed = spill_->Remove(entry.spill_location);
  }
  std::string id = it->first;
  entries_.erase(it);
  if (!removed.ok()) {
    return absl::Status(removed.code(),
                        absl::StrCat("object ", FormatId(id),
                                     " is deleted, but its spill copy is "
                                     "left behind: ",
                                     removed.message()));
  }
  return absl::OkStatus();
}

int64_t ObjectStore::ReleaseClient(ClientId client) {
  std::vector<ObjectId> ids;
  for (const auto& [id, entry] : entries_) {
    if (entry.pins.contains(client) ||
        (entry.state == ObjectState::kCreated && entry.creator == client)) {
      ids.push_back(id);
    }
  }
  int64_t dropped = 0;
  for (const ObjectId& id : ids) {
    auto it = entries_.find(id);
    if (it->second.state == ObjectState::kCreated) {
      // Never pinned: Get refuses objects being created.
      Erase(it).IgnoreError();
      ++dropped;
      continue;
    }
    int64_t pins = it->second.pins[client];
    DropPins(it, client, pins);
    dropped += pins;
  }
  return dropped;
}

bool ObjectStore::Contains(const ObjectId& id) const {
  auto it = entries_.find(id);
  return it != entries_.end() && !it->second.deleted;
}

bool ObjectStore::IsSealed(const ObjectId& id) const {
  auto it = entries_.find(id);
  return it != entries_.end() && !it->second.deleted &&
         it->second.state != ObjectState::kCreated;
}

std::optional<ObjectInfo> ObjectStore::Lookup(const ObjectId& id) const {
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  return InfoOf(it->second);
}

void ObjectStore::ForEach(
    const std::function<bool(const ObjectId&, const ObjectInfo&)>& fn) const {
  for (const auto& [id, entry] : entries_) {
    if (!fn(id, InfoOf(entry))) return;
  }
}

ObjectInfo ObjectStore::InfoOf(const Entry& entry) {
  ObjectInfo info;
  info.state = entry.state;
  info.copy = entry.copy;
  info.data_size = entry.data_size;
  info.metadata_size = entry.metadata_size;
  info.owner = entry.owner;
  info.creator = entry.creator;
  info.pins = entry.total_pins;
  info.deleted = entry.deleted;
  if (entry.block_size > 0) {
    info.location =
        ObjectLocation{entry.offset, entry.data_size, entry.metadata_size};
  }
  info.spill_location = entry.spill_location;
  return info;
}

ObjectStoreStats ObjectStore::Stats() const {
  ObjectStoreStats stats = totals_;
  FragmentationStats fragmentation = allocator_.fragmentation_stats();
  stats.capacity = allocator_.capacity();
  stats.used_bytes = allocator_.used_bytes();
  stats.pinned_bytes = ledger_.bytes(ObjectLedger::kPinned);
  stats.creating_bytes = ledger_.bytes(ObjectLedger::kCreating);
  stats.evictable_bytes = ledger_.bytes(ObjectLedger::kEvictable);
  stats.largest_free = fragmentation.largest_free;
  stats.fragmentation = fragmentation.fragmentation;
  stats.num_objects = entries_.size();
  stats.num_created = ledger_.count(ObjectLedger::kCreating);
  stats.num_sealed = ledger_.count(ObjectLedger::kPinned) +
                     ledger_.count(ObjectLedger::kEvictable);
  stats.num_pinned = ledger_.count(ObjectLedger::kPinned);
  stats.num_spilled = ledger_.count(ObjectLedger::kSpilledOut);
  stats.spilled_bytes = ledger_.bytes(ObjectLedger::kSpilledOut);
  return stats;
}

uint64_t ObjectStore::capacity() const { return allocator_.capacity(); }

absl::StatusOr<uint64_t> ObjectStore::AllocateMakingRoom(
    uint64_t size, const std::string& what) {
  if (std::optional<uint64_t> offset = allocator_.Allocate(size)) {
    return *offset;
  }
  // Do not throw away copies when even that would not make room.
  uint64_t reclaimable = ledger_.bytes(ObjectLedger::kEvictable);
  if (spill_ == nullptr) reclaimable -= ledger_.evictable_primary_bytes();
  uint64_t block = *ArenaAllocator::BlockSize(size);
  if (allocator_.free_bytes() + reclaimable < block) {
    return absl::ResourceExhaustedError(FullMessage(
        ledger_, allocator_, spill_.get(), size, what, absl::OkStatus()));
  }
  absl::Status spill_error;
  while (true) {
    if (const ObjectId* oldest = ledger_.OldestSecondary()) {
      Evict(entries_.find(*oldest));
    } else if (const ObjectId* oldest = ledger_.OldestPrimary();
               spill_ != nullptr && oldest != nullptr) {
      spill_error = Spill(entries_.find(*oldest));
      if (!spill_error.ok()) break;
    } else {
      break;
    }
    if (std::optional<uint64_t> offset = allocator_.Allocate(size)) {
      return *offset;
    }
  }
  return absl::ResourceExhaustedError(
      FullMessage(ledger_, allocator_, spill_.get(), size, what, spill_error));
}

void ObjectStore::Evict(Entries::iterator it) {
  ObjectId id = it->first;
  uint64_t block = it->second.block_size;
  Erase(it).IgnoreError();  // A secondary copy is never spilled.
  ++totals_.evictions;
  totals_.evicted_bytes += block;
  if (options_.on_evicted) options_.on_evicted(id);
}

absl::Status ObjectStore::Spill(Entries::iterator it) {
  Entry& entry = it->second;
  uint64_t size = entry.data_size + entry.metadata_size;
  absl::StatusOr<std::string> location =
      spill_->Write(it->first, arena_->data() + entry.offset, size);
  if (!location.ok()) {
    ++totals_.spill_failures;
    return location.status();
  }
  Unaccount(entry);
  allocator_.Free(entry.offset).IgnoreError();  // Allocated with the entry.
  entry.block_size = 0;
  entry.state = ObjectState::kSpilled;
  entry.spill_location = *std::move(location);
  Account(it->first, entry);
  ++totals_.spills;
  totals_.spilled_bytes_total += size;
  return absl::OkStatus();
}

}  // namespace shoal::object_store
