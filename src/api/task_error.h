// How the driver's parts report a failed object or call: an absl::Status
// whose payload says which shoal error it is, so that the parts return
// Status and only the public API (shoal/*.h entry points) throws.
#ifndef SHOAL_API_TASK_ERROR_H_
#define SHOAL_API_TASK_ERROR_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shoal::internal {

enum class ErrorKind {
  kOther,       // shoal::Error
  kRemote,      // shoal::RemoteError: the function threw
  kWorkerDied,  // shoal::WorkerDiedError
  kInfeasible,  // shoal::InfeasibleError
  kObjectLost,  // shoal::ObjectLostError
  kActorDied,   // shoal::ActorDiedError
  kTimeout,     // shoal::TimeoutError
  kCancelled,   // shoal::TaskCancelledError
};

// An error of `kind` with `message` (the whole text the user will read).
absl::Status TaskError(ErrorKind kind, absl::string_view message);
// `function` threw `message` on node `node`; `data` is the error as the
// function's language keeps it (RemoteError::error_data()).
absl::Status RemoteFailure(absl::string_view function, absl::string_view node,
                           absl::string_view message,
                           absl::string_view data = {});

// Which error `status` is; kOther when it carries no kind.
ErrorKind KindOf(const absl::Status& status);
// The kind as task records name it, after Ray's error types
// ("TASK_EXECUTION_EXCEPTION", "WORKER_DIED", ...).
const char* TaskErrorTypeName(const absl::Status& status);

// Throws the shoal exception that `status` stands for (never returns).
[[noreturn]] void ThrowStatus(const absl::Status& status);
inline void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) ThrowStatus(status);
}
template <typename T>
T ValueOrThrow(absl::StatusOr<T> value) {
  if (!value.ok()) ThrowStatus(value.status());
  return std::move(*value);
}

}  // namespace shoal::internal

#endif  // SHOAL_API_TASK_ERROR_H_
