// SHOAL_REMOTE's table: name -> invoker, and function address -> name.
#include "worker/function_registry.h"

#include <map>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "shoal/api.h"
#include "worker/symbol_name.h"

namespace shoal::internal {
namespace {

struct Registry {
  shoal::Mutex mu;
  std::map<std::string, Invoker> by_name ABSL_GUARDED_BY(mu);
  std::unordered_map<const void*, std::string> by_address ABSL_GUARDED_BY(mu);
  std::map<std::string, FactoryInvoker> factories ABSL_GUARDED_BY(mu);
  std::map<std::string, MethodInvoker> methods ABSL_GUARDED_BY(mu);
  std::unordered_map<std::string, std::string> method_by_key
      ABSL_GUARDED_BY(mu);
};

Registry& GetRegistry() {
  static Registry* registry = new Registry();
  return *registry;
}

}  // namespace

void RegisterFunction(const std::string& name, const void* address,
                      Invoker invoker) {
  Registry& r = GetRegistry();
  shoal::MutexLock lock(&r.mu);
  r.by_name[name] = std::move(invoker);
  r.by_address[address] = name;
}

const std::string& FunctionName(const void* address) {
  {
    Registry& r = GetRegistry();
    shoal::MutexLock lock(&r.mu);
    auto it = r.by_address.find(address);
    if (it != r.by_address.end()) return it->second;
  }
  const std::string symbol = SymbolName(address);
  if (symbol.empty()) {
    throw Error(
        "this function is not a remote function (its name is not in the "
        "binary): register it with SHOAL_REMOTE(name) at namespace scope, "
        "in the file that defines it");
  }
  throw Error(absl::StrCat(symbol,
                           " is not a remote function: register it with "
                           "SHOAL_REMOTE(",
                           UnqualifiedName(symbol),
                           ") at namespace scope, in the file that defines it "
                           "(in its namespace)"));
}

void RegisterActorFactory(const std::string& name, const void* address,
                          FactoryInvoker invoker) {
  Registry& r = GetRegistry();
  shoal::MutexLock lock(&r.mu);
  r.factories[name] = std::move(invoker);
  r.by_address[address] = name;
}

void RegisterActorMethod(const std::string& name, const std::string& key,
                         MethodInvoker invoker) {
  Registry& r = GetRegistry();
  shoal::MutexLock lock(&r.mu);
  r.methods[name] = std::move(invoker);
  r.method_by_key[key] = name;
}

const std::string& ActorMethodName(const std::string& key) {
  Registry& r = GetRegistry();
  shoal::MutexLock lock(&r.mu);
  auto it = r.method_by_key.find(key);
  if (it == r.method_by_key.end()) {
    throw Error(
        "this method is not an actor method: register it with "
        "SHOAL_REMOTE(&Class::Method) at namespace scope");
  }
  return it->second;
}

const FactoryInvoker* FindActorFactory(const std::string& name) {
  Registry& r = GetRegistry();
  shoal::MutexLock lock(&r.mu);
  auto it = r.factories.find(name);
  return it == r.factories.end() ? nullptr : &it->second;
}

const MethodInvoker* FindActorMethod(const std::string& name) {
  Registry& r = GetRegistry();
  shoal::MutexLock lock(&r.mu);
  auto it = r.methods.find(name);
  return it == r.methods.end() ? nullptr : &it->second;
}

const Invoker* FindInvoker(const std::string& name) {
  Registry& r = GetRegistry();
  shoal::MutexLock lock(&r.mu);
  auto it = r.by_name.find(name);
  return it == r.by_name.end() ? nullptr : &it->second;
}

std::vector<std::string> SplitFunctionNames(const char* names) {
  std::vector<std::string> out;
  std::string current;
  for (const char* p = names;; ++p) {
    if (*p == ',' || *p == '\0') {
      size_t b = current.find_first_not_of(" \t\n&");
      size_t e = current.find_last_not_of(" \t\n");
      out.push_back(b == std::string::npos ? "" : current.substr(b, e - b + 1));
      current.clear();
      if (*p == '\0') break;
    } else {
      current.push_back(*p);
    }
  }
  return out;
}

}  // namespace shoal::internal
