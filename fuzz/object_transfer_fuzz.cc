// object_transfer: the object-transfer protocol (object_plane/transfer_*.h)
// from both ends, over loopback: what a TransferServer reads from a puller,
// and what PullObject reads from a source.
//
// Input: byte 0, bit 0 clear: the rest is what a puller sends to a
// TransferServer (token "fuzz-transfer-token") over one connection: the hello,
// then requests. The server's store holds "sealed" (100 bytes), "empty"
// (0 bytes), "writing" (not sealed yet) and "broken" (the store fails). The
// harness reads every reply. Bit 0 set: the rest is what a source answers
// when PullObject fetches "fuzz-object" (40 bytes, in 16-byte chunks, over
// one connection): replies to the hello and to each request. Either way the
// harness then sends 0xff bytes until the other end closes the connection
// (see ServerTerminator and PullTerminator).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/net.h"
#include "fuzz/fuzz_targets.h"
#include "object_plane/transfer_client.h"
#include "object_plane/transfer_codec.h"
#include "object_plane/transfer_server.h"

namespace shoal::fuzz {
namespace {

// The cluster token of the harness's transfer server and of its pulls.
constexpr char kTransferFuzzToken[] = "fuzz-transfer-token";

// The protocol's frames and limits, as both ends use them.
using object_plane::DecodeReply;
using object_plane::EncodeHello;
using object_plane::EncodeReply;
using object_plane::EncodeRequest;
using object_plane::kLastWireStatus;
using object_plane::kMaxIdSize;
using object_plane::kMaxMessageSize;
using object_plane::kMaxTokenSize;
using object_plane::kReplyHeaderSize;
using object_plane::kRequestHeaderSize;
using object_plane::ReplyHeader;
using object_plane::WireStatus;

constexpr uint64_t kSealedSize = 100;
constexpr int kIoWaitMs = 10000;

// The store as the server sees it. Every pin must be undone by an unpin of
// the same object by the same connection, or by UnpinAll.
class FakePins : public object_plane::TransferServer::ObjectPins {
 public:
  FakePins() {
    for (uint64_t i = 0; i < kSealedSize; ++i) {
      sealed_[i] = static_cast<uint8_t>(i);
    }
  }

  absl::StatusOr<object_plane::TransferServer::PinnedObject> Pin(
      const std::string& id, int64_t client) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (id == "sealed" || id == "empty") {
      ++pins_[{client, id}];
      return object_plane::TransferServer::PinnedObject{
          sealed_, id == "sealed" ? kSealedSize : 0};
    }
    if (id == "writing") {
      return absl::UnavailableError("object writing is being written");
    }
    if (id == "broken") return absl::InternalError("the store failed");
    return absl::NotFoundError("no such object here");
  }

  void Unpin(const std::string& id, int64_t client) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pins_.find({client, id});
    SHOAL_FUZZ_CHECK(it != pins_.end() && it->second > 0);
    if (--it->second == 0) pins_.erase(it);
  }

  void UnpinAll(int64_t client) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = pins_.begin(); it != pins_.end();) {
      it = it->first.first == client ? pins_.erase(it) : std::next(it);
    }
  }

  size_t pinned() {
    std::lock_guard<std::mutex> lock(mu_);
    return pins_.size();
  }

 private:
  uint8_t sealed_[kSealedSize];
  std::mutex mu_;
  std::map<std::pair<int64_t, std::string>, int> pins_;
};

int PortOf(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.sin_port);
}

// Closes with a reset. Exchange() leaves the peer to close first, so no
// TIME_WAIT socket is left behind on either end: a run opens millions of
// connections, which would otherwise use up the ephemeral ports.
void CloseWithReset(int fd) {
  linger reset{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
  close(fd);
}

// Writes `out` to `fd` while reading what comes back, until the peer closes
// the connection (which `out` must make it do). Returns what was read.
std::string Exchange(int fd, std::string_view out) {
  std::string in;
  size_t sent = 0;
  while (true) {
    const bool writing = sent < out.size();
    pollfd p{fd, static_cast<short>(POLLIN | (writing ? POLLOUT : 0)), 0};
    int n = poll(&p, 1, kIoWaitMs);
    if (n < 0 && errno == EINTR) continue;
    // A peer that neither answers nor closes in this long is stuck.
    SHOAL_FUZZ_CHECK(n > 0);
    if (writing && (p.revents & POLLOUT)) {
      ssize_t w = send(fd, out.data() + sent, out.size() - sent,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) sent += static_cast<size_t>(w);
      if (w < 0 && errno != EAGAIN && errno != EINTR) {
        sent = out.size();  // the peer closed first
      }
    }
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[16384];
      ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (r > 0) {
        in.append(buf, static_cast<size_t>(r));
      } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
        return in;
      }
    }
  }
}

// Bytes after an input that make the peer close the connection, whatever it
// was reading: 0xff bytes fill the longest field it may be in the middle of
// (a token, an object id, a reply message), and then make a header that it
// refuses (an id of 2^32 - 1 bytes, a reply message longer than 64 KiB).
std::string ServerTerminator() {
  return std::string(kMaxTokenSize + kMaxIdSize + 2 * kRequestHeaderSize,
                     '\xff');
}
std::string PullTerminator() {
  return std::string(kMaxMessageSize + 2 * kReplyHeaderSize, '\xff');
}

// ---- The server end ----

struct ServerEnd {
  FakePins pins;
  std::unique_ptr<object_plane::TransferServer> server;
  int port = 0;
};

ServerEnd& GetServerEnd() {
  static ServerEnd* end = [] {
    auto* e = new ServerEnd();
    absl::StatusOr<std::unique_ptr<object_plane::TransferServer>> server =
        object_plane::TransferServer::Create("127.0.0.1", kTransferFuzzToken,
                                             &e->pins);
    SHOAL_FUZZ_CHECK(server.ok());
    e->server = *std::move(server);
    std::string host;
    SHOAL_FUZZ_CHECK(SplitHostPort(e->server->address(), &host, &e->port).ok());
    return e;
  }();
  return *end;
}

// The server answers in whole replies: a header, then as many bytes as it
// says, an object's bytes no longer than the object.
void CheckReplies(std::string_view replies) {
  const auto* p = reinterpret_cast<const uint8_t*>(replies.data());
  size_t pos = 0;
  while (pos < replies.size()) {
    SHOAL_FUZZ_CHECK(replies.size() - pos >= kReplyHeaderSize);
    const ReplyHeader reply = DecodeReply(p + pos);
    SHOAL_FUZZ_CHECK(reply.status <= kLastWireStatus);
    SHOAL_FUZZ_CHECK(
        reply.length <=
        (reply.status == object_plane::kOk ? kSealedSize : kMaxMessageSize));
    pos += kReplyHeaderSize;
    SHOAL_FUZZ_CHECK(replies.size() - pos >= reply.length);
    pos += reply.length;
  }
}

void SendToServer(std::string_view bytes) {
  ServerEnd& end = GetServerEnd();
  int fd = ConnectLoopback(end.port);
  std::string replies = Exchange(fd, std::string(bytes) + ServerTerminator());
  CloseWithReset(fd);
  CheckReplies(replies);
  // The server closed the connection after its last unpin.
  SHOAL_FUZZ_CHECK(end.pins.pinned() == 0);
}

// ---- The pulling end ----

// A source that answers each pull with the bytes it is given.
class FakeSource {
 public:
  static FakeSource& Get() {
    static FakeSource* source = new FakeSource();
    return *source;
  }

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  // Serves `answer` to the next connection; Wait() returns once it closed.
  void Serve(std::string answer) {
    std::lock_guard<std::mutex> lock(mu_);
    answer_ = std::move(answer);
    state_ = kReady;
    cv_.notify_all();
  }

  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return state_ == kIdle; });
  }

 private:
  enum State { kIdle, kReady };

  FakeSource() {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    SHOAL_FUZZ_CHECK(listen_fd_ >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    SHOAL_FUZZ_CHECK(bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr),
                          sizeof(addr)) == 0);
    SHOAL_FUZZ_CHECK(listen(listen_fd_, 16) == 0);
    port_ = PortOf(listen_fd_);
    thread_ = std::thread([this] { Run(); });
    thread_.detach();
  }

  void Run() {
    while (true) {
      std::string answer;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return state_ == kReady; });
        answer = answer_;
      }
      int fd = AcceptLoopback(listen_fd_);
      Exchange(fd, answer);
      CloseWithReset(fd);
      std::lock_guard<std::mutex> lock(mu_);
      state_ = kIdle;
      cv_.notify_all();
    }
  }

  int listen_fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  State state_ = kIdle;
  std::string answer_;
};

void AnswerPull(std::string_view bytes) {
  FakeSource& source = FakeSource::Get();
  source.Serve(std::string(bytes) + PullTerminator());
  uint8_t dest[40];
  object_plane::PullOptions options;
  options.chunk_bytes = 16;
  options.connections = 1;
  // No second try at a source that says it is still writing the object:
  // one connection per input.
  options.timeout_ms = 1;
  options.io_timeout_ms = 2000;
  absl::Status pulled = object_plane::PullObject(
      "fuzz-object", dest, sizeof(dest), {{"fuzz-node", source.address()}},
      kTransferFuzzToken, options);
  SHOAL_FUZZ_CHECK(pulled.ok() || !pulled.message().empty());
  source.Wait();
}

void InitOnce() {
  static const bool done = [] {
    setenv("SHOAL_LOG_LEVEL", "error", /*overwrite=*/0);
    return true;
  }();
  (void)done;
}

// ---- Seeds ----

// A reply of any status, those no server sends included.
std::string Reply(uint32_t status, uint64_t object_size,
                  std::string_view payload) {
  return EncodeReply(static_cast<WireStatus>(status), object_size, payload);
}

std::string ServerInput(std::string_view bytes) {
  return std::string(1, '\0') + std::string(bytes);
}

std::string PullInput(std::string_view bytes) {
  return std::string(1, '\1') + std::string(bytes);
}

}  // namespace

std::vector<Seed> ObjectTransferSeeds() {
  const std::string hello = EncodeHello(kTransferFuzzToken);
  const std::string ok = Reply(0, 0, "");
  std::string pull_all = ok;
  for (uint64_t offset = 0; offset < 40; offset += 16) {
    pull_all += Reply(0, 40,
                      std::string(std::min<uint64_t>(16, 40 - offset),
                                  static_cast<char>('a' + offset)));
  }
  return {
      {"server_sealed", ServerInput(hello + EncodeRequest("sealed", 0, 100) +
                                    EncodeRequest("sealed", 96, 4) +
                                    EncodeRequest("empty", 0, 0))},
      {"server_outside", ServerInput(hello + EncodeRequest("sealed", 90, 20) +
                                     EncodeRequest("sealed", ~uint64_t{0}, 2))},
      {"server_missing", ServerInput(hello + EncodeRequest("writing", 0, 1) +
                                     EncodeRequest("broken", 0, 1) +
                                     EncodeRequest("gone", 0, 1))},
      {"server_long_id",
       ServerInput(hello + EncodeRequest(std::string(2000, 'x'), 0, 1))},
      {"server_bad_token",
       ServerInput(EncodeHello("wrong") + EncodeRequest("sealed", 0, 1))},
      {"server_not_hello", ServerInput("GET / HTTP/1.1\r\n\r\n")},
      {"server_partial",
       ServerInput(hello + EncodeRequest("sealed", 0, 8).substr(0, 9))},
      {"pull_whole", PullInput(pull_all)},
      {"pull_not_sealed", PullInput(ok + Reply(2, 0, "still writing"))},
      {"pull_refused", PullInput(Reply(4, 0, "wrong cluster token"))},
      {"pull_wrong_size", PullInput(ok + Reply(0, 41, std::string(16, 'x')))},
      {"pull_short_chunk", PullInput(ok + Reply(0, 40, std::string(3, 'x')))},
      {"pull_huge_message",
       PullInput(ok + Reply(1, 0, "").substr(0, 12) + std::string(8, '\xff'))},
  };
}

int FuzzObjectTransfer(const uint8_t* data, size_t size) {
  InitOnce();
  if (size == 0) return 0;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if ((data[0] & 1) == 0) {
    SendToServer(rest);
  } else {
    AnswerPull(rest);
  }
  return 0;
}

namespace {

// The harness itself could not go on (not a finding): says why and stops.
[[noreturn]] void Fail(const char* call, int err) {
  std::fprintf(stderr, "fuzz harness: %s failed: %s\n", call, strerror(err));
  std::abort();
}

}  // namespace

int ConnectLoopback(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  SHOAL_FUZZ_CHECK(fd >= 0);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    // Interrupted, the connection still comes up: wait for it.
    if (errno != EINTR) Fail("connect", errno);
    pollfd p{fd, POLLOUT, 0};
    while (poll(&p, 1, kIoWaitMs) < 0) {
      if (errno != EINTR) Fail("poll", errno);
    }
    int err = ETIMEDOUT;
    socklen_t len = sizeof(err);
    if (p.revents != 0) getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) Fail("connect", err);
  }
  return fd;
}

int AcceptLoopback(int listen_fd) {
  while (true) {
    int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) return fd;
    if (errno != EINTR && errno != ECONNABORTED) Fail("accept", errno);
  }
}

}  // namespace shoal::fuzz
