// What a task or actor asks for, checked and turned into what the cluster
// reads: the resource shape agents lease by, and the parts of an actor's
// spec its options decide. Pure functions; errors name the fix.
#ifndef SHOAL_API_SUBMIT_OPTIONS_H_
#define SHOAL_API_SUBMIT_OPTIONS_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "api/task_entry.h"
#include "api/worker_command.h"
#include "scheduling/label_selector.h"
#include "scheduling/resource_set.h"
#include "shoal/internal/actor_invoke.h"
#include "shoal/internal/runtime.h"
#include "shoal/shoal.pb.h"

namespace shoal::internal {

// OK when this driver has workers that can run `what` (a task or actor):
// its own program, or a worker command; else the error says why not.
absl::Status CheckWorkersRun(bool workers_run_this_program,
                             const WorkerCommand& worker_command,
                             const std::string& what);

// The resources a task or actor asks for, as agents name them: inside a
// placement group, the group's resources ("CPU_group_<pg>"), and with a
// bundle index (>= 0) that bundle's own ("CPU_group_<i>_<pg>") as well.
absl::StatusOr<ResourceSet> ShapeFor(std::map<std::string, double> resources,
                                     const std::string& placement_group_id,
                                     int bundle_index);

// The shape of a task of `function` (1 CPU unless it says otherwise), or
// why its options are wrong.
absl::StatusOr<ResourceSet> TaskShape(const std::string& function,
                                      const TaskOptions& options);

// A task of `function` as the submitter queues it (shape, selector, the
// key of the queue its leases serve, retries), or why its options are wrong.
absl::StatusOr<std::unique_ptr<TaskEntry>> NewTaskEntry(
    const std::string& function, const TaskOptions& options);

// The spec of an actor of `class_name` (demangled) made by `factory`, as
// far as its options decide it (no id, job, program, owner or arguments),
// or why its options are wrong.
absl::StatusOr<proto::ActorSpec> ActorSpecFor(const std::string& factory,
                                              const std::string& class_name,
                                              const ActorOptions& options);

}  // namespace shoal::internal

#endif  // SHOAL_API_SUBMIT_OPTIONS_H_
