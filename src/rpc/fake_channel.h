// In-memory stand-ins for the RPC layer, for unit tests of the managers that
// talk to peers (submitters, the head's actor manager, the head client):
//
//  - ManualExecutor: a loop that a test turns by hand. Posted closures run
//    when the test calls RunUntilIdle(); timers when it moves the clock
//    (AdvanceMs). No thread, no sleep.
//  - FakeNetwork: a ChannelFactory whose channels reach FakePeers by address.
//    A peer serves methods with the same handlers as an rpc::Server
//    (RegisterProto works on it), so a test holds a reply by keeping its
//    Responder and releases it by replying. Kill() and Break() fail the
//    connections to a peer, as a process that died or a network that
//    dropped them would.
//
// What travels behaves as over TCP: requests and replies arrive in order,
// on a later turn of the executor, never inside the call that sent them; a
// call to an address where nothing listens fails Unavailable with
// NeverSent(); a lost connection fails the calls in flight Unavailable and
// tells OnDisconnect; deadlines fail DeadlineExceeded with the real
// channel's words. Payloads are the serialized messages, as on the wire.
//
// Threading: everything runs on the test's thread; nothing here is
// thread-safe. The network and the executor must outlive the channels.
#ifndef SHOAL_RPC_FAKE_CHANNEL_H_
#define SHOAL_RPC_FAKE_CHANNEL_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "rpc/channel.h"
#include "rpc/executor.h"
#include "rpc/rpc.h"

namespace shoal::rpc {

class ManualExecutor final : public Executor {
 public:
  ManualExecutor() = default;
  ManualExecutor(const ManualExecutor&) = delete;
  ManualExecutor& operator=(const ManualExecutor&) = delete;

  void Post(std::function<void()> fn) override;
  uint64_t RunAfter(int64_t delay_ms, std::function<void()> fn) override;
  void CancelTimer(uint64_t id) override;
  int64_t NowUs() const override { return now_us_; }

  // Runs posted closures, and those they post, until none is left (timers
  // wait for their time). How many ran.
  size_t RunUntilIdle();
  // Moves the clock `ms` on, running each timer that comes due at its time
  // (and then what is posted), in deadline order.
  void AdvanceMs(int64_t ms);
  size_t pending_timers() const { return timers_.size(); }

 private:
  int64_t now_us_ = 1000000000;
  std::deque<std::function<void()>> posted_;
  std::map<std::pair<int64_t, uint64_t>, std::function<void()>> timers_;
  std::unordered_map<uint64_t, int64_t> deadlines_;
  uint64_t next_timer_ = 1;
};

class FakeNetwork;
struct FakeConnection;

// A process listening at one address of a FakeNetwork.
class FakePeer final : public HandlerRegistry {
 public:
  void Register(int method, Handler handler) override;
  const std::string& address() const { return address_; }
  // Requests it received, by method (answered or not).
  int requests(int method) const;
  // Connections open to it now.
  size_t connections() const;

 private:
  friend class FakeNetwork;
  friend class FakeChannel;
  FakePeer(FakeNetwork* network, std::string address)
      : network_(network), address_(std::move(address)) {}
  void Serve(const std::shared_ptr<FakeConnection>& conn, uint64_t call_id,
             int method, const std::string& payload);

  FakeNetwork* const network_;
  const std::string address_;
  std::unordered_map<int, Handler> handlers_;
  std::map<int, int> requests_;
  std::vector<std::weak_ptr<FakeConnection>> connections_;
};

class FakeNetwork final : public ChannelFactory {
 public:
  // `peer_name`: how the channels it makes name themselves to peers
  // (Responder::peer()).
  explicit FakeNetwork(Executor* executor, std::string peer_name = "client");
  ~FakeNetwork() override;
  FakeNetwork(const FakeNetwork&) = delete;
  FakeNetwork& operator=(const FakeNetwork&) = delete;

  // A process that listens at `address` from now on (the one there before,
  // if any, is killed first).
  FakePeer* Listen(const std::string& address);
  // The peer at `address`, or null.
  FakePeer* Find(const std::string& address) const;
  // The process at `address` ends: its connections close (calls in flight
  // fail Unavailable), its held Responders reply to nobody, and calls to
  // the address are refused from now on.
  void Kill(const std::string& address);
  // The connections to `address` drop, the peer lives on: calls in flight
  // fail Unavailable; the next call connects again.
  void Break(const std::string& address);

  std::unique_ptr<Channel> Connect(const std::string& address) override;
  // Channels made to `address` so far.
  int channels_made(const std::string& address) const;

  Executor* executor() const { return executor_; }
  const std::string& peer_name() const { return peer_name_; }

 private:
  friend class FakeChannel;
  void CloseConnections(FakePeer* peer, const absl::Status& why);

  Executor* const executor_;
  const std::string peer_name_;
  std::map<std::string, std::unique_ptr<FakePeer>> peers_;
  std::map<std::string, int> channels_made_;
  uint64_t next_connection_ = 1;
};

}  // namespace shoal::rpc

#endif  // SHOAL_RPC_FAKE_CHANNEL_H_
