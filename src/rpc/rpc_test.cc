#include "rpc/rpc.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <future>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/blocking_channel.h"
#include "rpc/event_loop.h"
#include "rpc/rpc_testing.h"
#include "shoal/shoal.pb.h"

namespace shoal::rpc {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

// How long a test waits for something that should happen at once. Only a
// hung test ever waits this long.
constexpr auto kWait = std::chrono::seconds(10);

constexpr char kToken[] = "test-token";

// Methods of the test server besides proto::KV_GET (a typed echo).
constexpr int kEcho = 1000;     // replies with the request payload
constexpr int kNoReply = 1001;  // keeps the Responder and never replies
constexpr int kLater = 1002;    // replies "later:<payload>" after 20 ms
constexpr int kUnknown = 77;    // not registered

// Waits for `future`; a reply that takes longer than kWait is an error that
// no code under test produces.
template <typename T>
absl::StatusOr<T> Await(std::future<absl::StatusOr<T>> future) {
  if (future.wait_for(kWait) != std::future_status::ready) {
    return absl::InternalError("the test waited 10 s for the call to end");
  }
  return future.get();
}

template <typename T>
bool Ready(std::future<T>& future) {
  return future.wait_for(kWait) == std::future_status::ready;
}

// ---- EventLoop ----

class EventLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<EventLoop>> loop =
        EventLoop::Create("loop_test");
    ASSERT_TRUE(loop.ok()) << loop.status();
    loop_ = std::move(*loop);
  }

  // Waits until every closure posted so far has run.
  void Drain() {
    std::promise<void> done;
    loop_->Post([&done] { done.set_value(); });
    ASSERT_EQ(done.get_future().wait_for(kWait), std::future_status::ready);
  }

  std::unique_ptr<EventLoop> loop_;
};

TEST_F(EventLoopTest, PostsFromOtherThreadsRunInOrderOnTheLoopThread) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 5000;
  // Touched on the loop thread only, read here after Drain().
  std::vector<std::vector<int>> seen(kThreads);
  std::atomic<int> off_loop{0};
  EXPECT_FALSE(loop_->InLoop());

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        loop_->Post([&, t, i] {
          if (!loop_->InLoop()) ++off_loop;
          seen[t].push_back(i);
        });
      }
    });
  }
  for (std::thread& t : threads) t.join();
  Drain();

  EXPECT_EQ(off_loop, 0);
  std::vector<int> want(kPerThread);
  for (int i = 0; i < kPerThread; ++i) want[i] = i;
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_THAT(seen[t], ElementsAreArray(want)) << "thread " << t;
  }
}

TEST_F(EventLoopTest, PostFromTheLoopRunsAfterTheCurrentClosure) {
  std::vector<std::string> order;
  std::promise<void> done;
  loop_->Post([&] {
    loop_->Post([&] {
      order.push_back("inner");
      done.set_value();
    });
    order.push_back("outer");
  });
  ASSERT_EQ(done.get_future().wait_for(kWait), std::future_status::ready);
  EXPECT_THAT(order, ElementsAre("outer", "inner"));
}

TEST_F(EventLoopTest, TimersFireInDeadlineOrderAndCancelledOnesNever) {
  std::vector<std::string> fired;  // loop thread
  std::promise<void> done;
  loop_->Post([&] {
    auto record = [&fired](std::string name) {
      return [&fired, name] { fired.push_back(name); };
    };
    // Registered out of order.
    loop_->RunAfter(30, record("30ms"));
    uint64_t cancelled = loop_->RunAfter(5, record("cancelled"));
    loop_->RunAfter(10, record("10ms"));
    loop_->RunAfter(0, record("0ms"));
    loop_->RunAfter(20, record("20ms a"));
    loop_->RunAfter(20, record("20ms b"));  // same delay: registration order
    // A timer may cancel a later one.
    uint64_t victim = loop_->RunAfter(25, record("cancelled by a timer"));
    loop_->RunAfter(15, [this, victim, &fired] {
      fired.push_back("15ms");
      loop_->CancelTimer(victim);
    });
    // And start a new one, due after every other (at 35 ms or later): it
    // ends the test.
    loop_->RunAfter(1, [this, &fired, &done] {
      fired.push_back("1ms");
      loop_->RunAfter(34, [&fired, &done] {
        fired.push_back("1ms + 34ms");
        done.set_value();
      });
    });
    loop_->CancelTimer(cancelled);
    loop_->CancelTimer(cancelled);  // twice: harmless
    loop_->CancelTimer(123456);     // never issued: harmless
  });
  ASSERT_EQ(done.get_future().wait_for(kWait), std::future_status::ready);
  EXPECT_THAT(fired, ElementsAre("0ms", "1ms", "10ms", "15ms", "20ms a",
                                 "20ms b", "30ms", "1ms + 34ms"));
}

TEST_F(EventLoopTest, TimerIdsAreDistinct) {
  std::promise<std::vector<uint64_t>> ids;
  loop_->Post([&] {
    std::vector<uint64_t> out;
    for (int i = 0; i < 3; ++i) out.push_back(loop_->RunAfter(1000, [] {}));
    for (uint64_t id : out) loop_->CancelTimer(id);
    ids.set_value(out);
  });
  auto future = ids.get_future();
  ASSERT_TRUE(Ready(future));
  std::vector<uint64_t> got = future.get();
  EXPECT_NE(got[0], got[1]);
  EXPECT_NE(got[1], got[2]);
  EXPECT_NE(got[0], 0u);
}

TEST_F(EventLoopTest, RunAtIterationEndRunsAfterTheWholeBatch) {
  std::vector<std::string> order;  // loop thread
  std::promise<void> gate;
  std::shared_future<void> gate_open = gate.get_future().share();
  std::promise<void> blocked;
  // Hold the loop so that `a` and `b` below land in one batch.
  loop_->Post([&] {
    blocked.set_value();
    gate_open.wait_for(kWait);
  });
  ASSERT_EQ(blocked.get_future().wait_for(kWait), std::future_status::ready);

  std::promise<void> done;
  loop_->Post([&] {
    order.push_back("a");
    loop_->RunAtIterationEnd([&] {
      order.push_back("end 1");
      // Added while the end-of-iteration closures run: same iteration.
      loop_->RunAtIterationEnd([&] { order.push_back("end 2"); });
      // Posted: the next iteration.
      loop_->Post([&] {
        order.push_back("next");
        done.set_value();
      });
    });
    loop_->RunAfter(0, [&] { order.push_back("timer"); });
    order.push_back("a after RunAtIterationEnd");
  });
  loop_->Post([&] { order.push_back("b"); });
  gate.set_value();

  ASSERT_EQ(done.get_future().wait_for(kWait), std::future_status::ready);
  EXPECT_THAT(order, ElementsAre("a", "a after RunAtIterationEnd", "b", "timer",
                                 "end 1", "end 2", "next"));
}

TEST_F(EventLoopTest, StopIsIdempotent) {
  Drain();
  loop_->Stop();
  loop_->Stop();
}

// ---- Server and Channel ----

// A plain blocking TCP client that speaks to the server off-protocol.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_GE(fd_, 0) << strerror(errno);
    timeval tv{};
    tv.tv_sec = std::chrono::duration_cast<std::chrono::seconds>(kWait).count();
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
        << strerror(errno);
  }
  ~RawClient() {
    if (fd_ >= 0) close(fd_);
  }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool Send(std::string_view bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n =
          send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += n;
    }
    return true;
  }

  // Exactly `size` bytes, or nullopt when the connection ends or kWait passes
  // first.
  std::optional<std::string> Read(size_t size) {
    std::string out(size, '\0');
    size_t done = 0;
    while (done < size) {
      ssize_t n = recv(fd_, out.data() + done, size - done, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return std::nullopt;
      done += n;
    }
    return out;
  }

  // What the server sent until it closed the connection (an orderly close or
  // a reset both count); nullopt when it is still open after kWait.
  std::optional<std::string> ReadUntilClosed() {
    std::string out;
    char buf[4096];
    while (true) {
      ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n > 0) {
        out.append(buf, n);
        continue;
      }
      if (n == 0 || errno == ECONNRESET) return out;
      if (errno == EINTR) continue;
      return std::nullopt;  // EAGAIN: timed out
    }
  }

  // Whether the server has neither sent anything nor closed the connection.
  bool Untouched() {
    char byte;
    ssize_t n = recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }

 private:
  int fd_ = -1;
};

// A frame as rpc.h describes it: u32 length of the rest, u8 kind, u32
// method, u64 call id (little endian, as on every host Shoal runs on), then
// the payload.
constexpr uint8_t kHelloKind = 1;
constexpr uint8_t kHelloOkKind = 2;
constexpr uint8_t kRequestKind = 3;
constexpr uint8_t kErrorKind = 5;
constexpr size_t kHeaderSize = 17;

std::string Frame(uint8_t kind, uint32_t method, uint64_t call_id,
                  std::string_view payload) {
  uint32_t len = static_cast<uint32_t>(kHeaderSize - 4 + payload.size());
  std::string out(kHeaderSize, '\0');
  memcpy(out.data(), &len, 4);
  out[4] = static_cast<char>(kind);
  memcpy(out.data() + 5, &method, 4);
  memcpy(out.data() + 9, &call_id, 8);
  out.append(payload);
  return out;
}

std::string HelloFrame(const std::string& token) {
  proto::Hello hello;
  hello.set_token(token);
  hello.set_peer_name("raw test client");
  return Frame(kHelloKind, 0, 0, hello.SerializeAsString());
}

// A raw socket listening on a free loopback port (*port), for a peer that
// the test plays by hand; -1 on failure.
int ListenOnLoopback(int* port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;  // a real server may take the port over later
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 8) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

class RpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<EventLoop>> loop =
        EventLoop::Create("rpc_test");
    ASSERT_TRUE(loop.ok()) << loop.status();
    loop_ = std::move(*loop);
  }

  void TearDown() override {
    if (loop_ == nullptr) return;
    RunOnLoop([this] {
      channels_.clear();
      servers_.clear();
      held_.clear();
    });
    loop_->Stop();
  }

  // Runs `fn` on the loop thread and returns its result.
  template <typename Fn>
  std::invoke_result_t<Fn&> RunOnLoop(Fn fn) {
    using R = std::invoke_result_t<Fn&>;
    std::promise<R> done;
    std::future<R> future = done.get_future();
    loop_->Post([&fn, &done] {
      if constexpr (std::is_void_v<R>) {
        fn();
        done.set_value();
      } else {
        done.set_value(fn());
      }
    });
    if (future.wait_for(kWait) != std::future_status::ready) {
      // The closure refers to this frame: there is no safe way to go on.
      std::cerr << "the event loop did not run a closure within 10 s\n";
      std::abort();
    }
    return future.get();
  }

  // A server on 127.0.0.1 with the test methods, or null (after a failure).
  Server* StartServer(int port = 0, const std::string& token = kToken) {
    return RunOnLoop([&]() -> Server* {
      absl::StatusOr<std::unique_ptr<Server>> server =
          Server::Create(loop_.get(), "127.0.0.1", port, token);
      EXPECT_TRUE(server.ok()) << server.status();
      if (!server.ok()) return nullptr;
      Server* raw = server->get();
      RegisterTestMethods(raw);
      servers_.push_back(std::move(*server));
      return raw;
    });
  }

  void RegisterTestMethods(Server* server) {
    RegisterProto<proto::KvGetRequest>(
        server, proto::KV_GET,
        [this](const proto::KvGetRequest& request, Responder r) {
          ++typed_calls_;
          proto::KvGetReply reply;
          reply.set_found(true);
          reply.set_value("value of " + request.key());
          last_peer_ = r.peer();
          r.Reply(reply);
        });
    server->Register(kEcho, [](std::string_view payload, Responder r) {
      r.ReplyRaw(std::string(payload));
    });
    server->Register(kNoReply, [this](std::string_view, Responder r) {
      held_.push_back(std::move(r));
    });
    server->Register(kLater, [this](std::string_view payload, Responder r) {
      loop_->RunAfter(20, [r, text = std::string(payload)] {
        proto::KvGetReply reply;
        reply.set_value("later:" + text);
        r.Reply(reply);
      });
    });
    server->OnDisconnect([this](uint64_t id) {
      disconnected_.push_back(id);
      if (on_disconnect_) {
        auto fn = std::move(on_disconnect_);
        on_disconnect_ = nullptr;
        fn(id);
      }
    });
  }

  Channel* NewChannel(int port, const std::string& token = kToken) {
    return NewChannel(absl::StrCat("127.0.0.1:", port), token);
  }
  Channel* NewChannel(const std::string& address, const std::string& token) {
    return RunOnLoop([&] {
      channels_.push_back(
          std::make_unique<TcpChannel>(loop_.get(), address, token, "test"));
      return channels_.back().get();
    });
  }

  // Starts a call from the loop thread; the future holds its outcome.
  std::future<absl::StatusOr<std::string>> CallAsync(Channel* channel,
                                                     int method,
                                                     std::string payload,
                                                     int64_t timeout_ms = 0) {
    auto done = std::make_shared<std::promise<absl::StatusOr<std::string>>>();
    auto future = done->get_future();
    loop_->Post([=, payload = std::move(payload)] {
      channel->Call(
          method, payload,
          [done](absl::StatusOr<std::string> result) {
            done->set_value(std::move(result));
          },
          timeout_ms);
    });
    return future;
  }

  absl::StatusOr<std::string> Call(Channel* channel, int method,
                                   std::string payload,
                                   int64_t timeout_ms = 0) {
    return Await(CallAsync(channel, method, std::move(payload), timeout_ms));
  }

  absl::StatusOr<proto::KvGetReply> CallKvGet(Channel* channel,
                                              const std::string& key,
                                              int64_t timeout_ms = 0) {
    auto done =
        std::make_shared<std::promise<absl::StatusOr<proto::KvGetReply>>>();
    auto future = done->get_future();
    loop_->Post([=] {
      proto::KvGetRequest request;
      request.set_key(key);
      CallProto<proto::KvGetReply>(
          channel, proto::KV_GET, request,
          [done](absl::StatusOr<proto::KvGetReply> reply) {
            done->set_value(std::move(reply));
          },
          timeout_ms);
    });
    return Await(std::move(future));
  }

  // A blocking channel to a new server with the test methods, or null
  // (after a failure).
  std::unique_ptr<BlockingChannel> ConnectBlocking() {
    Server* server = StartServer();
    if (server == nullptr) return nullptr;
    auto channel = BlockingChannel::Connect(
        absl::StrCat("127.0.0.1:", server->port()), kToken, "test", 10000);
    EXPECT_TRUE(channel.ok()) << channel.status();
    return channel.ok() ? std::move(*channel) : nullptr;
  }

  // The id of the next authenticated connection the servers see close.
  std::future<uint64_t> NextDisconnect() {
    auto done = std::make_shared<std::promise<uint64_t>>();
    RunOnLoop(
        [&] { on_disconnect_ = [done](uint64_t id) { done->set_value(id); }; });
    return done->get_future();
  }

  std::unique_ptr<EventLoop> loop_;
  // Loop thread only, like everything below.
  std::vector<std::unique_ptr<Server>> servers_;
  std::vector<std::unique_ptr<Channel>> channels_;
  std::vector<Responder> held_;  // kNoReply's
  int typed_calls_ = 0;
  std::string last_peer_;
  std::vector<uint64_t> disconnected_;
  std::function<void(uint64_t)> on_disconnect_;
};

TEST_F(RpcTest, TypedEchoRoundTrip) {
  Server* server = StartServer();
  ASSERT_NE(server, nullptr);
  EXPECT_GT(server->port(), 0);
  Channel* channel = NewChannel(server->port());
  EXPECT_FALSE(RunOnLoop([&] { return channel->connected(); }));

  absl::StatusOr<proto::KvGetReply> reply = CallKvGet(channel, "alpha");
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_TRUE(reply->found());
  EXPECT_EQ(reply->value(), "value of alpha");

  reply = CallKvGet(channel, "beta");
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->value(), "value of beta");

  EXPECT_TRUE(RunOnLoop([&] { return channel->connected(); }));
  EXPECT_EQ(RunOnLoop([&] { return channel->pending_calls(); }), 0u);
  EXPECT_EQ(RunOnLoop([&] { return typed_calls_; }), 2);
  EXPECT_THAT(RunOnLoop([&] { return last_peer_; }), StartsWith("127.0.0.1:"));
  EXPECT_EQ(channel->address(), absl::StrCat("127.0.0.1:", server->port()));
}

TEST_F(RpcTest, RawPayloadsOfEverySizeComeBackIntact) {
  Server* server = StartServer();
  ASSERT_NE(server, nullptr);
  Channel* channel = NewChannel(server->port());
  std::string binary(256, '\0');
  for (int i = 0; i < 256; ++i) binary[i] = static_cast<char>(i);
  std::string big(8 << 20, '\0');  // far more than one socket buffer
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  for (const std::string& payload :
       {std::string(), std::string("x"), binary, big}) {
    SCOPED_TRACE(payload.size());
    absl::StatusOr<std::string> reply = Call(channel, kEcho, payload);
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_TRUE(*reply == payload);
  }
}

// The blocking channel (a driver's line to its agent) reads ahead: a
// frame's header, its payload and the frames after it can come in one
// read, and a large payload is read straight into place. Every size
// around the read chunk (16 KiB) and the header comes back intact.
TEST_F(RpcTest, BlockingChannelCarriesPayloadsOfEverySize) {
  std::unique_ptr<BlockingChannel> channel = ConnectBlocking();
  ASSERT_NE(channel, nullptr);
  for (size_t size : {0, 1, 16, 17, 4096, 16366, 16367, 16383, 16384, 16385,
                      65536, 1 << 20, 5 << 20}) {
    SCOPED_TRACE(size);
    std::string payload(size, '\0');
    for (size_t i = 0; i < size; ++i) payload[i] = static_cast<char>(i * 13);
    absl::StatusOr<std::string> reply = channel->Call(kEcho, payload, 10000);
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_TRUE(*reply == payload);
  }
}

// Send's replies are read and dropped by the next Call, however they are
// split across reads: many arrive together, some larger than a read.
TEST_F(RpcTest, BlockingChannelSkipsTheRepliesOfSendsBeforeACall) {
  std::unique_ptr<BlockingChannel> channel = ConnectBlocking();
  ASSERT_NE(channel, nullptr);
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 200; ++i) {
      std::string payload =
          i % 50 == 7 ? std::string(40000, 'L') : absl::StrCat("send ", i);
      ASSERT_TRUE(channel->Send(kEcho, payload).ok());
    }
    std::string want = absl::StrCat("the call of round ", round);
    absl::StatusOr<std::string> reply = channel->Call(kEcho, want, 10000);
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_EQ(*reply, want);
  }
}

// A call the server never answers ends at its deadline, saying so.
TEST_F(RpcTest, BlockingChannelCallEndsAtItsDeadline) {
  std::unique_ptr<BlockingChannel> channel = ConnectBlocking();
  ASSERT_NE(channel, nullptr);
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> reply = channel->Call(kNoReply, "x", 200);
  EXPECT_FALSE(reply.ok());
  EXPECT_THAT(reply.status().message(), HasSubstr("no reply"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST_F(RpcTest, ManyPipelinedCallsAllGetTheirOwnReply) {
  static constexpr int kCalls = 10000;
  Server* server = StartServer();
  ASSERT_NE(server, nullptr);
  Channel* channel = NewChannel(server->port());

  // Two waves: the first is queued behind the handshake, the second goes
  // straight onto an open connection.
  for (int wave = 0; wave < 2; ++wave) {
    EXPECT_THAT(PipelinedEchoes(loop_.get(), channel, kEcho, kCalls,
                                absl::StrCat(wave)),
                IsEmpty())
        << "wave " << wave;
    EXPECT_EQ(RunOnLoop([&] { return channel->pending_calls(); }), 0u);
  }
}

TEST_F(RpcTest, HandlerMayReplyLater) {
  Server* server = StartServer();
  ASSERT_NE(server, nullptr);
  Channel* channel = NewChannel(server->port());
  // Both are outstanding together; each gets its own reply.
  auto first = CallAsync(channel, kLater, "one");
  auto second = CallAsync(channel, kLater, "two");
  for (auto [future, want] :
       {std::pair{&first, "later:one"}, std::pair{&second, "later:two"}}) {
    absl::StatusOr<std::string> payload = Await(std::move(*future));
    ASSERT_TRUE(payload.ok()) << payload.status();
    proto::KvGetReply reply;
    ASSERT_TRUE(ParseMessage(*payload, &reply));
    EXPECT_EQ(reply.value(), want);
  }
}

TEST_F(RpcTest, UnknownMethodIsUnimplemented) {
  Server* server = StartServer();
  ASSERT_NE(server, nullptr);
  Channel* channel = NewChannel(server->port());
  absl::StatusOr<std::string> reply = Call(channel, kUnknown, "x");
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(reply.status().message(),
              HasSubstr(absl::StrCat("does not serve method ", kUnknown)));
  // The connection is still good.
  EXPECT_TRUE(Call(channel, kEcho, "after").ok());
}

TEST_F(RpcTest, MalformedTypedRequestIsInvalidArgument) {
  Server* server = StartServer();
  ASSERT_NE(server, nullptr);
  Channel* channel = NewChannel(server->port());
  // An unterminated varint: no protobuf message parses from it.
  absl::StatusOr<std::string> reply =
      Call(channel, proto::KV_GET, std::string("\xff\xff\xff", 3));
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(reply.status().message(),
              HasSubstr(absl::StrCat("malformed request for method ",
                                     static_cast<int>(proto::KV_GET))));
  EXPECT_EQ(RunOnLoop([&] { return typed_calls_; }), 0);
  EXPECT_TRUE(CallKvGet(channel, "k").ok());
}

TEST_F(RpcTest, MalformedTypedReplyIsDataLoss) {
  Server* server = StartServer();
  ASSERT_NE(server, nullptr);
  RunOnLoop([&] {
    server->Register(kEcho + 10, [](std::string_view, Responder r) {
      r.ReplyRaw(std::string("\xff\xff\xff", 3));
    });
  });
  Channel* channel = NewChannel(server->port());
  auto done =
      std::make_shared<std::promise<absl::StatusOr<proto::KvGetReply>>>();
  auto future = done->get_future();
  loop_->Post([=] {
    CallProto<proto::KvGetReply>(channel, kEcho + 10, proto::KvGetRequest(),
                                 [done](absl::StatusOr<proto::KvGetReply> r) {
                                   done->set_value(std::move(r));
                                 });
  });
  absl::StatusOr<proto::KvGetReply> reply = Await(std::move(future));
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(RpcTest, WrongTokenIsPermissionDeniedAndOthersAreServed) {
  Server* server = StartServer();
  ASSERT_NE(server, nullptr);
  Channel* good = NewChannel(server->port());
  ASSERT_TRUE(Call(good, kEcho, "before").ok());

  for (const std::string& token : {std::string("wrong-token"), std::string()}) {
    SCOPED_TRACE(token);
    Channel* bad = NewChannel(server->port(), token);
    // Every call waiting for the handshake fails the same way.
    auto first = CallAsync(bad, kEcho, "one");
    auto second = CallAsync(bad, kEcho, "two");
    for (auto* future : {&first, &second}) {
      absl::StatusOr<std::string> reply = Await(std::move(*future));
      EXPECT_EQ(reply.status().code(), absl::StatusCode::kPermissionDenied);
      EXPECT_THAT(reply.status().message(), HasSubstr("token"));
    }
    EXPECT_FALSE(RunOnLoop([&] { return bad->connected(); }));
    // A later call tries again and is refused again.
    EXPECT_EQ(Call(bad, kEcho, "again").status().code(),
              absl::StatusCode::kPermissionDenied);
  }

  EXPECT_TRUE(Call(good, kEcho, "after").ok());
  Channel* late = NewChannel(server->port());
  EXPECT_TRUE(Call(late, kEcho, "new client").ok());
  // Refused connections were never authenticated: no disconnect reported.
  EXPECT_THAT(RunOnLoop([&] { return disconnected_; }), IsEmpty());
}

TEST_F(RpcTest, ClientThatDoesNotSpeakTheProtocolIsDisconnected) {
  Server* server = StartServer();
  ASSERT_NE(server, nullptr);
  Channel* good = NewChannel(server->port());
  ASSERT_TRUE(Call(good, kEcho, "before").ok());

  struct Case {
    std::string label;
    std::string bytes;
    std::string reply_has;  // "" when the server just hangs up
  };
  const std::vector<Case> cases = {
      {"request before hello", Frame(kRequestKind, kEcho, 1, "hi"),
       "speak the Shoal protocol"},
      {"hello that does not parse", Frame(kHelloKind, 0, 0, "\xff\xff\xff"),
       "speak the Shoal protocol"},
      {"http", "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", ""},
      {"length below the header", std::string("\x01\x00\x00\x00xxxx", 8), ""},
      {"large frame before hello",
       Frame(kHelloKind, 0, 0, std::string(1 << 20, 'x')), ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    RawClient raw(server->port());
    // The server may hang up before it has read everything: a failed send
    // is fine.
    raw.Send(c.bytes);
    std::optional<std::string> got = raw.ReadUntilClosed();
    ASSERT_TRUE(got.has_value()) << "still connected after 10 s";
    if (!c.reply_has.empty()) {
      EXPECT_THAT(*got, HasSubstr(c.reply_has));
      ASSERT_GE(got->size(), kHeaderSize);
      EXPECT_EQ(static_cast<uint8_t>((*got)[4]), kErrorKind);
    }
    EXPECT_TRUE(Call(good, kEcho, "still serving").ok());
  }
  EXPECT_THAT(RunOnLoop([&] { return disconnected_; }), IsEmpty());
}

TEST_F(RpcTest, HugeFrameClosesOnlyThatConnection) {
  Server* server = StartServer();
  ASSERT_NE(server, nullptr);
  Channel* good = NewChannel(server->port());
  ASSERT_TRUE(Call(good, kEcho, "before").ok());

  RawClient raw(server->port());
  ASSERT_TRUE(raw.Send(HelloFrame(kToken)));
  std::optional<std::string> hello_ok = raw.Read(kHeaderSize);
  ASSERT_TRUE(hello_ok.has_value());
  EXPECT_EQ(static_cast<uint8_t>((*hello_ok)[4]), kHelloOkKind);
  // Authenticated, the raw client works like any other.
  ASSERT_TRUE(raw.Send(Frame(kRequestKind, kEcho, 9, "raw")));
  std::optional<std::string> echoed = raw.Read(kHeaderSize + 3);
  ASSERT_TRUE(echoed.has_value());
  EXPECT_EQ(echoed->substr(kHeaderSize), "raw");

  auto disconnect = NextDisconnect();
  std::string huge = Frame(kRequestKind, kEcho, 10, "");
  const uint32_t len = 0xffffffffu;
  memcpy(huge.data(), &len, 4);
  ASSERT_TRUE(raw.Send(huge));
  ASSERT_TRUE(raw.ReadUntilClosed().has_value()) << "still connected";
  ASSERT_EQ(disconnect.wait_for(kWait), std::future_status::ready);

  EXPECT_TRUE(RunOnLoop([&] { return good->connected(); }));
  absl::StatusOr<std::string> reply = Call(good, kEcho, "after");
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(*reply, "after");
}

TEST_F(RpcTest, CallTimeoutIsDeadlineExceeded) {
  Server* server = StartServer();
  ASSERT_NE(server, nullptr);
  Channel* channel = NewChannel(server->port());
  // Connected first, so that the request surely reaches the server.
  ASSERT_TRUE(Call(channel, kEcho, "connect").ok());
  absl::StatusOr<std::string> reply = Call(channel, kNoReply, "", 50);
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(reply.status().message(), HasSubstr("within 50 ms"));
  EXPECT_THAT(reply.status().message(), HasSubstr(channel->address()));
  EXPECT_EQ(RunOnLoop([&] { return channel->pending_calls(); }), 0u);

  // A reply after the deadline is dropped; the connection stays usable.
  ASSERT_TRUE(Call(channel, kEcho, "sync").ok());
  RunOnLoop([&] {
    ASSERT_EQ(held_.size(), 1u);
    held_[0].ReplyRaw("too late");
  });
  reply = Call(channel, kEcho, "next", 10000);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(*reply, "next");
  EXPECT_TRUE(RunOnLoop([&] { return channel->connected(); }));
}

TEST_F(RpcTest, CallTimesOutWhileTheHandshakeNeverEnds) {
  // Accepts connections (the kernel does) but never answers the hello.
  int port = 0;
  int fd = ListenOnLoopback(&port);
  ASSERT_GE(fd, 0) << strerror(errno);

  Channel* channel = NewChannel(port);
  absl::StatusOr<std::string> reply = Call(channel, kEcho, "x", 50);
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(RunOnLoop([&] { return channel->pending_calls(); }), 0u);
  EXPECT_FALSE(RunOnLoop([&] { return channel->connected(); }));
  RunOnLoop([&] { channels_.clear(); });
  close(fd);
}

// A server drops strangers when a flood fills their seats: a client whose
// connection is closed before its hello was taken connects again (nothing
// it queued was sent), and its call is served; one dropped every time
// fails after a few tries, saying so.
TEST_F(RpcTest, AConnectionDroppedBeforeItsHelloIsMadeAgain) {
  int port = 0;
  int fd = ListenOnLoopback(&port);
  ASSERT_GE(fd, 0) << strerror(errno);

  // Drops every connection at once: the call fails after the retries.
  std::atomic<int> dropped{0};
  std::atomic<bool> stop{false};
  std::thread dropper([&] {
    while (!stop) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 20) != 1) continue;
      int c = accept(fd, nullptr, nullptr);
      if (c < 0) continue;
      close(c);
      ++dropped;
    }
  });
  Channel* channel = NewChannel(port);
  absl::StatusOr<std::string> reply = Call(channel, kEcho, "x", 5000);
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kUnavailable)
      << reply.status();
  EXPECT_THAT(std::string(reply.status().message()),
              HasSubstr(absl::StrCat("127.0.0.1:", port)));
  stop = true;
  dropper.join();
  EXPECT_EQ(dropped.load(), 4) << "the first connection and 3 more";

  // Drops the first connection only, once a real server has taken the
  // port: the call is served by it.
  dropped = 0;
  Server* server = nullptr;
  std::thread drop_one([&] {
    int c = accept(fd, nullptr, nullptr);
    close(fd);
    server = StartServer(port);
    if (c >= 0) close(c);
    ++dropped;
  });
  auto pending = CallAsync(channel, kEcho, "again", 5000);
  drop_one.join();
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::string> served = Await(std::move(pending));
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_EQ(*served, "again");
  EXPECT_EQ(dropped.load(), 1);
}

TEST_F(RpcTest, LostServerFailsPendingCallsAndChannelReconnects) {
  Server* server = StartServer();
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  Channel* channel = NewChannel(port);
  auto lost = std::make_shared<std::promise<absl::Status>>();
  RunOnLoop([&] {
    channel->OnDisconnect(
        [lost](const absl::Status& why) { lost->set_value(why); });
  });

  std::vector<std::future<absl::StatusOr<std::string>>> pending;
  for (int i = 0; i < 3; ++i)
    pending.push_back(CallAsync(channel, kNoReply, ""));
  // Replies come in order on one connection: once this one is back, the
  // server holds the three above.
  ASSERT_TRUE(Call(channel, kEcho, "sync").ok());
  EXPECT_EQ(RunOnLoop([&] { return channel->pending_calls(); }), 3u);

  RunOnLoop([&] { server->Shutdown(); });
  for (auto& future : pending) {
    absl::StatusOr<std::string> reply = Await(std::move(future));
    EXPECT_EQ(reply.status().code(), absl::StatusCode::kUnavailable)
        << reply.status();
  }
  auto lost_future = lost->get_future();
  ASSERT_EQ(lost_future.wait_for(kWait), std::future_status::ready);
  EXPECT_EQ(lost_future.get().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(RunOnLoop([&] { return channel->connected(); }));
  EXPECT_EQ(RunOnLoop([&] { return channel->pending_calls(); }), 0u);

  // Nobody listens: the next call fails fast.
  RunOnLoop([&] { servers_.clear(); });
  absl::StatusOr<std::string> reply = Call(channel, kEcho, "nobody");
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kUnavailable);

  // The server comes back on the same port; the channel connects again.
  Server* again = StartServer(port);
  ASSERT_NE(again, nullptr);
  ASSERT_EQ(again->port(), port);
  reply = Call(channel, kEcho, "back");
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(*reply, "back");
  EXPECT_TRUE(RunOnLoop([&] { return channel->connected(); }));
}

TEST_F(RpcTest, ClosingTheChannelFailsPendingCalls) {
  Server* server = StartServer();
  ASSERT_NE(server, nullptr);
  Channel* channel = NewChannel(server->port());
  auto pending = CallAsync(channel, kNoReply, "");
  ASSERT_TRUE(Call(channel, kEcho, "sync").ok());
  RunOnLoop([&] { channel->Close(); });
  EXPECT_EQ(Await(std::move(pending)).status().code(),
            absl::StatusCode::kUnavailable);
  // And it can be used again.
  EXPECT_TRUE(Call(channel, kEcho, "reopened").ok());
}

TEST_F(RpcTest, DestroyedChannelNeverCallsBack) {
  Server* server = StartServer();
  ASSERT_NE(server, nullptr);
  Channel* channel = NewChannel(server->port());
  ASSERT_TRUE(Call(channel, kEcho, "sync").ok());
  auto called = std::make_shared<int>(0);
  RunOnLoop([&] {
    channel->Call(
        kNoReply, "", [called](absl::StatusOr<std::string>) { ++*called; }, 20);
    channels_.clear();
  });
  // Past the call's deadline: its timer finds the channel gone.
  std::promise<void> later;
  loop_->Post([&] { loop_->RunAfter(40, [&] { later.set_value(); }); });
  ASSERT_EQ(later.get_future().wait_for(kWait), std::future_status::ready);
  EXPECT_EQ(RunOnLoop([&] { return *called; }), 0);
}

TEST_F(RpcTest, MalformedAddressFailsTheCall) {
  // (No unresolvable name: the lookup may wait for a DNS server.)
  Channel* channel = NewChannel("no-port", kToken);
  absl::StatusOr<std::string> reply = Call(channel, kEcho, "x");
  EXPECT_FALSE(reply.ok());
  EXPECT_THAT(reply.status().message(), HasSubstr("HOST:PORT"));
  EXPECT_EQ(RunOnLoop([&] { return channel->pending_calls(); }), 0u);
}

TEST_F(RpcTest, CreateOnATakenPortIsAlreadyExists) {
  Server* first = StartServer();
  ASSERT_NE(first, nullptr);
  absl::Status status = RunOnLoop([&] {
    return Server::Create(loop_.get(), "127.0.0.1", first->port(), kToken)
        .status();
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(status.message(),
              HasSubstr(absl::StrCat("127.0.0.1:", first->port(),
                                     " is already in use")));
  // The first server is unaffected.
  Channel* channel = NewChannel(first->port());
  EXPECT_TRUE(Call(channel, kEcho, "x").ok());
}

TEST_F(RpcTest, CreateWithABadHostIsInvalidArgument) {
  absl::Status status = RunOnLoop([&] {
    return Server::Create(loop_.get(), "not an address", 0, kToken).status();
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("not an address"));
}

TEST_F(RpcTest, OnDisconnectReportsTheResponderConnectionId) {
  Server* server = StartServer();
  ASSERT_NE(server, nullptr);
  Channel* first = NewChannel(server->port());
  Channel* second = NewChannel(server->port());
  // kNoReply keeps each Responder: their ids are the connections'. Replies
  // come in order on one connection, so after each echo the server holds
  // that channel's call.
  auto pending_first = CallAsync(first, kNoReply, "");
  ASSERT_TRUE(Call(first, kEcho, "sync").ok());
  auto pending_second = CallAsync(second, kNoReply, "");
  ASSERT_TRUE(Call(second, kEcho, "sync").ok());
  auto ids = RunOnLoop([&] {
    std::vector<uint64_t> out;
    for (const Responder& r : held_) out.push_back(r.connection_id());
    return out;
  });
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_NE(ids[0], 0u);
  EXPECT_NE(ids[0], ids[1]);

  auto disconnect = NextDisconnect();
  RunOnLoop([&] { first->Close(); });
  ASSERT_EQ(disconnect.wait_for(kWait), std::future_status::ready);
  EXPECT_EQ(disconnect.get(), ids[0]);

  // Replying on a closed connection does nothing; the other still works.
  RunOnLoop([&] {
    held_[0].ReplyRaw("nobody listens");
    held_[1].ReplyRaw("second");
  });
  absl::StatusOr<std::string> reply = Await(std::move(pending_second));
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(*reply, "second");
  EXPECT_EQ(Await(std::move(pending_first)).status().code(),
            absl::StatusCode::kUnavailable);

  disconnect = NextDisconnect();
  RunOnLoop([&] { second->Close(); });
  ASSERT_EQ(disconnect.wait_for(kWait), std::future_status::ready);
  EXPECT_EQ(disconnect.get(), ids[1]);
  EXPECT_THAT(RunOnLoop([&] { return disconnected_; }),
              ElementsAre(ids[0], ids[1]));
}

// ---- Strangers: connections that have not presented the token ----

// Connections from loopback that may wait for their hello at once.
constexpr int kLoopbackSeats = 512;

class StrangersTest : public RpcTest {
 protected:
  // Waits until `server` holds `n` strangers; false after kWait.
  bool AwaitStrangers(Server* server, size_t n) {
    auto deadline = std::chrono::steady_clock::now() + kWait;
    while (std::chrono::steady_clock::now() < deadline) {
      if (RunOnLoop([&] { return server->strangers(); }) == n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }
};

TEST_F(StrangersTest, AFloodFromOneAddressPushesOutOnlyItsOwnOldest) {
  Server* server = StartServer();
  ASSERT_NE(server, nullptr);
  Channel* good = NewChannel(server->port());
  ASSERT_TRUE(Call(good, kEcho, "before").ok());

  // 600 connections from loopback, one address, which has 512 seats.
  constexpr int kConnections = 600;
  constexpr int kDropped = kConnections - kLoopbackSeats;
  std::vector<std::unique_ptr<RawClient>> strangers;
  for (int i = 0; i < kConnections; ++i) {
    strangers.push_back(std::make_unique<RawClient>(server->port()));
  }
  ASSERT_TRUE(AwaitStrangers(server, kLoopbackSeats))
      << RunOnLoop([&] { return server->strangers(); });
  // The oldest were dropped, the newest wait.
  for (int i = 0; i < kDropped; ++i) {
    std::optional<std::string> got = strangers[i]->ReadUntilClosed();
    ASSERT_TRUE(got.has_value()) << "stranger " << i << " still connected";
    EXPECT_EQ(*got, "") << i;
  }
  for (int i = kDropped; i < kConnections; ++i) {
    EXPECT_TRUE(strangers[i]->Untouched()) << "stranger " << i;
  }
  // A new client gets in (pushing out one more), and the one that came
  // before the flood was never in question.
  Channel* late = NewChannel(server->port());
  EXPECT_TRUE(Call(late, kEcho, "after the flood").ok());
  EXPECT_TRUE(Call(good, kEcho, "after").ok());
  EXPECT_TRUE(strangers[kDropped]->ReadUntilClosed().has_value());
  EXPECT_TRUE(strangers[kDropped + 1]->Untouched());
  EXPECT_EQ(RunOnLoop([&] { return server->strangers(); }),
            static_cast<size_t>(kLoopbackSeats - 1));
}

TEST_F(StrangersTest, AHelloThatHasArrivedIsServedWhenItsSeatIsWanted) {
  Server* server = StartServer();
  ASSERT_NE(server, nullptr);
  // `client` is the oldest of the strangers that fill loopback's seats: the
  // next connection from there takes its seat unless its hello is in.
  RawClient client(server->port());
  ASSERT_TRUE(AwaitStrangers(server, 1));
  std::vector<std::unique_ptr<RawClient>> strangers;
  for (int i = 0; i < kLoopbackSeats - 1; ++i) {
    strangers.push_back(std::make_unique<RawClient>(server->port()));
  }
  ASSERT_TRUE(AwaitStrangers(server, kLoopbackSeats));

  // With the loop held, a new connection comes, then the client's hello:
  // the loop sees the new connection first.
  std::promise<void> gate;
  std::shared_future<void> gate_open = gate.get_future().share();
  std::promise<void> blocked;
  loop_->Post([&] {
    blocked.set_value();
    gate_open.wait_for(kWait);
  });
  ASSERT_EQ(blocked.get_future().wait_for(kWait), std::future_status::ready);
  RawClient newcomer(server->port());
  ASSERT_TRUE(client.Send(HelloFrame(kToken)));
  gate.set_value();

  std::optional<std::string> answer = client.Read(kHeaderSize);
  ASSERT_TRUE(answer.has_value()) << "the client was dropped";
  EXPECT_EQ(static_cast<uint8_t>((*answer)[4]), kHelloOkKind);
  // It took no stranger's seat, and the newcomer sits in its place.
  ASSERT_TRUE(AwaitStrangers(server, kLoopbackSeats));
  for (auto& stranger : strangers) EXPECT_TRUE(stranger->Untouched());
  EXPECT_TRUE(newcomer.Untouched());
  ASSERT_TRUE(client.Send(Frame(kRequestKind, kEcho, 1, "in")));
  std::optional<std::string> echoed = client.Read(kHeaderSize + 2);
  ASSERT_TRUE(echoed.has_value());
  EXPECT_EQ(echoed->substr(kHeaderSize), "in");
}

TEST_F(StrangersTest, AClientThatAuthenticatesNoLongerHoldsASeat) {
  Server* server = StartServer();
  ASSERT_NE(server, nullptr);
  std::vector<Channel*> clients;
  for (int i = 0; i < kLoopbackSeats + 88; ++i) {
    clients.push_back(NewChannel(server->port()));
    ASSERT_TRUE(Call(clients.back(), kEcho, "hi").ok()) << i;
  }
  EXPECT_EQ(RunOnLoop([&] { return server->strangers(); }), 0u);
  // Authenticated clients hold no seat: all still served.
  for (Channel* c : clients) EXPECT_TRUE(Call(c, kEcho, "again").ok());
  RawClient stranger(server->port());
  ASSERT_TRUE(AwaitStrangers(server, 1));
}

TEST(ResponderTest, DefaultResponderIsInert) {
  Responder r;
  EXPECT_EQ(r.connection_id(), 0u);
  EXPECT_EQ(r.peer(), "");
  r.ReplyRaw("x");
  r.Reply(proto::KvGetReply());
  r.ReplyNow(proto::KvGetReply());
  r.Error(absl::InternalError("x"));
}

TEST_F(RpcTest, ErrorRepliesKeepTheirCodeAndMessage) {
  Server* server = StartServer();
  ASSERT_NE(server, nullptr);
  RunOnLoop([&] {
    server->Register(kEcho + 20, [](std::string_view payload, Responder r) {
      r.Error(
          absl::NotFoundError(absl::StrCat("no key ", std::string(payload))));
    });
    server->Register(kEcho + 21, [](std::string_view payload, Responder r) {
      proto::KvGetReply reply;
      reply.set_value(std::string(payload));
      r.ReplyNow(reply);
    });
  });
  Channel* channel = NewChannel(server->port());
  absl::StatusOr<std::string> reply = Call(channel, kEcho + 20, "k1");
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(reply.status().message(), "no key k1");

  reply = Call(channel, kEcho + 21, "now");
  ASSERT_TRUE(reply.ok()) << reply.status();
  proto::KvGetReply parsed;
  ASSERT_TRUE(ParseMessage(*reply, &parsed));
  EXPECT_EQ(parsed.value(), "now");
}

}  // namespace
}  // namespace shoal::rpc
