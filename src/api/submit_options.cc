#include "api/submit_options.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "api/task_error.h"
#include "common/status_macros.h"

namespace shoal::internal {
namespace {

absl::Status OtherError(absl::string_view message) {
  return TaskError(ErrorKind::kOther, message);
}

absl::Status CheckActorOptions(const ActorOptions& options) {
  if (options.max_concurrency < 1) {
    return OtherError(
        "SetMaxConcurrency: an actor runs at least 1 call at a time");
  }
  if (options.max_restarts < -1 || options.max_task_retries < -1) {
    return OtherError(
        "SetMaxRestarts and SetMaxTaskRetries take 0 or more, or -1 for "
        "no limit");
  }
  if (!options.placement_group_id.empty() && options.resources.empty()) {
    return OtherError(
        "an actor in a placement group takes its resources from its "
        "bundle: say which with SetResources (e.g. {{\"CPU\", 1}})");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckWorkersRun(bool workers_run_this_program,
                             const WorkerCommand& worker_command,
                             const std::string& what) {
  if (workers_run_this_program || !worker_command.empty()) {
    return absl::OkStatus();
  }
  return OtherError(absl::StrCat(
      "cannot run ", what,
      ": this driver's program cannot be its workers "
      "(a Python driver runs C++ functions only from a C++ program)"));
}

absl::StatusOr<ResourceSet> ShapeFor(std::map<std::string, double> resources,
                                     const std::string& placement_group_id,
                                     int bundle_index) {
  if (!placement_group_id.empty()) {
    // As Ray names them: a bundle's own resources and the group's, which
    // every bundle adds to on its node (a task in a given bundle takes from
    // both; one in any bundle, from the group's alone).
    std::map<std::string, double> in_bundle;
    for (const auto& [name, amount] : resources) {
      if (amount <= 0) continue;
      in_bundle[absl::StrCat(name, "_group_", placement_group_id)] = amount;
      if (bundle_index >= 0) {
        in_bundle[absl::StrCat(name, "_group_", bundle_index, "_",
                               placement_group_id)] = amount;
      }
    }
    resources = std::move(in_bundle);
  }
  return ResourceSet::FromDoubles(resources);
}

absl::StatusOr<ResourceSet> TaskShape(const std::string& function,
                                      const TaskOptions& options) {
  std::map<std::string, double> resources = options.resources;
  if (resources.count("CPU") == 0) resources["CPU"] = 1;
  auto shape =
      ShapeFor(resources, options.placement_group_id, options.bundle_index);
  if (!shape.ok()) {
    return OtherError(absl::StrCat("bad resources for task ", function, ": ",
                                   shape.status().message()));
  }
  if (options.max_retries < 0) {
    return OtherError("max_retries must be 0 or more");
  }
  return shape;
}

absl::StatusOr<std::unique_ptr<TaskEntry>> NewTaskEntry(
    const std::string& function, const TaskOptions& options) {
  ASSIGN_OR_RETURN(ResourceSet shape, TaskShape(function, options));
  auto selector =
      LabelSelector::Parse(options.label_selector, options.label_selector_soft);
  if (!selector.ok()) {
    return OtherError(absl::StrCat("bad label_selector for task ", function,
                                   ": ", selector.status().message()));
  }
  auto task = std::make_unique<TaskEntry>();
  task->function = function;
  task->shape_key = shape.DebugString();
  if (!selector->empty()) {
    absl::StrAppend(&task->shape_key, " on ", selector->DebugString());
  }
  if (options.worker_may_end) absl::StrAppend(&task->shape_key, " 1/worker");
  task->shape = std::move(shape);
  task->selector = *std::move(selector);
  task->worker_may_end = options.worker_may_end;
  task->retries_left = options.max_retries;
  task->in_cpp_program = options.in_cpp_program;
  return task;
}

absl::StatusOr<proto::ActorSpec> ActorSpecFor(const std::string& factory,
                                              const std::string& class_name,
                                              const ActorOptions& options) {
  if (absl::Status checked = CheckActorOptions(options); !checked.ok()) {
    return checked;
  }
  auto shape = ShapeFor(options.resources, options.placement_group_id,
                        options.bundle_index);
  if (!shape.ok()) {
    return OtherError(absl::StrCat("bad resources for actor ", class_name, ": ",
                                   shape.status().message()));
  }
  auto selector =
      LabelSelector::Parse(options.label_selector, options.label_selector_soft);
  if (!selector.ok()) {
    return OtherError(absl::StrCat("bad label_selector for actor ", class_name,
                                   ": ", selector.status().message()));
  }
  proto::ActorSpec spec;
  if (!selector->empty()) selector->ToProto(spec.mutable_label_selector());
  spec.set_name(options.name);
  spec.set_factory(factory);
  spec.set_class_name(class_name);
  shape->ToProto(spec.mutable_shape());
  spec.set_max_restarts(options.max_restarts);
  spec.set_max_task_retries(options.max_task_retries);
  spec.set_max_concurrency(options.max_concurrency);
  spec.set_detached(options.detached);
  spec.set_placement_group_id(options.placement_group_id);
  spec.set_bundle_index(options.bundle_index);
  return spec;
}

}  // namespace shoal::internal
