#include "worker/actor_host.h"

#include <atomic>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "api/core_runtime.h"
#include "common/environment.h"
#include "head_client/head_client.h"
#include "shoal/actor.h"
#include "shoal/errors.h"
#include "shoal/shoal.pb.h"

namespace shoal::internal {
namespace {
std::atomic<ActorHost*> g_host{nullptr};
}  // namespace

ActorHost::ActorHost(std::string actor_id, ActorInstance instance,
                     int max_concurrency, bool restarted)
    : actor_id_(std::move(actor_id)),
      instance_(std::move(instance)),
      restarted_(restarted),
      max_concurrency_(max_concurrency) {}

ActorHost::~ActorHost() {
  std::vector<std::thread> threads;
  {
    shoal::MutexLock lock(&mu_);
    stopping_ = true;
    threads.swap(threads_);
  }
  cv_.SignalAll();
  for (auto& t : threads) t.join();
}

ActorHost* ActorHost::Current() { return g_host.load(); }

void ActorHost::Install(std::unique_ptr<ActorHost> host) {
  // Never freed: calls may be running on its threads when the process ends.
  g_host.store(host.release());
}

void ActorHost::Run(std::function<void()> call) {
  {
    shoal::MutexLock lock(&mu_);
    queue_.push_back(std::move(call));
    // Each queued call that no idle thread will take gets a thread of its
    // own, up to the actor's limit; beyond it, calls wait in the queue.
    if (static_cast<int>(queue_.size()) > idle_ &&
        static_cast<int>(threads_.size()) < max_concurrency_) {
      threads_.emplace_back([this] { Loop(); });
    }
  }
  cv_.Signal();
}

void ActorHost::Loop() {
  while (true) {
    std::function<void()> call;
    {
      shoal::MutexLock lock(&mu_);
      ++idle_;
      while (!stopping_ && queue_.empty()) cv_.Wait(&mu_);
      --idle_;
      if (stopping_ && queue_.empty()) return;
      call = std::move(queue_.front());
      queue_.pop_front();
    }
    call();
  }
}

}  // namespace shoal::internal

// The parts of the public actor API (shoal/actor.h) that only a process
// holding an actor can answer.
namespace shoal {

void ExitActor() {
  internal::ActorHost* host = internal::ActorHost::Current();
  if (host == nullptr) {
    throw Error(
        "shoal::ExitActor() is for an actor's methods; this process "
        "holds no actor");
  }
  // The head hears it first, so that the process's end is not taken for a
  // crash to restart from.
  proto::ActorExitingRequest req;
  req.set_actor_id(host->actor_id());
  req.set_worker_id(env::Get(env::Var::kWorkerId));
  absl::Status st = internal::RequireRuntime()->head().ActorExiting(req);
  if (!st.ok()) {
    throw Error(absl::StrCat("shoal::ExitActor(): the head did not hear it: ",
                             st.message()));
  }
  throw internal::ActorExitRequested();
}

bool WasCurrentActorRestarted() {
  internal::ActorHost* host = internal::ActorHost::Current();
  return host != nullptr && host->restarted();
}

}  // namespace shoal
