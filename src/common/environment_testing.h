// For tests: an environment variable set (or unset) for a scope, restored
// to what it was at the scope's end.
#ifndef SHOAL_COMMON_ENVIRONMENT_TESTING_H_
#define SHOAL_COMMON_ENVIRONMENT_TESTING_H_

#include <stdlib.h>

#include <optional>
#include <string>

namespace shoal {

class ScopedEnv {
 public:
  // nullopt: unset it for the scope.
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old;
    if (value) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace shoal

#endif  // SHOAL_COMMON_ENVIRONMENT_TESTING_H_
