#include "worker/actor_host.h"

#include <atomic>

namespace shoal::internal {
namespace {
std::atomic<ActorHost*> g_host{nullptr};
}  // namespace

ActorHost::ActorHost(std::string actor_id, ActorInstance instance,
                     int max_concurrency, bool restarted)
    : actor_id_(std::move(actor_id)),
      instance_(std::move(instance)),
      restarted_(restarted) {
  if (max_concurrency > 1) {
    for (int i = 0; i < max_concurrency; ++i) {
      threads_.emplace_back([this] { Loop(); });
    }
  }
}

ActorHost::~ActorHost() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

ActorHost* ActorHost::Current() { return g_host.load(); }

void ActorHost::Install(std::unique_ptr<ActorHost> host) {
  // Never freed: calls may be running on its threads when the process ends.
  g_host.store(host.release());
}

void ActorHost::Run(std::function<void()> call) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(call));
  }
  cv_.notify_one();
}

void ActorHost::Loop() {
  while (true) {
    std::function<void()> call;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_ && queue_.empty()) return;
      call = std::move(queue_.front());
      queue_.pop_front();
    }
    call();
  }
}

}  // namespace shoal::internal
