// The actor a worker process holds: its instance, made by the head's
// CREATE_ACTOR_INSTANCE, and the threads that run its calls when it allows
// more than one at a time. Threads start as calls come, one whenever no
// started thread is idle, up to max_concurrency: an actor that allows 1000
// calls at once (an async Python actor) costs nothing while idle.
//
// Threading: Current() may be called from any thread; the host is installed
// once, on the worker's loop thread, before any call of the actor arrives.
#ifndef SHOAL_WORKER_ACTOR_HOST_H_
#define SHOAL_WORKER_ACTOR_HOST_H_

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "shoal/internal/actor_invoke.h"

namespace shoal::internal {

// Thrown by shoal::ExitActor() out of the actor's method; the worker
// answers the call with `message` (the caller's ActorDiedError), then ends
// the process. Not a std::exception, so that user code catching those lets
// it through.
struct ActorExitRequested {
  std::string message = "the actor called shoal::ExitActor()";
};

class ActorHost {
 public:
  ActorHost(std::string actor_id, ActorInstance instance, int max_concurrency,
            bool restarted);
  ~ActorHost();
  ActorHost(const ActorHost&) = delete;
  ActorHost& operator=(const ActorHost&) = delete;

  // The actor this process holds, or null (a task worker, a driver).
  static ActorHost* Current();
  // Makes `host` the process's actor; it lives until the process ends.
  static void Install(std::unique_ptr<ActorHost> host);

  const std::string& actor_id() const { return actor_id_; }
  void* instance() const { return instance_.get(); }
  bool restarted() const { return restarted_; }
  // More than one thread: calls go through Run(); else they run on the
  // worker's loop thread, in arrival order.
  bool threaded() const { return max_concurrency_ > 1; }
  // Queues `call` for the actor's threads, starting one if none is idle and
  // fewer than max_concurrency run.
  void Run(std::function<void()> call);

 private:
  void Loop();

  const std::string actor_id_;
  const ActorInstance instance_;
  const bool restarted_;
  const int max_concurrency_;
  shoal::Mutex mu_;
  shoal::CondVar cv_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Started threads waiting for a call.
  int idle_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shoal::internal

#endif  // SHOAL_WORKER_ACTOR_HOST_H_
