// What an object store holds, counted: bytes and objects by category
// (being created, pinned, evictable, spilled out), and the order in which
// evictable objects are given up under memory pressure (least recently used
// first, secondary copies before primary ones).
//
// The store records each object's category here whenever it changes (Remove
// the old record, Add the new one); the ledger keeps the per-object Record so
// that removal is O(1).
//
// Threading: not thread-safe; used from the store's thread only.
#ifndef SHOAL_OBJECT_STORE_OBJECT_LEDGER_H_
#define SHOAL_OBJECT_STORE_OBJECT_LEDGER_H_

#include <cstdint>
#include <list>
#include <string>

namespace shoal::object_store {

class ObjectLedger {
 public:
  enum Category { kCreating, kPinned, kEvictable, kSpilledOut, kNumCategories };

  // One object's entry in the ledger, kept by the store beside the object.
  struct Record {
    Category category = kCreating;
    uint64_t bytes = 0;
    bool primary = true;
    bool queued = false;  // In an eviction queue.
    std::list<std::string>::iterator queue_it;
  };

  // Counts an object of `bytes` in `category`. An evictable object joins the
  // back of its queue (primary or secondary copies) unless `queue` is false
  // (an object about to be freed is never offered for eviction).
  void Add(const std::string& id, Category category, uint64_t bytes,
           bool primary, bool queue, Record* record);
  // Uncounts what Add counted for `record`.
  void Remove(Record* record);

  uint64_t bytes(Category category) const { return bytes_[category]; }
  uint64_t count(Category category) const { return count_[category]; }
  // Evictable primary copies: reclaimable only by spilling.
  uint64_t evictable_primary_bytes() const { return evictable_primary_bytes_; }

  // The least recently used evictable copy of each kind, or null.
  const std::string* OldestSecondary() const;
  const std::string* OldestPrimary() const;

 private:
  std::list<std::string> secondary_queue_;
  std::list<std::string> primary_queue_;
  uint64_t bytes_[kNumCategories] = {};
  uint64_t count_[kNumCategories] = {};
  uint64_t evictable_primary_bytes_ = 0;
};

}  // namespace shoal::object_store

#endif  // SHOAL_OBJECT_STORE_OBJECT_LEDGER_H_
