// The actor entry points of the public API (shoal/actor.h).
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "api/core_runtime.h"
#include "api/task_error.h"
#include "head_client/head_client.h"
#include "shoal/api.h"
#include "shoal/shoal.pb.h"

namespace shoal {
namespace internal {

std::string CreateActor(const std::string& factory,
                        const std::string& class_type,
                        std::vector<TaskArg> args,
                        const ActorOptions& options) {
  return ValueOrThrow(RequireRuntime()->CreateActor(factory, class_type,
                                                    std::move(args), options));
}

std::shared_ptr<RefHandle> SubmitActorTask(const std::string& actor_id,
                                           const std::string& method,
                                           std::vector<TaskArg> args) {
  return ValueOrThrow(
      RequireRuntime()->SubmitActorTask(actor_id, method, std::move(args)));
}

std::string FindActor(const std::string& name, const std::string& class_type) {
  if (name.empty()) throw Error("GetActor: give the actor's name");
  proto::GetActorRequest req;
  req.set_name(name);
  absl::StatusOr<proto::ActorInfo> found =
      RequireRuntime()->head().GetActor(req);
  if (absl::IsNotFound(found.status())) return "";
  if (!found.ok()) {
    throw Error(absl::StrCat("cannot look up actor \"", name,
                             "\": ", found.status().message()));
  }
  const proto::ActorInfo& info = *found;
  if (info.state() == proto::ActorInfo::DEAD) return "";
  std::string want = Demangle(class_type);
  if (info.spec().class_name() != want) {
    throw Error(absl::StrCat("actor \"", name, "\" is a ",
                             info.spec().class_name(), ", not a ", want));
  }
  return info.spec().actor_id();
}

void KillActor(const std::string& actor_id, bool no_restart) {
  if (actor_id.empty()) throw Error("Kill: this actor handle is empty");
  proto::KillActorRequest req;
  req.set_actor_id(actor_id);
  req.set_no_restart(no_restart);
  std::shared_ptr<CoreRuntime> runtime = RequireRuntime();
  absl::Status st = runtime->head().KillActor(req);
  if (st.ok() && no_restart) runtime->ActorKilled(actor_id);
  if (!st.ok()) {
    throw Error(
        absl::StrCat("cannot kill actor ", actor_id, ": ", st.message()));
  }
}

}  // namespace internal

}  // namespace shoal
