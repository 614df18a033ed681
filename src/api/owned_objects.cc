#include "api/owned_objects.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "api/task_error.h"

namespace shoal::internal {

OwnedObjects::OwnedObjects(ForgetFn on_forget)
    : on_forget_(std::move(on_forget)) {}

void OwnedObjects::SetLocalNode(const std::string& node_id) {
  shoal::MutexLock lock(&mu_);
  local_node_ = node_id;
}

void OwnedObjects::AddPending(const std::string& id) {
  shoal::MutexLock lock(&mu_);
  objects_[id];
}

void OwnedObjects::AddValue(const std::string& id,
                            std::shared_ptr<const std::string> value) {
  Entry e;
  e.state = State::kReady;
  e.value = std::move(value);
  shoal::MutexLock lock(&mu_);
  objects_[id] = std::move(e);
}

void OwnedObjects::AddStored(const std::string& id,
                             proto::StoredObject object) {
  Entry e;
  e.state = State::kReady;
  e.stored = true;
  for (const auto& source : object.sources()) {
    e.copy_nodes.insert(source.node_id());
  }
  e.stored_object = std::move(object);
  shoal::MutexLock lock(&mu_);
  objects_[id] = std::move(e);
}

void OwnedObjects::AddBorrowed(const std::string& id) {
  shoal::MutexLock lock(&mu_);
  Entry& e = objects_[id];
  e.borrowed = true;
}

bool OwnedObjects::IsBorrowed(const std::string& id) const {
  shoal::MutexLock lock(&mu_);
  auto it = objects_.find(id);
  return it != objects_.end() && it->second.borrowed;
}

std::shared_ptr<RefHandle> OwnedObjects::NewHandle(const std::string& id) {
  auto handle = std::make_shared<RefHandle>(id);
  shoal::MutexLock lock(&mu_);
  handles_[id] = handle;
  return handle;
}

absl::StatusOr<std::shared_ptr<RefHandle>> OwnedObjects::HandleFor(
    const std::string& id) {
  shoal::MutexLock lock(&mu_);
  auto it = handles_.find(id);
  std::shared_ptr<RefHandle> handle =
      it == handles_.end() ? nullptr : it->second.lock();
  if (handle == nullptr) {
    return TaskError(
        ErrorKind::kOther,
        absl::StrCat("a value refers to object ", id,
                     ", which this process does not reference: refs inside "
                     "values can be read back only by the process that owns "
                     "the objects"));
  }
  return handle;
}

void OwnedObjects::Release(const std::string& id) {
  std::vector<Forgotten> forgotten;
  {
    shoal::MutexLock lock(&mu_);
    handles_.erase(id);
    auto it = objects_.find(id);
    if (it == objects_.end()) return;
    if (it->second.state == State::kPending) {
      it->second.released = true;
    } else {
      forgotten.push_back(EraseLocked(it));
    }
  }
  Told(std::move(forgotten));
}

OwnedObjects::Ready OwnedObjects::ReadyOf(const Entry& e) const {
  Ready ready;
  ready.stored = e.stored;
  if (e.stored) {
    ready.stored_object = e.stored_object;
    ready.local_copy =
        !local_node_.empty() && e.copy_nodes.count(local_node_) > 0;
  } else {
    ready.value = e.value;
  }
  return ready;
}

bool OwnedObjects::SettledLocked(const std::string& id) const {
  auto it = objects_.find(id);
  return it == objects_.end() || it->second.state != State::kPending;
}

absl::StatusOr<OwnedObjects::Ready> OwnedObjects::WaitReady(
    const std::string& id, int64_t timeout_ms, const BlockedFn& blocked) {
  mu_.Lock();
  if (objects_.find(id) == objects_.end()) {
    mu_.Unlock();
    return TaskError(ErrorKind::kOther,
                     absl::StrCat("object ", id,
                                  " is not known to this process (it was made "
                                  "by another driver or before a Shutdown)"));
  }
  if (!SettledLocked(id)) {
    const absl::Time deadline =
        timeout_ms < 0 ? absl::InfiniteFuture()
                       : absl::Now() + absl::Milliseconds(timeout_ms);
    // Told outside the lock: it may send a message.
    mu_.Unlock();
    if (blocked) blocked(true);
    mu_.Lock();
    ++waiters_;
    bool in_time = true;
    while (!SettledLocked(id)) {
      if (cv_.WaitWithDeadline(&mu_, deadline)) {
        in_time = SettledLocked(id);
        break;
      }
    }
    --waiters_;
    mu_.Unlock();
    if (blocked) blocked(false);
    mu_.Lock();
    // Looked up again: the table may have changed while unlocked.
    if (!SettledLocked(id) && !in_time) {
      mu_.Unlock();
      return TaskError(ErrorKind::kTimeout,
                       absl::StrCat("object ", id, " was not ready within ",
                                    timeout_ms, " ms"));
    }
    if (!SettledLocked(id)) {  // made pending again (a rebuild) while unlocked
      mu_.Unlock();
      return WaitReady(id, timeout_ms, blocked);
    }
  }
  absl::StatusOr<Ready> result;
  auto it = objects_.find(id);
  if (it == objects_.end()) {
    result =
        TaskError(ErrorKind::kOther,
                  absl::StrCat("object ", id, " was released while waiting"));
  } else if (it->second.state == State::kFailed) {
    result = it->second.error;
  } else {
    result = ReadyOf(it->second);
  }
  mu_.Unlock();
  return result;
}

size_t OwnedObjects::CountSettledLocked(const std::vector<std::string>& ids,
                                        std::vector<size_t>* ready) const {
  ready->clear();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (SettledLocked(ids[i])) ready->push_back(i);
  }
  return ready->size();
}

std::vector<size_t> OwnedObjects::WaitAny(const std::vector<std::string>& ids,
                                          size_t num_ready, int64_t timeout_ms,
                                          const BlockedFn& blocked) {
  num_ready = std::min(num_ready, ids.size());
  std::vector<size_t> ready;
  {
    shoal::MutexLock lock(&mu_);
    // A zero timeout only asks: the caller does not block, so a worker
    // lends no CPU for it.
    if (CountSettledLocked(ids, &ready) >= num_ready || timeout_ms == 0) {
      return ready;
    }
  }
  if (blocked) blocked(true);
  {
    shoal::MutexLock lock(&mu_);
    const absl::Time deadline =
        timeout_ms < 0 ? absl::InfiniteFuture()
                       : absl::Now() + absl::Milliseconds(timeout_ms);
    ++waiters_;
    while (CountSettledLocked(ids, &ready) < num_ready &&
           !cv_.WaitWithDeadline(&mu_, deadline)) {
    }
    --waiters_;
    CountSettledLocked(ids, &ready);
  }
  if (blocked) blocked(false);
  return ready;
}

OwnedObjects::State OwnedObjects::Peek(const std::string& id, Ready* ready,
                                       absl::Status* error) const {
  shoal::MutexLock lock(&mu_);
  auto it = objects_.find(id);
  if (it == objects_.end()) return State::kUnknown;
  const Entry& e = it->second;
  if (e.state == State::kReady && ready != nullptr) *ready = ReadyOf(e);
  if (e.state == State::kFailed && error != nullptr) *error = e.error;
  return e.state;
}

bool OwnedObjects::Complete(const std::string& id, proto::TaskResult* result) {
  shoal::MutexLock lock(&mu_);
  auto it = objects_.find(id);
  if (it == objects_.end()) return false;
  Entry& e = it->second;
  if (result->has_stored()) {
    e.stored = true;
    e.stored_object = std::move(*result->mutable_stored());
    for (const auto& source : e.stored_object.sources()) {
      e.copy_nodes.insert(source.node_id());
    }
  } else {
    e.stored = false;
    e.value = std::make_shared<const std::string>(
        std::move(*result->mutable_value()));
  }
  e.state = State::kReady;
  Notify();
  return e.stored && !e.released;
}

void OwnedObjects::Fail(const std::string& id, absl::Status error) {
  shoal::MutexLock lock(&mu_);
  auto it = objects_.find(id);
  if (it == objects_.end()) return;
  it->second.state = State::kFailed;
  it->second.error = std::move(error);
  Notify();
}

void OwnedObjects::ForgetIfReleased(const std::string& id) {
  std::vector<Forgotten> forgotten;
  {
    shoal::MutexLock lock(&mu_);
    auto it = objects_.find(id);
    if (it == objects_.end() || !it->second.released ||
        it->second.state == State::kPending) {
      return;
    }
    forgotten.push_back(EraseLocked(it));
  }
  Told(std::move(forgotten));
}

void OwnedObjects::AddCopy(const std::string& id, const std::string& node,
                           const std::string& transfer_address) {
  if (node.empty()) return;
  shoal::MutexLock lock(&mu_);
  auto it = objects_.find(id);
  if (it == objects_.end()) return;
  it->second.copy_nodes.insert(node);
  if (transfer_address.empty()) return;
  proto::StoredObject& object = it->second.stored_object;
  for (const auto& s : object.sources()) {
    if (s.node_id() == node) return;
  }
  proto::ObjectSource* source = object.add_sources();
  source->set_node_id(node);
  source->set_address(transfer_address);
}

OwnedObjects::Rebuild OwnedObjects::NeedsRebuild(
    const std::string& id, const proto::StoredObject& failed) const {
  shoal::MutexLock lock(&mu_);
  auto it = objects_.find(id);
  if (it == objects_.end()) return Rebuild::kGone;
  const Entry& e = it->second;
  if (e.state == State::kPending) return Rebuild::kUnderway;
  if (e.stored &&
      e.stored_object.SerializeAsString() != failed.SerializeAsString()) {
    return Rebuild::kUnderway;  // rebuilt, or copied elsewhere, since
  }
  return Rebuild::kNeeded;
}

void OwnedObjects::MarkPending(const std::string& id) {
  shoal::MutexLock lock(&mu_);
  Entry& e = objects_[id];
  e.state = State::kPending;
  e.stored = false;
  e.stored_object.Clear();
  e.copy_nodes.clear();
  e.error = absl::OkStatus();
}

proto::StoredObject OwnedObjects::StoredObjectOf(const std::string& id) const {
  shoal::MutexLock lock(&mu_);
  auto it = objects_.find(id);
  if (it == objects_.end() || !it->second.stored) return {};
  return it->second.stored_object;
}

std::vector<std::pair<std::string, std::set<std::string>>>
OwnedObjects::StoredCopies() const {
  std::vector<std::pair<std::string, std::set<std::string>>> out;
  shoal::MutexLock lock(&mu_);
  for (const auto& [id, e] : objects_) {
    if (e.stored && !e.borrowed) out.emplace_back(id, e.copy_nodes);
  }
  return out;
}

void OwnedObjects::Clear() {
  Table objects;
  {
    shoal::MutexLock lock(&mu_);
    objects.swap(objects_);
    Notify();
  }
}

size_t OwnedObjects::size() const {
  shoal::MutexLock lock(&mu_);
  return objects_.size();
}

OwnedObjects::Forgotten OwnedObjects::EraseLocked(Table::iterator it) {
  Forgotten f;
  f.id = it->first;
  f.stored = it->second.stored;
  f.copy_nodes = std::move(it->second.copy_nodes);
  f.borrowed = it->second.borrowed;
  objects_.erase(it);
  return f;
}

void OwnedObjects::Notify() {
  if (waiters_ > 0) cv_.SignalAll();
}

void OwnedObjects::Told(std::vector<Forgotten> forgotten) {
  if (!on_forget_) return;
  for (Forgotten& f : forgotten) {
    on_forget_(f.id, f.stored, std::move(f.copy_nodes), f.borrowed);
  }
}

}  // namespace shoal::internal
