#include "agent/object_transfer.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/util.h"
#include "object_store/format_util.h"
#include "rpc/tls.h"

namespace shoal::agent {
namespace {

constexpr char kMagic[4] = {'S', 'H', 'X', 'F'};
// What a server that refuses a token says (pullers show it their way).
constexpr char kWrongToken[] = "wrong cluster token";
constexpr uint32_t kMaxTokenSize = 4096;
constexpr uint32_t kMaxIdSize = 1024;
constexpr uint64_t kMaxMessageSize = 64 << 10;
constexpr size_t kHelloHeaderSize = 8;
constexpr size_t kRequestHeaderSize = 20;
constexpr size_t kReplyHeaderSize = 20;
// Blocking socket calls wake up this often to look at stop flags.
constexpr int kPollMs = 200;
constexpr int64_t kHandshakeTimeoutUs = 5'000'000;
// A puller that stops reading for this long is dropped by the server.
constexpr int64_t kSendIdleTimeoutUs = 30'000'000;

enum WireStatus : uint32_t {
  kOk = 0,
  kNotHere = 1,    // unknown or deleted here
  kNotSealed = 2,  // still being written here
  kBadRequest = 3,
  kBadToken = 4,
  kFailed = 5,
};

void PutU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void PutU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t GetU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

// When blocking socket calls give up: `stop` turning true (Cancelled), no
// progress for `idle_us` or the clock passing `deadline_us`
// (DeadlineExceeded); 0 means no such limit.
struct IoLimits {
  const std::atomic<bool>* stop = nullptr;
  int64_t idle_us = 0;
  int64_t deadline_us = 0;
};

// Called when a socket call timed out (kPollMs) without progress since
// `last_progress_us`.
absl::Status CheckLimits(const IoLimits& limits, int64_t last_progress_us) {
  if (limits.stop != nullptr && limits.stop->load()) {
    return absl::CancelledError("stopped");
  }
  int64_t now = MonotonicUs();
  if (limits.idle_us > 0 && now - last_progress_us > limits.idle_us) {
    return absl::DeadlineExceededError(
        absl::StrCat("nothing moved for ", limits.idle_us / 1'000'000, " s"));
  }
  if (limits.deadline_us > 0 && now > limits.deadline_us) {
    return absl::DeadlineExceededError("the time allowed ran out");
  }
  return absl::OkStatus();
}

void SetSocketOptions(int fd, int buffer_bytes, bool receive) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  timeval tv{};
  tv.tv_usec = kPollMs * 1000;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (buffer_bytes > 0) {
    setsockopt(fd, SOL_SOCKET, receive ? SO_RCVBUF : SO_SNDBUF, &buffer_bytes,
               sizeof(buffer_bytes));
  }
}

// One end of a transfer connection: a connected socket and, with TLS, its
// session, which every read and write then goes through.
struct Link {
  explicit Link(int fd) : fd(fd) {}
  ~Link() {
    tls.reset();
    close(fd);
  }
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  const int fd;
  std::unique_ptr<rpc::TlsStream> tls;  // null: plain TCP
};

// What a failed socket call (errno) means, for the helpers below.
absl::Status LinkError(const Link& link) {
  if (errno == EPROTO && link.tls != nullptr) return link.tls->error();
  return absl::UnavailableError(strerror(errno));
}

// Receives exactly `n` bytes. Unavailable when the peer closed or reset the
// connection.
absl::Status RecvAll(Link& link, void* buf, size_t n, const IoLimits& limits) {
  auto* p = static_cast<uint8_t*>(buf);
  int64_t last = MonotonicUs();
  while (n > 0) {
    if (limits.stop != nullptr && limits.stop->load()) {
      return absl::CancelledError("stopped");
    }
    ssize_t r = link.tls != nullptr ? link.tls->Recv(p, n)
                                    : recv(link.fd, p, n, MSG_WAITALL);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      last = MonotonicUs();
      continue;
    }
    if (r == 0) return absl::UnavailableError("the connection closed");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (absl::Status s = CheckLimits(limits, last); !s.ok()) return s;
      continue;
    }
    return LinkError(link);
  }
  return absl::OkStatus();
}

// Sends every byte of `iov` (modified as it goes).
absl::Status SendAll(Link& link, iovec* iov, int count,
                     const IoLimits& limits) {
  int64_t last = MonotonicUs();
  while (count > 0) {
    if (iov->iov_len == 0) {
      ++iov;
      --count;
      continue;
    }
    ssize_t w;
    if (link.tls != nullptr) {
      w = link.tls->Send(iov->iov_base, iov->iov_len);
    } else {
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<size_t>(count);
      w = sendmsg(link.fd, &msg, MSG_NOSIGNAL);
    }
    if (w > 0) {
      auto left = static_cast<size_t>(w);
      while (left > 0 && count > 0) {
        size_t take = std::min(left, iov->iov_len);
        iov->iov_base = static_cast<uint8_t*>(iov->iov_base) + take;
        iov->iov_len -= take;
        left -= take;
        if (iov->iov_len == 0) {
          ++iov;
          --count;
        }
      }
      last = MonotonicUs();
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (absl::Status s = CheckLimits(limits, last); !s.ok()) return s;
      continue;
    }
    if (w == 0) return absl::UnavailableError("nothing sent");
    return LinkError(link);
  }
  return absl::OkStatus();
}

absl::Status SendBytes(Link& link, const void* data, size_t n,
                       const IoLimits& limits) {
  iovec iov{const_cast<void*>(data), n};
  return SendAll(link, &iov, 1, limits);
}

// Runs the TLS handshake on a blocking socket whose calls time out (the
// limits are looked at between tries).
absl::Status TlsHandshake(Link& link, const IoLimits& limits) {
  int64_t start = MonotonicUs();
  while (link.tls->Handshake() < 0) {
    if (errno != EAGAIN) return link.tls->error();
    if (absl::Status s = CheckLimits(limits, start); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status SendReply(Link& link, WireStatus status, uint64_t object_size,
                       const std::string& message, const IoLimits& limits) {
  uint8_t header[kReplyHeaderSize];
  PutU32(header, status);
  PutU64(header + 4, object_size);
  PutU64(header + 12, message.size());
  iovec iov[2] = {{header, sizeof(header)},
                  {const_cast<char*>(message.data()), message.size()}};
  return SendAll(link, iov, 2, limits);
}

struct ReplyHeader {
  WireStatus status = kOk;
  uint64_t object_size = 0;
  uint64_t length = 0;
};

absl::StatusOr<ReplyHeader> RecvReplyHeader(Link& link,
                                            const IoLimits& limits) {
  uint8_t header[kReplyHeaderSize];
  if (absl::Status s = RecvAll(link, header, sizeof(header), limits); !s.ok()) {
    return s;
  }
  ReplyHeader reply;
  reply.status = static_cast<WireStatus>(GetU32(header));
  reply.object_size = GetU64(header + 4);
  reply.length = GetU64(header + 12);
  return reply;
}

// The message that follows a reply that is not kOk.
absl::StatusOr<std::string> RecvMessage(Link& link, const ReplyHeader& reply,
                                        const IoLimits& limits) {
  if (reply.length > kMaxMessageSize) {
    return absl::DataLossError("a reply message too long to be one");
  }
  std::string message(reply.length, '\0');
  if (absl::Status s = RecvAll(link, message.data(), message.size(), limits);
      !s.ok()) {
    return s;
  }
  return message;
}

// A connected socket (with its TLS session when `tls` is set, handshake
// done), or Unavailable naming why not.
absl::StatusOr<std::unique_ptr<Link>> Connect(const std::string& address,
                                              const rpc::TlsContext* tls,
                                              const PullOptions& options,
                                              const IoLimits& limits) {
  sockaddr_in addr;
  if (absl::Status s = ResolveAddress(address, &addr); !s.ok()) return s;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", errno));
  // Set before connecting, so that the window scale covers it.
  SetSocketOptions(fd, options.socket_buffer_bytes, /*receive=*/true);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (errno != EINPROGRESS) {
      int err = errno;
      close(fd);
      return absl::UnavailableError(strerror(err));
    }
    int64_t start = MonotonicUs();
    while (true) {
      pollfd p{fd, POLLOUT, 0};
      int n = poll(&p, 1, kPollMs);
      if (n > 0) break;
      if (n < 0 && errno != EINTR) {
        int err = errno;
        close(fd);
        return absl::UnavailableError(strerror(err));
      }
      if (absl::Status s = CheckLimits(limits, start); !s.ok()) {
        close(fd);
        return s;
      }
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      close(fd);
      return absl::UnavailableError(strerror(err));
    }
  }
  int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  auto link = std::make_unique<Link>(fd);
  if (tls != nullptr) {
    ASSIGN_OR_RETURN(link->tls,
                     rpc::TlsStream::Create(
                         *tls, fd, rpc::TlsStream::Role::kClient, address));
    RETURN_IF_ERROR(TlsHandshake(*link, limits));
  }
  return link;
}

// ---- Puller ----

// Why one source could not supply the object.
struct SourceFailure {
  enum Kind {
    kUnreachable,
    kDied,
    kNotHere,
    kNotSealed,
    kRefused,
    kMismatch,
    kTimedOut,
    kCancelled,
    kBroken,
  };
  Kind kind = kBroken;
  std::string detail;
};

std::string Describe(const TransferSource& source, const SourceFailure& f) {
  std::string node = absl::StrCat(
      "node ", source.node_id.empty() ? std::string("?") : source.node_id);
  if (!source.address.empty())
    absl::StrAppend(&node, " (", source.address, ")");
  switch (f.kind) {
    case SourceFailure::kUnreachable:
      return absl::StrCat(node, " is unreachable (", f.detail, ")");
    case SourceFailure::kDied:
      return absl::StrCat(node, " died mid-transfer (", f.detail, ")");
    case SourceFailure::kNotHere:
      return absl::StrCat(node, " does not hold it");
    case SourceFailure::kNotSealed:
      return absl::StrCat(node, " has not finished writing it");
    case SourceFailure::kRefused:
      // The server says why: the token, or that it uses TLS.
      return absl::StrCat(node, " refused the connection: ",
                          f.detail == kWrongToken
                              ? "it refused this cluster's token"
                              : f.detail);
    case SourceFailure::kMismatch:
      return absl::StrCat(node, " holds ", f.detail);
    case SourceFailure::kTimedOut:
      return absl::StrCat(node, " stalled (", f.detail, ")");
    case SourceFailure::kCancelled:
      return absl::StrCat(node, ": the pull was cancelled");
    case SourceFailure::kBroken:
      break;
  }
  return absl::StrCat(node, " could not serve it: ", f.detail);
}

SourceFailure FromIoError(const absl::Status& s, SourceFailure::Kind kind) {
  if (absl::IsCancelled(s)) return {SourceFailure::kCancelled, ""};
  if (absl::IsDeadlineExceeded(s)) {
    return {SourceFailure::kTimedOut, std::string(s.message())};
  }
  return {kind, std::string(s.message())};
}

SourceFailure FromWire(const ReplyHeader& reply, const std::string& message) {
  switch (reply.status) {
    case kNotHere:
      return {SourceFailure::kNotHere, message};
    case kNotSealed:
      return {SourceFailure::kNotSealed, message};
    case kBadToken:
      return {SourceFailure::kRefused, message};
    default:
      return {SourceFailure::kBroken, message};
  }
}

// One pull from one source: workers share the chunks still missing.
class SourcePull {
 public:
  SourcePull(const std::string& id, uint8_t* dest, uint64_t size,
             uint64_t chunk, const TransferSource& source,
             const std::string& token, const rpc::TlsContext* tls,
             const PullOptions& options, const IoLimits& limits,
             std::vector<char>* done)
      : id_(id),
        dest_(dest),
        size_(size),
        chunk_(chunk),
        source_(source),
        token_(token),
        tls_(tls),
        options_(options),
        limits_(limits),
        done_(*done) {
    for (uint64_t c = 0; c < done_.size(); ++c) {
      if (!done_[c]) missing_chunks_.push_back(c);
    }
  }

  // nullopt when every chunk arrived.
  std::optional<SourceFailure> Run() {
    size_t workers = std::min<size_t>(
        missing_chunks_.size(),
        static_cast<size_t>(std::max(1, options_.connections)));
    std::vector<std::thread> threads;
    for (size_t i = 1; i < workers; ++i) {
      threads.emplace_back([this] { Work(); });
    }
    Work();
    for (std::thread& t : threads) t.join();
    if (failure_.has_value()) return failure_;
    for (char d : done_) {
      if (!d) return SourceFailure{SourceFailure::kBroken, "chunks missing"};
    }
    return std::nullopt;
  }

 private:
  void Fail(SourceFailure f) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.has_value()) failure_ = std::move(f);
  }
  std::optional<uint64_t> Next() {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.has_value() || missing_chunks_.empty()) return std::nullopt;
    uint64_t c = missing_chunks_.front();
    missing_chunks_.pop_front();
    return c;
  }

  void Work() {
    absl::StatusOr<std::unique_ptr<Link>> link =
        Connect(source_.address, tls_, options_, limits_);
    if (!link.ok()) {
      return Fail(FromIoError(link.status(), SourceFailure::kUnreachable));
    }
    if (auto f = Handshake(**link)) {
      Fail(*f);
      return;
    }
    while (std::optional<uint64_t> c = Next()) {
      if (auto f = Fetch(**link, *c)) {
        Fail(*f);
        break;
      }
      done_[*c] = 1;  // each chunk has one writer
    }
  }

  std::optional<SourceFailure> Handshake(Link& link) {
    std::string hello(kMagic, sizeof(kMagic));
    hello.resize(kHelloHeaderSize);
    PutU32(reinterpret_cast<uint8_t*>(hello.data()) + 4,
           static_cast<uint32_t>(token_.size()));
    hello += token_;
    IoLimits limits = limits_;
    limits.idle_us =
        std::min<int64_t>(kHandshakeTimeoutUs, options_.io_timeout_ms * 1000);
    absl::Status s = SendBytes(link, hello.data(), hello.size(), limits);
    if (!s.ok()) return FromIoError(s, SourceFailure::kUnreachable);
    auto reply = RecvReplyHeader(link, limits);
    if (!reply.ok()) {
      return FromIoError(reply.status(), SourceFailure::kUnreachable);
    }
    auto message = RecvMessage(link, *reply, limits);
    if (!message.ok()) {
      return FromIoError(message.status(), SourceFailure::kUnreachable);
    }
    if (reply->status != kOk) return FromWire(*reply, *message);
    return std::nullopt;
  }

  std::optional<SourceFailure> Fetch(Link& link, uint64_t c) {
    uint64_t offset = c * chunk_;
    uint64_t length = std::min(chunk_, size_ - offset);
    if (options_.populate_destination && length > 0) {
      // Whole pages inside the chunk only: a neighbour's edge page may be
      // being received into by another connection.
      PrefaultForWrite(dest_ + offset, length);
    }
    uint8_t request[kRequestHeaderSize];
    PutU32(request, static_cast<uint32_t>(id_.size()));
    PutU64(request + 4, offset);
    PutU64(request + 12, length);
    iovec iov[2] = {{request, sizeof(request)},
                    {const_cast<char*>(id_.data()), id_.size()}};
    IoLimits limits = limits_;
    limits.idle_us = options_.io_timeout_ms * 1000;
    absl::Status s = SendAll(link, iov, 2, limits);
    if (!s.ok()) return FromIoError(s, SourceFailure::kDied);
    auto reply = RecvReplyHeader(link, limits);
    if (!reply.ok()) return FromIoError(reply.status(), SourceFailure::kDied);
    if (reply->status != kOk) {
      auto message = RecvMessage(link, *reply, limits);
      if (!message.ok()) {
        return FromIoError(message.status(), SourceFailure::kDied);
      }
      return FromWire(*reply, *message);
    }
    if (reply->object_size != size_) {
      return SourceFailure{
          SourceFailure::kMismatch,
          absl::StrCat("a different object of ", reply->object_size,
                       " bytes (expected ", size_, ")")};
    }
    if (reply->length != length) {
      return SourceFailure{SourceFailure::kBroken,
                           absl::StrCat("sent ", reply->length,
                                        " bytes for a request of ", length)};
    }
    s = RecvAll(link, dest_ + offset, length, limits);
    if (!s.ok()) return FromIoError(s, SourceFailure::kDied);
    return std::nullopt;
  }

  const std::string& id_;
  uint8_t* const dest_;
  const uint64_t size_;
  const uint64_t chunk_;
  const TransferSource& source_;
  const std::string& token_;
  const rpc::TlsContext* const tls_;  // null: plain TCP
  const PullOptions& options_;
  const IoLimits limits_;
  std::vector<char>& done_;

  std::mutex mu_;
  std::deque<uint64_t> missing_chunks_ ABSL_GUARDED_BY(mu_);
  std::optional<SourceFailure> failure_ ABSL_GUARDED_BY(mu_);
};

// The first byte a peer sent, left in the socket; nullopt when it sent none
// within the limits.
std::optional<char> PeekFirstByte(int fd, const IoLimits& limits) {
  int64_t start = MonotonicUs();
  while (true) {
    char first = 0;
    ssize_t n = recv(fd, &first, 1, MSG_PEEK);
    if (n == 1) return first;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ||
        !CheckLimits(limits, start).ok()) {
      return std::nullopt;
    }
  }
}

// A TLS server's side of a new connection: answers a puller without TLS
// with what to do, or runs the handshake. False (logged) when the
// connection is not to be served.
bool StartTls(const rpc::TlsContext& tls, Link& link, const std::string& peer,
              const IoLimits& limits) {
  std::optional<char> first = PeekFirstByte(link.fd, limits);
  if (!first.has_value()) return false;
  if (!rpc::StartsTlsHandshake(*first)) {
    SHOAL_LOG(WARNING) << "object transfer: refused a connection from " << peer
                       << ": it does not use TLS, and this node does";
    SendReply(link, kBadToken, 0, rpc::kPlainClientOnTlsPort, limits)
        .IgnoreError();
    return false;
  }
  auto stream =
      rpc::TlsStream::Create(tls, link.fd, rpc::TlsStream::Role::kServer, peer);
  absl::Status s = stream.status();
  if (s.ok()) {
    link.tls = std::move(*stream);
    s = TlsHandshake(link, limits);
  }
  if (!s.ok()) {
    SHOAL_LOG(WARNING) << "object transfer: refused a TLS connection from "
                       << peer << ": " << s.message();
  }
  return s.ok();
}

}  // namespace

absl::Status PullObject(const std::string& id, uint8_t* dest, uint64_t size,
                        const std::vector<TransferSource>& sources,
                        const std::string& token, const PullOptions& options) {
  if (id.empty()) return absl::InvalidArgumentError("pull of an empty id");
  std::shared_ptr<const rpc::TlsContext> tls;
  if (options.tls.has_value()) {
    tls = *options.tls;
  } else {
    ASSIGN_OR_RETURN(tls, rpc::ProcessTls());
  }
  const std::string shown = object_store::FormatId(id);
  const uint64_t chunk = std::max<uint64_t>(1, options.chunk_bytes);
  // One chunk at least: even an empty object is asked for, so that a
  // source that does not hold it says so.
  const uint64_t num_chunks = std::max<uint64_t>(1, (size + chunk - 1) / chunk);
  std::vector<char> done(num_chunks, 0);
  const int64_t start_us = MonotonicUs();
  IoLimits limits;
  limits.stop = options.cancel;
  limits.deadline_us =
      start_us + std::max<int64_t>(1, options.timeout_ms) * 1000;

  std::vector<std::string> reasons;
  while (true) {
    reasons.clear();
    bool retry = false;  // some source is still writing its copy
    for (const TransferSource& source : sources) {
      if (source.address.empty()) {
        reasons.push_back(absl::StrCat("node ", source.node_id,
                                       " has no object store to serve it"));
        continue;
      }
      if (source.address == options.self_address) {
        reasons.push_back(absl::StrCat("node ", source.node_id, " (",
                                       source.address, ") is this node"));
        continue;
      }
      std::optional<SourceFailure> failure =
          SourcePull(id, dest, size, chunk, source, token, tls.get(), options,
                     limits, &done)
              .Run();
      if (!failure.has_value()) return absl::OkStatus();
      if (failure->kind == SourceFailure::kCancelled) {
        return absl::CancelledError(
            absl::StrCat("the pull of object ", shown, " was cancelled"));
      }
      if (failure->kind == SourceFailure::kNotSealed) retry = true;
      reasons.push_back(Describe(source, *failure));
      SHOAL_LOG(INFO) << "pull of object " << shown << ": " << reasons.back()
                      << "; " << std::count(done.begin(), done.end(), 0)
                      << " of " << num_chunks << " chunks still missing";
      if (MonotonicUs() > limits.deadline_us) break;
    }
    if (sources.empty()) reasons.push_back("no node to pull it from was named");
    if (!retry || MonotonicUs() + 100'000 > limits.deadline_us) break;
    // Wait for a source to seal its copy, but stay cancellable.
    for (int i = 0; i < 5; ++i) {
      if (options.cancel != nullptr && options.cancel->load()) break;
      usleep(20'000);
    }
  }
  if (MonotonicUs() > limits.deadline_us) {
    reasons.push_back(absl::StrCat("gave up after ", options.timeout_ms,
                                   " ms (the pull's timeout)"));
  }
  return absl::DataLossError(absl::StrCat(
      "object ", shown, " is lost: ", absl::StrJoin(reasons, "; ")));
}

// ---- TransferServer ----

absl::StatusOr<std::unique_ptr<TransferServer>> TransferServer::Create(
    const std::string& host, std::string token, ObjectPins* pins) {
  ASSIGN_OR_RETURN(std::shared_ptr<const rpc::TlsContext> tls,
                   rpc::ProcessTls());
  return Create(host, std::move(token), pins, std::move(tls));
}

absl::StatusOr<std::unique_ptr<TransferServer>> TransferServer::Create(
    const std::string& host, std::string token, ObjectPins* pins,
    std::shared_ptr<const rpc::TlsContext> tls) {
  if (tls != nullptr) RETURN_IF_ERROR(tls->CheckCanServe());
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("cannot serve objects on \"", host,
                     "\": give an IPv4 address of this host"));
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 64) != 0) {
    int err = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat(
        "cannot listen for object transfers on ", host, ": ", strerror(err)));
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::string address = absl::StrCat(host, ":", ntohs(addr.sin_port));
  return std::unique_ptr<TransferServer>(new TransferServer(
      fd, std::move(address), std::move(token), std::move(tls), pins));
}

TransferServer::TransferServer(int listen_fd, std::string address,
                               std::string token,
                               std::shared_ptr<const rpc::TlsContext> tls,
                               ObjectPins* pins)
    : listen_fd_(listen_fd),
      address_(std::move(address)),
      token_(std::move(token)),
      tls_(std::move(tls)),
      pins_(pins) {
  accept_thread_ = std::thread([this] { AcceptLoop(); });
}

TransferServer::~TransferServer() {
  Shutdown();
  close(listen_fd_);
}

void TransferServer::Shutdown() {
  stopping_ = true;
  if (accept_thread_.joinable()) accept_thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& c : connections_) {
    if (c->thread.joinable()) c->thread.join();
  }
  connections_.clear();
}

void TransferServer::Reap() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if ((*it)->done) {
      (*it)->thread.join();
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

void TransferServer::AcceptLoop() {
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, kPollMs) <= 0) continue;
    sockaddr_in addr{};
    socklen_t len = sizeof(addr);
    int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len,
                     SOCK_CLOEXEC);
    if (fd < 0) continue;
    char ip[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof(ip));
    std::string peer = absl::StrCat(ip, ":", ntohs(addr.sin_port));
    std::lock_guard<std::mutex> lock(mu_);
    Reap();
    auto connection = std::make_unique<Connection>();
    Connection* raw = connection.get();
    int64_t client = next_client_--;
    connection->thread = std::thread([this, fd, peer, client, raw] {
      Serve(fd, peer, client);
      raw->done = true;
    });
    connections_.push_back(std::move(connection));
  }
}

void TransferServer::Serve(int fd, const std::string& peer, int64_t client) {
  SetSocketOptions(fd, 0, /*receive=*/false);
  Link link(fd);
  IoLimits handshake;
  handshake.stop = &stopping_;
  handshake.deadline_us = MonotonicUs() + kHandshakeTimeoutUs;
  if (tls_ != nullptr && !StartTls(*tls_, link, peer, handshake)) return;
  uint8_t hello[kHelloHeaderSize];
  absl::Status s = RecvAll(link, hello, sizeof(hello), handshake);
  std::string token;
  bool authenticated = false;
  if (s.ok() && memcmp(hello, kMagic, sizeof(kMagic)) == 0 &&
      GetU32(hello + 4) <= kMaxTokenSize) {
    token.resize(GetU32(hello + 4));
    s = RecvAll(link, token.data(), token.size(), handshake);
    authenticated = s.ok() && ConstantTimeEquals(token, token_);
  }
  if (!authenticated) {
    bool speaks_tls =
        s.ok() && rpc::StartsTlsHandshake(static_cast<char>(hello[0]));
    SHOAL_LOG(WARNING) << "object transfer: refused a connection from " << peer
                       << (speaks_tls
                               ? ": it speaks TLS, and this node does not use "
                                 "TLS"
                               : ": it did not present this cluster's token");
    SendReply(link, kBadToken, 0,
              speaks_tls ? rpc::kTlsClientOnPlainPort : kWrongToken, handshake)
        .IgnoreError();
    return;
  }
  IoLimits limits;
  limits.stop = &stopping_;
  s = SendReply(link, kOk, 0, "", limits);
  bool pinned_any = false;
  while (s.ok()) {
    uint8_t request[kRequestHeaderSize];
    // Waiting for the next request has no time limit: pullers close their
    // connections when done.
    limits.idle_us = 0;
    s = RecvAll(link, request, sizeof(request), limits);
    if (!s.ok()) break;
    uint32_t id_size = GetU32(request);
    uint64_t offset = GetU64(request + 4);
    uint64_t length = GetU64(request + 12);
    if (id_size > kMaxIdSize) {
      SendReply(link, kBadRequest, 0, "object id too long", limits)
          .IgnoreError();
      break;
    }
    std::string id(id_size, '\0');
    limits.idle_us = kSendIdleTimeoutUs;
    s = RecvAll(link, id.data(), id.size(), limits);
    if (!s.ok()) break;
    pinned_any = true;
    absl::StatusOr<PinnedObject> pinned = pins_->Pin(id, client);
    if (!pinned.ok()) {
      WireStatus status = absl::IsNotFound(pinned.status())      ? kNotHere
                          : absl::IsUnavailable(pinned.status()) ? kNotSealed
                                                                 : kFailed;
      s = SendReply(link, status, 0, std::string(pinned.status().message()),
                    limits);
      continue;
    }
    if (offset > pinned->size || length > pinned->size - offset) {
      pins_->Unpin(id, client);
      s = SendReply(link, kBadRequest, pinned->size,
                    absl::StrCat("bytes [", offset, ", ", offset + length,
                                 ") are outside the object's ", pinned->size),
                    limits);
      continue;
    }
    uint8_t header[kReplyHeaderSize];
    PutU32(header, kOk);
    PutU64(header + 4, pinned->size);
    PutU64(header + 12, length);
    // Straight from the arena: no copy in user space (with TLS, the
    // session encrypts from there).
    iovec iov[2] = {{header, sizeof(header)},
                    {const_cast<uint8_t*>(pinned->data) + offset, length}};
    s = SendAll(link, iov, 2, limits);
    pins_->Unpin(id, client);
  }
  if (pinned_any) pins_->UnpinAll(client);
}

}  // namespace shoal::agent
