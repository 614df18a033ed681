// The errors the Shoal API throws; all derive from shoal::Error.
#ifndef SHOAL_ERRORS_H_
#define SHOAL_ERRORS_H_

#include <stdexcept>
#include <string>

namespace shoal {

// Base of every error the API throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The remote function threw.
class RemoteError : public Error {
 public:
  RemoteError(std::string function, std::string node, std::string message,
              std::string error_data = "");
  const std::string& function_name() const { return function_; }
  const std::string& node_id() const { return node_; }
  const std::string& remote_message() const { return message_; }
  // The error as the function's language keeps it, for a driver of that
  // language to raise again (a Python function's pickled exception); empty
  // for a C++ function.
  const std::string& error_data() const { return data_; }

 private:
  std::string function_, node_, message_, data_;
};

// The worker running the task died (crash, kill -9) on every attempt.
class WorkerDiedError : public Error {
 public:
  using Error::Error;
};

// No node of the cluster can ever run the task's resource request.
class InfeasibleError : public Error {
 public:
  using Error::Error;
};

// Get or Wait ran out of time.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// Every copy of a stored object was on nodes that died, and it could not be
// rebuilt (the task that made it is not retriable, or it was put, not
// computed). The message names the object and the nodes.
class ObjectLostError : public Error {
 public:
  using Error::Error;
};

// The task was cancelled (shoal::Cancel) before it finished: while it
// waited for its arguments or a worker, or while it ran.
class TaskCancelledError : public Error {
 public:
  using Error::Error;
};

// The actor a call was made to is dead: its process died with no restart
// left (or no retry left for the call), it was killed, or it exited. The
// message names the actor, its node and the cause.
class ActorDiedError : public Error {
 public:
  using Error::Error;
};

}  // namespace shoal

#endif  // SHOAL_ERRORS_H_
