#ifndef SHOAL_WORKER_FUNCTION_REGISTRY_H_
#define SHOAL_WORKER_FUNCTION_REGISTRY_H_

#include <string>

#include "shoal/internal/actor_invoke.h"
#include "shoal/internal/runtime.h"

namespace shoal::internal {

// The invoker registered under `name`, or null. The pointer stays valid for
// the life of the process.
const Invoker* FindInvoker(const std::string& name);
// The actor factory or actor method registered under `name`, or null; valid
// for the life of the process.
const FactoryInvoker* FindActorFactory(const std::string& name);
const MethodInvoker* FindActorMethod(const std::string& name);

}  // namespace shoal::internal

#endif  // SHOAL_WORKER_FUNCTION_REGISTRY_H_
