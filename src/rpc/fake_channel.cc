#include "rpc/fake_channel.h"

#include <algorithm>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace shoal::rpc {

// ---- ManualExecutor ----

void ManualExecutor::Post(std::function<void()> fn) {
  posted_.push_back(std::move(fn));
}

uint64_t ManualExecutor::RunAfter(int64_t delay_ms, std::function<void()> fn) {
  uint64_t id = next_timer_++;
  int64_t deadline = now_us_ + std::max<int64_t>(delay_ms, 0) * 1000;
  timers_.emplace(std::make_pair(deadline, id), std::move(fn));
  deadlines_[id] = deadline;
  return id;
}

void ManualExecutor::CancelTimer(uint64_t id) {
  auto it = deadlines_.find(id);
  if (it == deadlines_.end()) return;
  timers_.erase(std::make_pair(it->second, id));
  deadlines_.erase(it);
}

size_t ManualExecutor::RunUntilIdle() {
  size_t ran = 0;
  while (!posted_.empty()) {
    std::function<void()> fn = std::move(posted_.front());
    posted_.pop_front();
    fn();
    ++ran;
  }
  return ran;
}

void ManualExecutor::AdvanceMs(int64_t ms) {
  const int64_t until = now_us_ + ms * 1000;
  RunUntilIdle();
  while (!timers_.empty() && timers_.begin()->first.first <= until) {
    auto node = timers_.extract(timers_.begin());
    deadlines_.erase(node.key().second);
    now_us_ = std::max(now_us_, node.key().first);
    node.mapped()();
    RunUntilIdle();
  }
  now_us_ = until;
}

// ---- Connections and channels ----

class FakeChannel;

// One connection between a FakeChannel and a FakePeer. Shared by the
// channel, the peer and the Responders of the requests it carried.
struct FakeConnection {
  uint64_t id = 0;
  bool open = true;
  FakePeer* peer = nullptr;        // null once closed
  FakeChannel* channel = nullptr;  // null once the channel is gone
  std::string client_name;
};

namespace {

// Replies to one request that came over a FakeConnection: they travel back
// on a later turn of the executor, if the connection is still open then.
class FakeReply final : public ReplySink {
 public:
  FakeReply(Executor* executor, std::shared_ptr<FakeConnection> conn,
            uint64_t call_id)
      : executor_(executor), conn_(std::move(conn)), call_id_(call_id) {}
  void Deliver(absl::StatusOr<std::string> reply) override;
  bool connected() const override { return conn_->open; }
  uint64_t connection_id() const override { return conn_->id; }
  const std::string& peer() const override { return conn_->client_name; }

 private:
  Executor* const executor_;
  const std::shared_ptr<FakeConnection> conn_;
  const uint64_t call_id_;
};

}  // namespace

class FakeChannel final : public Channel {
 public:
  FakeChannel(FakeNetwork* network, std::string address)
      : network_(network), address_(std::move(address)) {}
  ~FakeChannel() override {
    *alive_ = false;
    Drop();
  }

  using Channel::Call;
  void Call(int method, std::string payload, Callback callback,
            int64_t timeout_ms) override;
  void OnDisconnect(
      std::function<void(const absl::Status&)> callback) override {
    on_disconnect_ = std::move(callback);
  }
  const std::string& address() const override { return address_; }
  bool connected() const override { return conn_ != nullptr && conn_->open; }
  size_t pending_calls() const override { return pending_.size(); }
  void Close() override;

  // The reply to call `call_id` arrived over `conn`.
  void Complete(const FakeConnection* conn, uint64_t call_id,
                absl::StatusOr<std::string> reply);
  // `conn` closed: the calls in flight fail, as over TCP.
  void Lost(const FakeConnection* conn, const absl::Status& why);

 private:
  struct Pending {
    Callback callback;
    uint64_t timer = 0;
  };
  // Forgets the connection (closed, nobody told).
  void Drop();
  void Fail(uint64_t call_id, const absl::Status& status);
  // Runs `fn` on a later turn unless this channel is gone by then.
  void Later(std::function<void()> fn);

  FakeNetwork* const network_;
  const std::string address_;
  std::shared_ptr<FakeConnection> conn_;
  uint64_t next_call_ = 1;
  std::map<uint64_t, Pending> pending_;
  std::function<void(const absl::Status&)> on_disconnect_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

void FakeReply::Deliver(absl::StatusOr<std::string> reply) {
  executor_->Post([conn = conn_, id = call_id_, reply = std::move(reply)] {
    if (conn->open && conn->channel != nullptr) {
      conn->channel->Complete(conn.get(), id, reply);
    }
  });
}

void FakeChannel::Later(std::function<void()> fn) {
  network_->executor()->Post([alive = alive_, fn = std::move(fn)] {
    if (*alive) fn();
  });
}

void FakeChannel::Call(int method, std::string payload, Callback callback,
                       int64_t timeout_ms) {
  const uint64_t id = next_call_++;
  Pending& p = pending_[id];
  p.callback = std::move(callback);
  if (timeout_ms > 0) {
    p.timer = network_->executor()->RunAfter(timeout_ms, [this, alive = alive_,
                                                          id, timeout_ms] {
      if (!*alive) return;
      auto it = pending_.find(id);
      if (it == pending_.end()) return;
      it->second.timer = 0;
      Fail(id, absl::DeadlineExceededError(absl::StrCat(
                   "no reply from ", address_, " within ", timeout_ms, " ms")));
    });
  }
  if (conn_ == nullptr) {
    FakePeer* peer = network_->Find(address_);
    if (peer == nullptr) {
      absl::Status refused = absl::UnavailableError(
          absl::StrCat("cannot connect to ", address_, ": Connection refused"));
      refused.SetPayload(kNotSentPayload, absl::Cord("1"));
      Later([this, id, refused] { Fail(id, refused); });
      return;
    }
    conn_ = std::make_shared<FakeConnection>();
    conn_->id = network_->next_connection_++;
    conn_->peer = peer;
    conn_->channel = this;
    conn_->client_name = network_->peer_name();
    peer->connections_.push_back(conn_);
  }
  // Delivered on a later turn, if the connection still stands then (its
  // loss fails the call meanwhile).
  network_->executor()->Post(
      [conn = conn_, id, method, payload = std::move(payload)] {
        if (conn->open && conn->peer != nullptr) {
          conn->peer->Serve(conn, id, method, payload);
        }
      });
}

void FakeChannel::Complete(const FakeConnection* conn, uint64_t call_id,
                           absl::StatusOr<std::string> reply) {
  if (conn != conn_.get()) return;
  auto it = pending_.find(call_id);
  if (it == pending_.end()) return;  // timed out
  Pending p = std::move(it->second);
  pending_.erase(it);
  if (p.timer != 0) network_->executor()->CancelTimer(p.timer);
  p.callback(std::move(reply));
}

void FakeChannel::Fail(uint64_t call_id, const absl::Status& status) {
  auto it = pending_.find(call_id);
  if (it == pending_.end()) return;
  Pending p = std::move(it->second);
  pending_.erase(it);
  if (p.timer != 0) network_->executor()->CancelTimer(p.timer);
  p.callback(status);
}

void FakeChannel::Lost(const FakeConnection* conn, const absl::Status& why) {
  if (conn != conn_.get()) return;
  conn_->channel = nullptr;
  conn_ = nullptr;
  absl::Status status = absl::UnavailableError(why.message());
  std::vector<uint64_t> ids;
  for (const auto& [id, p] : pending_) ids.push_back(id);
  std::weak_ptr<bool> alive = alive_;
  for (uint64_t id : ids) {
    Fail(id, status);
    auto a = alive.lock();
    if (!a || !*a) return;
  }
  if (on_disconnect_) on_disconnect_(status);
}

void FakeChannel::Drop() {
  if (conn_ == nullptr) return;
  conn_->open = false;
  conn_->peer = nullptr;
  conn_->channel = nullptr;
  conn_ = nullptr;
}

void FakeChannel::Close() {
  if (conn_ == nullptr) return;
  Drop();
  // As the real channel does, before Close() returns: the calls in flight
  // fail and OnDisconnect is told.
  absl::Status closed = absl::UnavailableError("channel closed");
  std::vector<uint64_t> ids;
  for (const auto& [id, p] : pending_) ids.push_back(id);
  std::weak_ptr<bool> alive = alive_;
  for (uint64_t id : ids) {
    Fail(id, closed);
    auto a = alive.lock();
    if (!a || !*a) return;
  }
  if (on_disconnect_) on_disconnect_(closed);
}

// ---- FakePeer ----

void FakePeer::Register(int method, Handler handler) {
  handlers_[method] = std::move(handler);
}

int FakePeer::requests(int method) const {
  auto it = requests_.find(method);
  return it == requests_.end() ? 0 : it->second;
}

size_t FakePeer::connections() const {
  size_t n = 0;
  for (const auto& weak : connections_) {
    auto conn = weak.lock();
    if (conn && conn->open) ++n;
  }
  return n;
}

void FakePeer::Serve(const std::shared_ptr<FakeConnection>& conn,
                     uint64_t call_id, int method, const std::string& payload) {
  ++requests_[method];
  Responder responder(
      std::make_shared<FakeReply>(network_->executor(), conn, call_id));
  auto it = handlers_.find(method);
  if (it == handlers_.end()) {
    responder.Error(absl::UnimplementedError(absl::StrCat(
        "this process does not serve method ", method,
        "; is the peer a different kind of Shoal process or version?")));
    return;
  }
  // A copy: the handler may register others, or the peer may be killed.
  Handler handler = it->second;
  handler(payload, std::move(responder));
}

// ---- FakeNetwork ----

FakeNetwork::FakeNetwork(Executor* executor, std::string peer_name)
    : executor_(executor), peer_name_(std::move(peer_name)) {}

FakeNetwork::~FakeNetwork() {
  for (auto& [address, peer] : peers_) {
    for (const auto& weak : peer->connections_) {
      if (auto conn = weak.lock()) {
        conn->open = false;
        conn->peer = nullptr;
      }
    }
  }
}

FakePeer* FakeNetwork::Listen(const std::string& address) {
  Kill(address);
  auto& slot = peers_[address];
  slot.reset(new FakePeer(this, address));
  return slot.get();
}

FakePeer* FakeNetwork::Find(const std::string& address) const {
  auto it = peers_.find(address);
  return it == peers_.end() ? nullptr : it->second.get();
}

void FakeNetwork::CloseConnections(FakePeer* peer, const absl::Status& why) {
  std::vector<std::weak_ptr<FakeConnection>> conns =
      std::move(peer->connections_);
  peer->connections_.clear();
  for (const auto& weak : conns) {
    std::shared_ptr<FakeConnection> conn = weak.lock();
    if (conn == nullptr || !conn->open) continue;
    conn->open = false;
    conn->peer = nullptr;
    executor_->Post([conn, why] {
      if (conn->channel != nullptr) conn->channel->Lost(conn.get(), why);
    });
  }
}

void FakeNetwork::Kill(const std::string& address) {
  auto it = peers_.find(address);
  if (it == peers_.end()) return;
  CloseConnections(it->second.get(),
                   absl::UnavailableError(absl::StrCat(
                       "connection to ", address, " closed by the peer")));
  peers_.erase(it);
}

void FakeNetwork::Break(const std::string& address) {
  FakePeer* peer = Find(address);
  if (peer == nullptr) return;
  CloseConnections(
      peer, absl::UnavailableError(absl::StrCat("connection to ", address,
                                                " closed by the peer")));
}

std::unique_ptr<Channel> FakeNetwork::Connect(const std::string& address) {
  ++channels_made_[address];
  return std::make_unique<FakeChannel>(this, address);
}

int FakeNetwork::channels_made(const std::string& address) const {
  auto it = channels_made_.find(address);
  return it == channels_made_.end() ? 0 : it->second;
}

}  // namespace shoal::rpc
