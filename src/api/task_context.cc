#include "api/task_context.h"

#include <atomic>

#include "common/mutex.h"

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
Mutex g_actor_mu;
std::string* g_process_actor_id ABSL_GUARDED_BY(g_actor_mu) = nullptr;
}  // namespace

void SetProcessActorId(const std::string& actor_id) {
  MutexLock lock(&g_actor_mu);
  if (g_process_actor_id == nullptr) {
    g_process_actor_id = new std::string();  // never freed: read at exit too
  }
  *g_process_actor_id = actor_id;
}

std::string ProcessActorId() {
  MutexLock lock(&g_actor_mu);
  return g_process_actor_id != nullptr ? *g_process_actor_id : std::string();
}

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
