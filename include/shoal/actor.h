// Actors: stateful remote objects, in the manner of Ray's C++ actors.
//
//   class Counter {
//    public:
//     explicit Counter(int start) : n_(start) {}
//     int Add(int x) { return n_ += x; }
//     int Get() const { return n_; }
//    private:
//     int n_;
//   };
//   Counter* CreateCounter(int start) { return new Counter(start); }
//   SHOAL_REMOTE(CreateCounter, &Counter::Add, &Counter::Get);
//
//   auto counter = shoal::Actor(CreateCounter).SetName("counter").Remote(1);
//   shoal::ObjectRef<int> sum = counter.Task(&Counter::Add).Remote(5);
//   shoal::Get(sum);  // 6
//
// An actor lives in one worker process of the cluster. Calls from one caller
// run in the order they were made. A non-detached actor ends with the job
// that created it (its driver exiting, however it exits); a detached one
// when it is killed. When its process dies, it is made again from its
// factory and constructor arguments, up to SetMaxRestarts() times.
//
#ifndef SHOAL_ACTOR_H_
#define SHOAL_ACTOR_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "shoal/errors.h"
#include "shoal/internal/actor_invoke.h"
#include "shoal/internal/invoke.h"
#include "shoal/object.h"
#include "shoal/placement.h"

namespace shoal {

template <typename T>
class ActorHandle;

template <typename T, typename Method>
class ActorTaskCaller;

// Calls of one method of an actor.
template <typename T, typename Method>
class ActorTaskCaller {
  using Traits = internal::MethodTraits<Method>;
  using R = typename Traits::Result;

 public:
  ActorTaskCaller(std::string actor_id, Method method)
      : actor_id_(std::move(actor_id)), method_(method) {}

  // Arguments may be values or ObjectRefs (the call waits for them; calls
  // behind it wait too, so that order holds).
  template <typename... Args>
  ObjectRef<R> Remote(Args&&... args) {
    static_assert(sizeof...(Args) == std::tuple_size_v<typename Traits::Params>,
                  "Remote() takes as many arguments as the method");
    return ObjectRef<R>(internal::SubmitActorTask(
        actor_id_, internal::ActorMethodName(internal::MethodKey(method_)),
        internal::MakeTaskArgs<typename Traits::Params>(
            std::forward<Args>(args)...)));
  }

 private:
  std::string actor_id_;
  Method method_;
};

// A reference to an actor: copy it, pass it to tasks and actors, keep it
// inside values. It does not keep the actor alive (the actor's lifetime
// does).
template <typename T>
class ActorHandle {
 public:
  ActorHandle() = default;
  explicit ActorHandle(std::string actor_id) : id_(std::move(actor_id)) {}

  const std::string& id() const { return id_; }
  bool valid() const { return !id_.empty(); }
  bool operator==(const ActorHandle& other) const { return id_ == other.id_; }

  // A caller for `method`, a member function registered with SHOAL_REMOTE.
  template <typename Method>
  ActorTaskCaller<T, Method> Task(Method method) const {
    static_assert(std::is_member_function_pointer_v<Method>,
                  "Task() of an actor takes a member function, "
                  "e.g. &Counter::Add");
    static_assert(
        std::is_base_of_v<typename internal::MethodTraits<Method>::Class, T>,
        "the method is not a member of the actor's class");
    return ActorTaskCaller<T, Method>(id_, method);
  }

  // Ends the actor's process now. no_restart: it stays dead; otherwise it
  // is made again if it has restarts left. Calls in flight fail with
  // ActorDiedError (or are retried, SetMaxTaskRetries).
  void Kill(bool no_restart = true) const {
    internal::KillActor(id_, no_restart);
  }

  MSGPACK_DEFINE(id_);

 private:
  std::string id_;
};

// How an actor is made.
template <typename T, typename... Params>
class ActorCreator {
 public:
  using Factory = T* (*)(Params...);
  explicit ActorCreator(Factory factory) : factory_(factory) {}

  // A name unique among the cluster's live actors: GetActor(name) finds it
  // from any driver or task.
  ActorCreator& SetName(const std::string& name) {
    options_.name = name;
    return *this;
  }
  // Resources the actor holds for its life (default: none, so that many
  // actors share a node, as in Ray). Accelerators get distinct devices and
  // the variables their frameworks read, as for tasks.
  ActorCreator& SetResource(const std::string& name, double amount) {
    options_.resources[name] = amount;
    return *this;
  }
  ActorCreator& SetResources(const std::map<std::string, double>& resources) {
    for (const auto& [k, v] : resources) options_.resources[k] = v;
    return *this;
  }
  // Times the actor is made again after its process dies (default 0; -1:
  // without limit).
  ActorCreator& SetMaxRestarts(int restarts) {
    options_.max_restarts = restarts;
    return *this;
  }
  // Times a call in flight when the actor's process died is sent again to
  // the restarted actor (default 0: it fails with ActorDiedError; -1:
  // without limit).
  ActorCreator& SetMaxTaskRetries(int retries) {
    options_.max_task_retries = retries;
    return *this;
  }
  // Calls run on this many threads of the actor's process (default 1: one
  // at a time, in order).
  ActorCreator& SetMaxConcurrency(int threads) {
    options_.max_concurrency = threads;
    return *this;
  }
  ActorCreator& SetPlacementGroup(const PlacementGroup& group,
                                  int bundle_index) {
    internal::CheckBundleIndex(group.id(), group.bundle_count(), bundle_index);
    options_.placement_group_id = group.id();
    options_.bundle_index = bundle_index;
    return *this;
  }
  // kNonDetached (default): ends with the job that created it.
  // kDetached: lives until killed; needs a name to be found again.
  ActorCreator& SetLifetime(Lifetime lifetime) {
    options_.detached = lifetime == Lifetime::kDetached;
    return *this;
  }

  // Registers the actor and returns at once; it is made in the background.
  // Throws shoal::Error for a name a live actor holds or bad options.
  template <typename... Args>
  ActorHandle<T> Remote(Args&&... args) {
    static_assert(sizeof...(Args) == sizeof...(Params),
                  "Remote() takes as many arguments as the factory");
    return ActorHandle<T>(internal::CreateActor(
        internal::FunctionName(reinterpret_cast<const void*>(factory_)),
        typeid(T).name(),
        internal::MakeTaskArgs<std::tuple<Params...>>(
            std::forward<Args>(args)...),
        options_));
  }

 private:
  Factory factory_;
  internal::ActorOptions options_;
};

template <typename T, typename... Params>
ActorCreator<T, Params...> Actor(T* (*factory)(Params...)) {
  return ActorCreator<T, Params...>(factory);
}

// The live actor named `name`, from any driver or task; empty when there is
// none. Throws shoal::Error when it is an actor of another class.
template <typename T>
std::optional<ActorHandle<T>> GetActor(const std::string& name) {
  std::string id = internal::FindActor(name, typeid(T).name());
  if (id.empty()) return std::nullopt;
  return ActorHandle<T>(std::move(id));
}

// Inside an actor's method: ends the actor for good once this method
// returns control (by throwing; do not catch it). The call that made it
// fails with ActorDiedError; later calls too. Outside an actor: throws
// shoal::Error.
[[noreturn]] void ExitActor();

// Inside an actor: whether this instance replaces one whose process died.
bool WasCurrentActorRestarted();

}  // namespace shoal

#endif  // SHOAL_ACTOR_H_
