// The objects a driver (or a task's runtime) owns: the results of the tasks
// it submitted and the values it put. Each is pending, ready (a value held
// here, or a stored object in node object stores) or failed (with the
// error its readers get), until the last reference to it is released.
//
// Thread-safe: user threads wait in WaitReady()/WaitAny() while the
// runtime's loop completes objects; nothing here waits for the loop.
#ifndef SHOAL_API_OWNED_OBJECTS_H_
#define SHOAL_API_OWNED_OBJECTS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "shoal/internal/runtime.h"
#include "shoal/shoal.pb.h"

namespace shoal::internal {

class OwnedObjects {
 public:
  // Told (outside the lock, on the thread that dropped it) when an object
  // is forgotten, with the nodes holding copies of a stored one; `borrowed`
  // for an object another process owns (AddBorrowed).
  using ForgetFn =
      std::function<void(const std::string& id, bool stored,
                         std::set<std::string> copy_nodes, bool borrowed)>;
  // Told with true before a thread blocks waiting for objects, and with
  // false once it stops waiting.
  using BlockedFn = std::function<void(bool blocked)>;

  explicit OwnedObjects(ForgetFn on_forget);
  OwnedObjects(const OwnedObjects&) = delete;
  OwnedObjects& operator=(const OwnedObjects&) = delete;

  // The node whose object store this process reads from ("" for none):
  // Ready::local_copy says whether that node holds a copy.
  void SetLocalNode(const std::string& node_id);

  // What a reader of a ready object gets.
  struct Ready {
    std::shared_ptr<const std::string> value;  // msgpack, when not stored
    bool stored = false;
    proto::StoredObject stored_object;  // where, when stored
    bool local_copy = false;            // the local node holds a copy
  };

  // ---- Making objects ----
  // A task's result, until Complete() or Fail().
  void AddPending(const std::string& id);
  void AddValue(const std::string& id,
                std::shared_ptr<const std::string> value);
  // Stored in node stores; every source holds a copy.
  void AddStored(const std::string& id, proto::StoredObject object);
  // An object another process owns and lends this one (borrowed_objects.h):
  // pending until its owner says how it ended (Complete() or Fail()). Its
  // copies are the owner's to free.
  void AddBorrowed(const std::string& id);
  bool IsBorrowed(const std::string& id) const;

  // ---- References ----
  std::shared_ptr<RefHandle> NewHandle(const std::string& id);
  // The live handle of `id`, for refs read back from values.
  absl::StatusOr<std::shared_ptr<RefHandle>> HandleFor(const std::string& id);
  // The last handle is gone: forgotten now, or once it stops being pending.
  void Release(const std::string& id);

  // ---- Readers (user threads) ----
  // Waits up to `timeout_ms` (< 0: no limit) until `id` is not pending.
  // Errors: the object's own error, kTimeout, or kOther for an unknown id.
  absl::StatusOr<Ready> WaitReady(const std::string& id, int64_t timeout_ms,
                                  const BlockedFn& blocked);
  // Waits until `num_ready` of `ids` are not pending (or the timeout);
  // returns the indices of those that are not. A zero timeout only looks:
  // `blocked` is not called.
  std::vector<size_t> WaitAny(const std::vector<std::string>& ids,
                              size_t num_ready, int64_t timeout_ms,
                              const BlockedFn& blocked);

  // ---- The runtime's loop ----
  enum class State { kUnknown, kPending, kReady, kFailed };
  // `id` now; fills *ready (kReady) or *error (kFailed).
  State Peek(const std::string& id, Ready* ready, absl::Status* error) const;
  // A task made `id`: `result` holds its value or where it is stored.
  // True when it is stored and still referenced (its maker is worth
  // keeping, to rebuild it).
  bool Complete(const std::string& id, proto::TaskResult* result);
  void Fail(const std::string& id, absl::Status error);
  // Forgets `id` if it was released while pending (call once what waited
  // on it has read it).
  void ForgetIfReleased(const std::string& id);
  // A worker on `node` pulled a copy of stored `id`: freed there too, and
  // a source for later pulls (`transfer_address` may be empty).
  void AddCopy(const std::string& id, const std::string& node,
               const std::string& transfer_address);

  // ---- Recovery ----
  enum class Rebuild {
    kGone,      // released: nothing to rebuild
    kUnderway,  // already pending again, or rebuilt or copied since
    kNeeded,    // every copy `failed` named is gone
  };
  Rebuild NeedsRebuild(const std::string& id,
                       const proto::StoredObject& failed) const;
  // `id` is being made again: pending, with no copy anywhere.
  void MarkPending(const std::string& id);
  // Where stored `id` is (empty when it is not stored or unknown).
  proto::StoredObject StoredObjectOf(const std::string& id) const;

  // ---- Shutdown ----
  // Every stored object this process owns, with the nodes holding its
  // copies.
  std::vector<std::pair<std::string, std::set<std::string>>> StoredCopies()
      const;
  void Clear();
  size_t size() const;

 private:
  struct Entry {
    State state = State::kPending;
    std::shared_ptr<const std::string> value;
    bool stored = false;
    proto::StoredObject stored_object;
    std::set<std::string> copy_nodes;
    absl::Status error;
    bool released = false;
    bool borrowed = false;
  };
  using Table = absl::flat_hash_map<std::string, Entry>;

  Ready ReadyOf(const Entry& e) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ready, failed or released: no longer pending.
  bool SettledLocked(const std::string& id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets `ready` to the indexes of the settled `ids`; returns their count.
  size_t CountSettledLocked(const std::vector<std::string>& ids,
                            std::vector<size_t>* ready) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Erases `it`; the caller tells on_forget_ once the lock is dropped.
  struct Forgotten {
    std::string id;
    bool stored = false;
    std::set<std::string> copy_nodes;
    bool borrowed = false;
  };
  Forgotten EraseLocked(Table::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Notify() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Told(std::vector<Forgotten> forgotten);

  const ForgetFn on_forget_;
  mutable shoal::Mutex mu_;
  shoal::CondVar cv_;
  Table objects_ ABSL_GUARDED_BY(mu_);
  // Every live handle, for refs unpacked from values.
  absl::flat_hash_map<std::string, std::weak_ptr<RefHandle>> handles_
      ABSL_GUARDED_BY(mu_);
  std::string local_node_ ABSL_GUARDED_BY(mu_);
  int waiters_ ABSL_GUARDED_BY(mu_) = 0;  // threads in cv_.Wait
};

}  // namespace shoal::internal

#endif  // SHOAL_API_OWNED_OBJECTS_H_
