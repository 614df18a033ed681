// A worker whose functions are not C++ functions registered in its binary: a
// Python worker (`python -m shoal.worker`) runs the worker loop of this
// folder with every task, actor and method handed to a ForeignRuntime.
//
// Threading: Call and CallMethod run on the worker's loop thread, or on an
// actor's threads when it allows more than one call at a time; Construct on
// the loop thread.
#ifndef SHOAL_WORKER_FOREIGN_RUNTIME_H_
#define SHOAL_WORKER_FOREIGN_RUNTIME_H_

#include <stdexcept>
#include <string>
#include <vector>

#include "shoal/internal/actor_invoke.h"
#include "shoal/serialization.h"

namespace shoal::internal {

// The function failed: `what()` is the text the driver shows (a traceback),
// `type` names the error (e.g. "ValueError"), `data` is the error as the
// language keeps it, sent back to the driver (RemoteError::error_data()).
class ForeignError : public std::runtime_error {
 public:
  ForeignError(const std::string& message, std::string type, std::string data)
      : std::runtime_error(message),
        type_(std::move(type)),
        data_(std::move(data)) {}
  const std::string& type() const { return type_; }
  const std::string& data() const { return data_; }

 private:
  std::string type_, data_;
};

class ForeignRuntime {
 public:
  virtual ~ForeignRuntime() = default;
  // Each may throw ForeignError for the function's own error, and any
  // other std::exception for its runtime's (it is reported as such).
  // Arguments are as the driver sent them: inline ones in msgpack (raw bytes
  // as msgpack binary), stored ones raw.
  virtual ObjectValue Call(const std::string& function,
                           const std::vector<ObjectValue>& args) = 0;
  virtual ActorInstance Construct(const std::string& factory,
                                  const std::vector<ObjectValue>& args) = 0;
  virtual ObjectValue CallMethod(void* instance, const std::string& method,
                                 const std::vector<ObjectValue>& args) = 0;
  // Whether the worker ends once the last Call's answer is out (its
  // function's max_calls was reached); asking clears it.
  virtual bool TakeExitAfterCall() { return false; }
  // The running Call was cancelled: stop it where the language can (from
  // the worker's main thread; the Call may have ended meanwhile).
  virtual void InterruptTask() {}
};

// Runs this process as a worker (see worker/worker_main.h) whose tasks go
// to `runtime`, which must outlive it. Returns the exit code.
int RunForeignWorker(ForeignRuntime* runtime);

}  // namespace shoal::internal

#endif  // SHOAL_WORKER_FOREIGN_RUNTIME_H_
