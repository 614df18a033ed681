// Resolves the ref arguments of submitted tasks: a task leaves for a worker
// only once every object it takes is ready, and fails with the error of an
// argument that failed. Runs on the runtime's loop thread only.
#ifndef SHOAL_API_DEPENDENCY_RESOLVER_H_
#define SHOAL_API_DEPENDENCY_RESOLVER_H_

#include <functional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "api/owned_objects.h"
#include "api/task_entry.h"

namespace shoal::internal {

class DependencyResolver {
 public:
  explicit DependencyResolver(OwnedObjects* objects) : objects_(objects) {}
  DependencyResolver(const DependencyResolver&) = delete;
  DependencyResolver& operator=(const DependencyResolver&) = delete;

  // Fills the arguments of `task_id` that are ready and waits for the
  // pending ones (args->pending counts them). An error when an argument
  // failed (its own error) or is not owned here.
  absl::Status Resolve(const std::string& task_id, TaskArgs* args);

  // `object_id`, an argument of `task_id`, is being made again: the task
  // waits for it once more (true), or takes it at once (false: it is
  // ready already).
  bool WaitAgain(const std::string& task_id, TaskArgs* args,
                 const std::string& object_id);

  // `object_id` is no longer pending. Of the tasks that waited for it (and
  // that `find` still knows), those now ready go to *ready, and those whose
  // argument failed to *failed with its error.
  using FindFn = std::function<TaskArgs*(const std::string& task_id)>;
  void ObjectDone(const std::string& object_id, const FindFn& find,
                  std::vector<std::string>* ready,
                  std::vector<std::pair<std::string, absl::Status>>* failed);

  // Objects some task waits for.
  size_t waited_objects() const { return dependents_.size(); }

 private:
  static void SetArg(TaskArgs& args, size_t i, const OwnedObjects::Ready& r);

  OwnedObjects* const objects_;
  // Object id -> the tasks waiting for it (once per argument).
  std::unordered_map<std::string, std::vector<std::string>> dependents_;
};

}  // namespace shoal::internal

#endif  // SHOAL_API_DEPENDENCY_RESOLVER_H_
