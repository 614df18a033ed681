// The constructor arguments of the actors this process creates: kept alive
// with the process (a restart, even one this process does not see, reads
// them from the actor's spec), and, for an actor created while some of its
// ref arguments were pending (ActorSpec.args_pending), sent to the head
// once they are ready (ACTOR_ARGS), so that creating it did not wait for
// them, as Ray's `.remote()` does not: a thread per such actor waits for
// its refs and sends them, or the error of one that failed.
//
// Threading: thread-safe.
#ifndef SHOAL_API_ACTOR_ARGUMENTS_H_
#define SHOAL_API_ACTOR_ARGUMENTS_H_

#include <atomic>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/mutex.h"
#include "shoal/internal/runtime.h"

namespace shoal::proto {
class ActorArgs;
}  // namespace shoal::proto

namespace shoal::internal {

class ObjectIo;

class ActorArguments {
 public:
  // ACTOR_ARGS to the head; blocking.
  using SendFn = std::function<absl::Status(const proto::ActorArgs&)>;

  // REQUIRES: `io` outlives this, or Stop() is called first.
  ActorArguments(ObjectIo* io, SendFn send);
  ~ActorArguments();
  ActorArguments(const ActorArguments&) = delete;
  ActorArguments& operator=(const ActorArguments&) = delete;

  // Refs (and what values hold) of an actor's arguments written into its
  // spec: alive until Stop().
  void Keep(std::vector<std::shared_ptr<RefHandle>> refs);
  // Sends actor `actor_id`'s arguments once the refs among them are ready
  // (or fail), from a thread of its own.
  void SendWhenReady(std::string actor_id, std::vector<TaskArg> args);
  // Stops the waits still going (their actors never get their arguments:
  // they end with this process's job) and joins their threads. Returns
  // what was kept, for the caller to release.
  std::vector<std::shared_ptr<RefHandle>> Stop();

 private:
  struct Sender {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };

  void Run(const std::string& actor_id, std::vector<TaskArg> args);
  // Joins the senders that are done.
  void Reap() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ObjectIo* const io_;
  const SendFn send_;
  std::atomic<bool> stop_{false};
  shoal::Mutex mu_;
  std::vector<std::shared_ptr<RefHandle>> kept_ ABSL_GUARDED_BY(mu_);
  std::list<Sender> senders_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shoal::internal

#endif  // SHOAL_API_ACTOR_ARGUMENTS_H_
