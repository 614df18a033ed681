#include "api/task_context.h"

#include <atomic>

namespace shoal::internal {
namespace {

thread_local int t_task_depth = -1;
std::atomic<int> g_task_depth{0};
thread_local std::string t_task_id;
std::atomic<bool> g_task_cancelled{false};

}  // namespace

void SetCurrentTaskDepth(int depth) {
  t_task_depth = depth;
  g_task_depth.store(depth);
}

int CurrentTaskDepth() {
  return t_task_depth >= 0 ? t_task_depth : g_task_depth.load();
}

void SetCurrentTaskId(const std::string& task_id) { t_task_id = task_id; }

const std::string& CurrentTaskId() { return t_task_id; }

void SetCurrentTaskCancelled(bool cancelled) {
  g_task_cancelled.store(cancelled);
}

bool CurrentTaskCancelled() { return g_task_cancelled.load(); }

namespace {
thread_local std::vector<std::pair<std::string, std::string>> t_lent_refs;
}  // namespace

void NoteLentRef(const std::string& id, const std::string& owner_address) {
  t_lent_refs.emplace_back(id, owner_address);
}

std::vector<std::pair<std::string, std::string>> TakeLentRefs() {
  return std::exchange(t_lent_refs, {});
}

}  // namespace shoal::internal
