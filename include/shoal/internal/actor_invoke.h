// The non-template entry points and invoker templates behind shoal/actor.h.
// Not part of the public API: names may change.
#ifndef SHOAL_INTERNAL_ACTOR_INVOKE_H_
#define SHOAL_INTERNAL_ACTOR_INVOKE_H_

#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "shoal/internal/runtime.h"
#include "shoal/serialization.h"

namespace shoal::internal {

struct ActorOptions {
  std::string name;
  std::map<std::string, double> resources;
  int max_restarts = 0;
  int max_task_retries = 0;
  int max_concurrency = 1;
  std::string placement_group_id;
  int bundle_index = -1;
  bool detached = false;
  // As TaskOptions::label_selector: the nodes its worker may run on.
  std::map<std::string, std::string> label_selector;
  bool label_selector_soft = false;
};

// Registers the actor with the head; returns its id. `class_type` is
// typeid(T).name() of its class.
std::string CreateActor(const std::string& factory,
                        const std::string& class_type,
                        std::vector<TaskArg> args, const ActorOptions& options);
std::shared_ptr<RefHandle> SubmitActorTask(const std::string& actor_id,
                                           const std::string& method,
                                           std::vector<TaskArg> args);
// The id of the live actor named `name`, "" when there is none; throws
// shoal::Error when its class is not `class_type`.
std::string FindActor(const std::string& name, const std::string& class_type);
void KillActor(const std::string& actor_id, bool no_restart);

template <typename M>
struct MethodTraits;
template <typename C, typename R, typename... P>
struct MethodTraits<R (C::*)(P...)> {
  using Class = C;
  using Result = R;
  using Params = std::tuple<P...>;
};
template <typename C, typename R, typename... P>
struct MethodTraits<R (C::*)(P...) const> : MethodTraits<R (C::*)(P...)> {};
template <typename C, typename R, typename... P>
struct MethodTraits<R (C::*)(P...) noexcept> : MethodTraits<R (C::*)(P...)> {};
template <typename C, typename R, typename... P>
struct MethodTraits<R (C::*)(P...) const noexcept>
    : MethodTraits<R (C::*)(P...)> {};

// Identifies a member function within this binary (member pointers cannot
// be compared through void*): its bytes and its type.
template <typename M>
std::string MethodKey(M method) {
  std::string key(reinterpret_cast<const char*>(&method), sizeof(method));
  key += typeid(M).name();
  return key;
}

using ActorInstance = std::shared_ptr<void>;
using FactoryInvoker =
    std::function<ActorInstance(const std::vector<ObjectValue>& args)>;
using MethodInvoker = std::function<ObjectValue(
    void* instance, const std::vector<ObjectValue>& args)>;

void RegisterActorFactory(const std::string& name, const void* address,
                          FactoryInvoker invoker);
void RegisterActorMethod(const std::string& name, const std::string& key,
                         MethodInvoker invoker);
// The registered name of a method; throws shoal::Error when it was not
// registered.
const std::string& ActorMethodName(const std::string& key);

inline void CheckArgCount(size_t got, size_t expected) {
  if (got != expected) {
    throw std::invalid_argument("expects " + std::to_string(expected) +
                                " arguments, got " + std::to_string(got));
  }
}

template <typename T, typename... Params, size_t... I>
ActorInstance MakeActorInstance(T* (*factory)(Params...),
                                const std::vector<ObjectValue>& args,
                                std::index_sequence<I...>) {
  T* made = factory(UnpackValue<std::decay_t<Params>>(args[I])...);
  if (made == nullptr) {
    throw std::runtime_error("the actor's factory returned null");
  }
  return ActorInstance(made, [](void* p) { delete static_cast<T*>(p); });
}

template <typename T, typename... Params>
FactoryInvoker MakeFactoryInvoker(T* (*factory)(Params...)) {
  return [factory](const std::vector<ObjectValue>& args) {
    CheckArgCount(args.size(), sizeof...(Params));
    return MakeActorInstance(factory, args,
                             std::index_sequence_for<Params...>{});
  };
}

template <typename M, size_t... I>
ObjectValue InvokeMethod(M method, void* instance,
                         const std::vector<ObjectValue>& args,
                         std::index_sequence<I...>) {
  using Traits = MethodTraits<M>;
  using C = typename Traits::Class;
  using Params = typename Traits::Params;
  C* self = static_cast<C*>(instance);
  if constexpr (std::is_void_v<typename Traits::Result>) {
    (self->*method)(
        UnpackValue<std::decay_t<std::tuple_element_t<I, Params>>>(args[I])...);
    return ObjectValue::Owned(PackNil());
  } else {
    return PackValue((self->*method)(
        UnpackValue<std::decay_t<std::tuple_element_t<I, Params>>>(
            args[I])...));
  }
}

template <typename M>
MethodInvoker MakeMethodInvoker(M method) {
  constexpr size_t n = std::tuple_size_v<typename MethodTraits<M>::Params>;
  return [method](void* instance, const std::vector<ObjectValue>& args) {
    CheckArgCount(args.size(), n);
    return InvokeMethod(method, instance, args, std::make_index_sequence<n>{});
  };
}

template <typename Fn>
struct IsActorFactory : std::false_type {};
template <typename T, typename... Params>
struct IsActorFactory<T* (*)(Params...)> : std::is_class<T> {};

}  // namespace shoal::internal

#endif  // SHOAL_INTERNAL_ACTOR_INVOKE_H_
