// The stores ranks meet through: the head's key-value store (ClusterStore)
// and a map shared by the threads of one process (InProcessStore).
#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "common/session.h"
#include "head_client/head_client.h"
#include "rpc/event_loop.h"
#include "shoal/collective.h"
#include "shoal/shoal.pb.h"

namespace shoal::collective {
namespace {

std::string WaitedTooLong(const std::string& key,
                          std::chrono::milliseconds timeout) {
  return absl::StrCat("no value for key '", key, "' after ", timeout.count(),
                      " ms: the other ranks of the group may not have "
                      "started, or were given a different group name or "
                      "world size");
}

// One connection to the head per process, shared by every ClusterStore.
// Created on first use and never destroyed: its event loop thread must not
// race with static destructors at exit.
// Threading: thread-safe; calls are serialized on the loop.
class HeadConnection {
 public:
  // How long a rendezvous call waits for the head.
  static constexpr int64_t kTimeoutMs = 5000;

  static HeadConnection& Get() {
    static HeadConnection* connection = new HeadConnection();
    return *connection;
  }

  // The head's client. Throws shoal::Error when no cluster can be reached.
  rpc::HeadClient& head() {
    shoal::MutexLock lock(&mu_);
    if (head_ == nullptr) Connect();
    return *head_;
  }

 private:
  HeadConnection() = default;

  void Connect() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::string address;
    std::string token;
    absl::Status resolved =
        ResolveClusterAddress(DefaultTempDir(), &address, &token);
    if (!resolved.ok()) {
      throw Error(absl::StrCat("collective rendezvous needs a Shoal cluster: ",
                               resolved.message()));
    }
    auto loop = rpc::EventLoop::Create("shoal-collective-kv");
    if (!loop.ok()) {
      throw Error(
          absl::StrCat("collective rendezvous: ", loop.status().message()));
    }
    loop_ = std::move(*loop);
    head_ = std::make_unique<rpc::HeadClient>(loop_.get(), address, token,
                                              "collective");
  }

  shoal::Mutex mu_;
  std::unique_ptr<rpc::EventLoop> loop_ ABSL_GUARDED_BY(mu_);
  // Made once, never replaced: the reference head() returns stays valid.
  std::unique_ptr<rpc::HeadClient> head_ ABSL_GUARDED_BY(mu_);
};

class ClusterKvStore : public Store {
 public:
  void Set(const std::string& key, const std::string& value) override {
    proto::KvPutRequest request;
    request.set_key(key);
    request.set_value(value);
    request.set_overwrite(true);
    rpc::HeadClient& head = HeadConnection::Get().head();
    absl::StatusOr<proto::KvPutReply> reply =
        head.KvPut(request, HeadConnection::kTimeoutMs);
    if (!reply.ok()) {
      throw CollectiveError(
          absl::StrCat("could not publish key '", key, "' in the head's ",
                       "key-value store at ", head.address(), ": ",
                       reply.status().message()),
          {});
    }
  }

  std::string Get(const std::string& key,
                  std::chrono::milliseconds timeout) override {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    auto backoff = std::chrono::milliseconds(1);
    proto::KvGetRequest request;
    request.set_key(key);
    while (true) {
      rpc::HeadClient& head = HeadConnection::Get().head();
      absl::StatusOr<proto::KvGetReply> reply =
          head.KvGet(request, HeadConnection::kTimeoutMs);
      if (!reply.ok()) {
        throw CollectiveError(
            absl::StrCat("could not read key '", key, "' from the head's ",
                         "key-value store at ", head.address(), ": ",
                         reply.status().message()),
            {});
      }
      if (reply->found()) return reply->value();
      if (std::chrono::steady_clock::now() >= deadline) {
        throw CollectiveError(WaitedTooLong(key, timeout), {});
      }
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(50));
    }
  }
};

// Threading: thread-safe.
class InProcessMapStore : public Store {
 public:
  void Set(const std::string& key, const std::string& value) override {
    {
      shoal::MutexLock lock(&mu_);
      values_[key] = value;
    }
    changed_.SignalAll();
  }

  std::string Get(const std::string& key,
                  std::chrono::milliseconds timeout) override {
    shoal::MutexLock lock(&mu_);
    const absl::Time deadline = absl::Now() + absl::FromChrono(timeout);
    while (values_.count(key) == 0) {
      if (changed_.WaitWithDeadline(&mu_, deadline) &&
          values_.count(key) == 0) {
        throw CollectiveError(WaitedTooLong(key, timeout), {});
      }
    }
    return values_[key];
  }

 private:
  shoal::Mutex mu_;
  shoal::CondVar changed_;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::shared_ptr<Store> ClusterStore() {
  HeadConnection::Get().head();
  return std::make_shared<ClusterKvStore>();
}

std::shared_ptr<Store> InProcessStore() {
  return std::make_shared<InProcessMapStore>();
}

}  // namespace shoal::collective
