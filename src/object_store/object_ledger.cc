#include "object_store/object_ledger.h"

namespace shoal::object_store {

void ObjectLedger::Add(const std::string& id, Category category, uint64_t bytes,
                       bool primary, bool queue, Record* record) {
  record->category = category;
  record->bytes = bytes;
  record->primary = primary;
  bytes_[category] += bytes;
  ++count_[category];
  record->queued = category == kEvictable && queue;
  if (!record->queued) return;
  std::list<std::string>& order = primary ? primary_queue_ : secondary_queue_;
  record->queue_it = order.insert(order.end(), id);
  if (primary) evictable_primary_bytes_ += bytes;
}

void ObjectLedger::Remove(Record* record) {
  bytes_[record->category] -= record->bytes;
  --count_[record->category];
  if (!record->queued) return;
  if (record->primary) {
    primary_queue_.erase(record->queue_it);
    evictable_primary_bytes_ -= record->bytes;
  } else {
    secondary_queue_.erase(record->queue_it);
  }
  record->queued = false;
}

const std::string* ObjectLedger::OldestSecondary() const {
  return secondary_queue_.empty() ? nullptr : &secondary_queue_.front();
}

const std::string* ObjectLedger::OldestPrimary() const {
  return primary_queue_.empty() ? nullptr : &primary_queue_.front();
}

}  // namespace shoal::object_store
