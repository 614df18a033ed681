// Argument packing and invokers behind tasks, actors and SHOAL_REMOTE. Not
// part of the public API: names may change.
#ifndef SHOAL_INTERNAL_INVOKE_H_
#define SHOAL_INTERNAL_INVOKE_H_

#include <cstddef>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "shoal/internal/actor_invoke.h"
#include "shoal/internal/runtime.h"
#include "shoal/object.h"
#include "shoal/serialization.h"

namespace shoal {

namespace internal {

template <typename T>
struct IsObjectRef : std::false_type {};
template <typename T>
struct IsObjectRef<ObjectRef<T>> : std::true_type {};

template <typename Param, typename Arg>
TaskArg MakeTaskArg(Arg&& arg) {
  using A = std::decay_t<Arg>;
  using P = std::decay_t<Param>;
  TaskArg out;
  if constexpr (IsObjectRef<A>::value) {
    out.ref = arg.handle();
  } else {
    static_assert(std::is_constructible_v<P, Arg&&>,
                  "argument does not convert to the remote function's "
                  "parameter type");
    RefCapture refs;
    out.value = PackValue(P(std::forward<Arg>(arg)));
    out.contained = refs.Take();
  }
  return out;
}

template <typename ParamTuple, size_t... I, typename... Args>
std::vector<TaskArg> MakeTaskArgsImpl(std::index_sequence<I...>,
                                      Args&&... args) {
  std::vector<TaskArg> out;
  out.reserve(sizeof...(Args));
  (out.push_back(MakeTaskArg<std::tuple_element_t<I, ParamTuple>>(
       std::forward<Args>(args))),
   ...);
  return out;
}

// The arguments of a call whose parameters are `ParamTuple`'s types.
template <typename ParamTuple, typename... Args>
std::vector<TaskArg> MakeTaskArgs(Args&&... args) {
  return MakeTaskArgsImpl<ParamTuple>(std::index_sequence_for<Args...>{},
                                      std::forward<Args>(args)...);
}

template <typename R, typename... Params, size_t... I>
ObjectValue InvokeWithArgs(R (*fn)(Params...),
                           const std::vector<ObjectValue>& args,
                           std::index_sequence<I...>) {
  if constexpr (std::is_void_v<R>) {
    fn(UnpackValue<std::decay_t<Params>>(args[I])...);
    return ObjectValue::Owned(PackNil());
  } else {
    return PackValue(fn(UnpackValue<std::decay_t<Params>>(args[I])...));
  }
}

template <typename R, typename... Params>
Invoker MakeInvoker(R (*fn)(Params...)) {
  return [fn](const std::vector<ObjectValue>& args) -> ObjectValue {
    if (args.size() != sizeof...(Params)) {
      throw std::invalid_argument(
          "expects " + std::to_string(sizeof...(Params)) + " arguments, got " +
          std::to_string(args.size()));
    }
    return InvokeWithArgs(fn, args, std::index_sequence_for<Params...>{});
  };
}

std::vector<std::string> SplitFunctionNames(const char* names);

// A free function is a remote function; one returning a pointer to a class
// is an actor factory; a member function is an actor method.
template <typename Fn>
void RegisterOne(const std::string& name, Fn fn) {
  if constexpr (std::is_member_function_pointer_v<Fn>) {
    RegisterActorMethod(name, MethodKey(fn), MakeMethodInvoker(fn));
  } else if constexpr (IsActorFactory<Fn>::value) {
    RegisterActorFactory(name, reinterpret_cast<const void*>(fn),
                         MakeFactoryInvoker(fn));
  } else {
    RegisterFunction(name, reinterpret_cast<const void*>(fn), MakeInvoker(fn));
  }
}

template <typename... Fns>
bool RegisterFunctions(const char* names, Fns... fns) {
  std::vector<std::string> split = SplitFunctionNames(names);
  size_t i = 0;
  (RegisterOne(split.at(i++), fns), ...);
  return true;
}

}  // namespace internal

}  // namespace shoal

#endif  // SHOAL_INTERNAL_INVOKE_H_
