// Remote tasks: shoal::Task(f).SetResources(...).Remote(args...).
#ifndef SHOAL_TASK_H_
#define SHOAL_TASK_H_

#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "shoal/internal/invoke.h"
#include "shoal/internal/runtime.h"
#include "shoal/object.h"
#include "shoal/placement.h"

namespace shoal {

template <typename F>
class TaskCaller;

template <typename R, typename... Params>
class TaskCaller<R (*)(Params...)> {
 public:
  using Fn = R (*)(Params...);
  explicit TaskCaller(Fn fn) : fn_(fn) {}

  // Resources one run of the task holds (default {"CPU": 1}). CPU may be
  // fractional; other resources are whole numbers, or a fraction below 1.
  TaskCaller& SetResource(const std::string& name, double amount) {
    options_.resources[name] = amount;
    return *this;
  }
  TaskCaller& SetResources(const std::map<std::string, double>& resources) {
    for (const auto& [k, v] : resources) options_.resources[k] = v;
    return *this;
  }
  // Runs the task in bundle `bundle_index` of `group` (-1: in any bundle
  // with room): the resources it asks for are taken from that reservation.
  // Throws shoal::Error at once for a bundle index the group does not have.
  TaskCaller& SetPlacementGroup(const PlacementGroup& group, int bundle_index) {
    internal::CheckBundleIndex(group.id(), group.bundle_count(), bundle_index);
    options_.placement_group_id = group.id();
    options_.bundle_index = bundle_index;
    return *this;
  }
  // Attempts after a worker death (default 3). An exception thrown by the
  // function is not retried.
  TaskCaller& SetMaxRetries(int retries) {
    options_.max_retries = retries;
    return *this;
  }

  template <typename... Args>
  ObjectRef<R> Remote(Args&&... args) {
    static_assert(sizeof...(Args) == sizeof...(Params),
                  "Remote() takes as many arguments as the function");
    return ObjectRef<R>(internal::SubmitTask(
        internal::FunctionName(reinterpret_cast<const void*>(fn_)),
        internal::MakeTaskArgs<std::tuple<Params...>>(
            std::forward<Args>(args)...),
        options_));
  }

 private:
  Fn fn_;
  internal::TaskOptions options_;
};

template <typename R, typename... Params>
TaskCaller<R (*)(Params...)> Task(R (*fn)(Params...)) {
  return TaskCaller<R (*)(Params...)>(fn);
}

}  // namespace shoal

#endif  // SHOAL_TASK_H_
