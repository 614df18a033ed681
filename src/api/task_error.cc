#include "api/task_error.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "shoal/errors.h"

namespace shoal::internal {
namespace {

constexpr char kKindUrl[] = "shoal.dev/error-kind";
constexpr char kFunctionUrl[] = "shoal.dev/remote-function";
constexpr char kNodeUrl[] = "shoal.dev/remote-node";
constexpr char kMessageUrl[] = "shoal.dev/remote-message";
constexpr char kDataUrl[] = "shoal.dev/remote-data";

// A code close to the kind, for logs and callers that only look at codes.
absl::StatusCode CodeOf(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kRemote:
      return absl::StatusCode::kAborted;
    case ErrorKind::kWorkerDied:
    case ErrorKind::kActorDied:
      return absl::StatusCode::kUnavailable;
    case ErrorKind::kInfeasible:
      return absl::StatusCode::kResourceExhausted;
    case ErrorKind::kObjectLost:
      return absl::StatusCode::kDataLoss;
    case ErrorKind::kTimeout:
      return absl::StatusCode::kDeadlineExceeded;
    case ErrorKind::kCancelled:
      return absl::StatusCode::kCancelled;
    case ErrorKind::kOther:
      break;
  }
  return absl::StatusCode::kFailedPrecondition;
}

std::string PayloadOf(const absl::Status& status, const char* url) {
  auto value = status.GetPayload(url);
  return value ? std::string(*value) : std::string();
}

}  // namespace

absl::Status TaskError(ErrorKind kind, absl::string_view message) {
  absl::Status status(CodeOf(kind), message);
  status.SetPayload(kKindUrl,
                    absl::Cord(std::string(1, static_cast<char>(kind))));
  return status;
}

absl::Status RemoteFailure(absl::string_view function, absl::string_view node,
                           absl::string_view message, absl::string_view data) {
  absl::Status status = TaskError(
      ErrorKind::kRemote,
      absl::StrCat(function, " raised on node ", node, ": ", message));
  status.SetPayload(kFunctionUrl, absl::Cord(function));
  status.SetPayload(kNodeUrl, absl::Cord(node));
  status.SetPayload(kMessageUrl, absl::Cord(message));
  if (!data.empty()) status.SetPayload(kDataUrl, absl::Cord(data));
  return status;
}

ErrorKind KindOf(const absl::Status& status) {
  std::string kind = PayloadOf(status, kKindUrl);
  if (kind.size() != 1) return ErrorKind::kOther;
  return static_cast<ErrorKind>(kind[0]);
}

const char* TaskErrorTypeName(const absl::Status& status) {
  switch (KindOf(status)) {
    case ErrorKind::kRemote:
      return "TASK_EXECUTION_EXCEPTION";
    case ErrorKind::kWorkerDied:
      return "WORKER_DIED";
    case ErrorKind::kInfeasible:
      return "INFEASIBLE";
    case ErrorKind::kObjectLost:
      return "OBJECT_LOST";
    case ErrorKind::kActorDied:
      return "ACTOR_DIED";
    case ErrorKind::kTimeout:
      return "TIMEOUT";
    case ErrorKind::kCancelled:
      return "TASK_CANCELLED";
    case ErrorKind::kOther:
      break;
  }
  return "ERROR";
}

void ThrowStatus(const absl::Status& status) {
  std::string message(status.message());
  switch (KindOf(status)) {
    case ErrorKind::kRemote:
      throw RemoteError(
          PayloadOf(status, kFunctionUrl), PayloadOf(status, kNodeUrl),
          PayloadOf(status, kMessageUrl), PayloadOf(status, kDataUrl));
    case ErrorKind::kWorkerDied:
      throw WorkerDiedError(message);
    case ErrorKind::kInfeasible:
      throw InfeasibleError(message);
    case ErrorKind::kObjectLost:
      throw ObjectLostError(message);
    case ErrorKind::kActorDied:
      throw ActorDiedError(message);
    case ErrorKind::kTimeout:
      throw TimeoutError(message);
    case ErrorKind::kCancelled:
      throw TaskCancelledError(message);
    case ErrorKind::kOther:
      break;
  }
  throw Error(message);
}

}  // namespace shoal::internal
