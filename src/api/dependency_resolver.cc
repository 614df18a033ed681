#include "api/dependency_resolver.h"

#include "absl/strings/str_cat.h"
#include "api/task_error.h"

namespace shoal::internal {

void DependencyResolver::SetArg(TaskArgs& args, size_t i,
                                const OwnedObjects::Ready& r) {
  if (r.stored) {
    args.stored[static_cast<int>(i)] = r.stored_object;
    args.values[i].clear();
  } else {
    args.stored.erase(static_cast<int>(i));
    args.values[i] = *r.value;
  }
}

absl::Status DependencyResolver::Resolve(const std::string& task_id,
                                         TaskArgs* args) {
  args->values.assign(args->args.size(), std::string());
  args->stored.clear();
  args->pending = 0;
  std::vector<std::string> waits;
  for (size_t i = 0; i < args->args.size(); ++i) {
    const TaskArg& arg = args->args[i];
    if (arg.ref == nullptr) {
      // Kept in args too: a rebuilt object's task runs again.
      args->values[i] = std::string(arg.value.data);
      continue;
    }
    const std::string& dep = arg.ref->id();
    OwnedObjects::Ready ready;
    absl::Status error;
    switch (objects_->Peek(dep, &ready, &error)) {
      case OwnedObjects::State::kUnknown:
        return TaskError(ErrorKind::kOther,
                         absl::StrCat("argument object ", dep,
                                      " is not owned by this driver; pass "
                                      "values or refs this driver created"));
      case OwnedObjects::State::kFailed:
        // Dependents fail with the error of what they depend on.
        return error;
      case OwnedObjects::State::kPending:
        ++args->pending;
        waits.push_back(dep);
        break;
      case OwnedObjects::State::kReady:
        SetArg(*args, i, ready);
        break;
    }
  }
  // Only once nothing failed: a failed task must not be woken later.
  for (const std::string& dep : waits) dependents_[dep].push_back(task_id);
  return absl::OkStatus();
}

bool DependencyResolver::WaitAgain(const std::string& task_id, TaskArgs* args,
                                   const std::string& object_id) {
  OwnedObjects::Ready ready;
  OwnedObjects::State state = objects_->Peek(object_id, &ready, nullptr);
  bool pending = state != OwnedObjects::State::kReady;
  for (size_t i = 0; i < args->args.size(); ++i) {
    const TaskArg& arg = args->args[i];
    if (arg.ref == nullptr || arg.ref->id() != object_id) continue;
    if (pending) {
      ++args->pending;
      dependents_[object_id].push_back(task_id);
    } else {
      SetArg(*args, i, ready);
    }
  }
  return pending;
}

void DependencyResolver::ObjectDone(
    const std::string& object_id, const FindFn& find,
    std::vector<std::string>* ready,
    std::vector<std::pair<std::string, absl::Status>>* failed) {
  auto deps = dependents_.find(object_id);
  if (deps == dependents_.end()) return;
  std::vector<std::string> waiting = std::move(deps->second);
  dependents_.erase(deps);
  OwnedObjects::Ready value;
  absl::Status error;
  OwnedObjects::State state = objects_->Peek(object_id, &value, &error);
  if (state == OwnedObjects::State::kUnknown) {
    error = TaskError(ErrorKind::kOther,
                      absl::StrCat("argument object ", object_id,
                                   " was released before the task ran"));
  }
  std::string last;
  for (const std::string& task_id : waiting) {
    if (task_id == last) continue;  // once per task, not per argument
    last = task_id;
    TaskArgs* args = find(task_id);
    if (args == nullptr) continue;
    if (state != OwnedObjects::State::kReady) {
      failed->emplace_back(task_id, error);
      continue;
    }
    for (size_t i = 0; i < args->args.size(); ++i) {
      const TaskArg& arg = args->args[i];
      if (arg.ref != nullptr && arg.ref->id() == object_id) {
        SetArg(*args, i, value);
        --args->pending;
      }
    }
    if (args->pending == 0) ready->push_back(task_id);
  }
}

}  // namespace shoal::internal
