// Lineage: the task that made each stored object still referenced, kept so
// that the object can be made again when every node holding a copy is
// lost. Runs on the runtime's loop thread only.
#ifndef SHOAL_API_OBJECT_RECOVERY_H_
#define SHOAL_API_OBJECT_RECOVERY_H_

#include <memory>
#include <string>
#include <unordered_map>

#include "absl/status/statusor.h"
#include "api/task_entry.h"

namespace shoal::internal {

class ObjectRecovery {
 public:
  using Lineage = std::unordered_map<std::string, std::unique_ptr<TaskEntry>>;

  // Keeps `task`, the maker of stored object task->id (and the arguments
  // it holds), while that object lives. Actor calls are not kept: the
  // actor's state has moved on, so running one again is no rebuild.
  void Keep(std::unique_ptr<TaskEntry> task);
  // The object is gone: its maker is no longer needed.
  void Forget(const std::string& object_id) { lineage_.erase(object_id); }

  // The task to run again to make `object_id`, charged one retry, or why
  // it cannot be rebuilt (put objects, makers with no retry left).
  absl::StatusOr<std::unique_ptr<TaskEntry>> TakeForRebuild(
      const std::string& object_id);

  // Everything kept, for the caller to drop where releasing refs is safe.
  Lineage TakeAll() { return std::move(lineage_); }
  size_t size() const { return lineage_.size(); }

 private:
  Lineage lineage_;
};

}  // namespace shoal::internal

#endif  // SHOAL_API_OBJECT_RECOVERY_H_
