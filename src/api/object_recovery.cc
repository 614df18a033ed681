#include "api/object_recovery.h"

#include "absl/strings/str_cat.h"
#include "api/task_error.h"
#include "common/logging.h"

namespace shoal::internal {

void ObjectRecovery::Keep(std::unique_ptr<TaskEntry> task) {
  if (task == nullptr || !task->actor_id.empty()) return;
  std::string id = task->id;
  lineage_[id] = std::move(task);
}

absl::StatusOr<std::unique_ptr<TaskEntry>> ObjectRecovery::TakeForRebuild(
    const std::string& object_id) {
  auto it = lineage_.find(object_id);
  if (it == lineage_.end()) {
    return TaskError(ErrorKind::kObjectLost,
                     "it was made by shoal::Put (not by a task), so nothing "
                     "can rebuild it");
  }
  TaskEntry& t = *it->second;
  if (t.retries_left <= 0) {
    return TaskError(ErrorKind::kObjectLost,
                     absl::StrCat("the task that made it (", t.function,
                                  ") has no retries left to rebuild it; raise "
                                  "SetMaxRetries() to let Shoal re-run it"));
  }
  --t.retries_left;
  ++t.attempt;
  SHOAL_LOG(WARNING) << "object " << object_id
                     << " was lost with every node that held it; rebuilding "
                        "it by running "
                     << t.function << " again (" << t.retries_left
                     << " retries left)";
  std::unique_ptr<TaskEntry> task = std::move(it->second);
  lineage_.erase(it);
  return task;
}

}  // namespace shoal::internal
