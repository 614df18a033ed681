#include "rpc/rpc.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/constant_time.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "common/net.h"
#include "common/status_macros.h"
#include "google/protobuf/message_lite.h"
#include "google/protobuf/stubs/logging.h"
#include "rpc/frame.h"
#include "rpc/strangers.h"
#include "rpc/tls.h"
#include "shoal/shoal.pb.h"

namespace shoal::rpc {
namespace {

// Until a connection is authenticated only handshake frames (a Hello, its
// answer or a refusal: a token and a few words) may arrive. Without this
// bound anything that is not a Shoal peer is read as a frame length of up to
// 1 GiB and buffered: the first bytes of an HTTP request, "GET ", read as
// ~540 MB, so such a client was never answered nor disconnected.
constexpr uint32_t kMaxHandshakeFrameSize = 64u << 10;
// A connection must present the token this soon after it is accepted...
constexpr int64_t kHandshakeTimeoutMs = 10000;
// ...and no more than this many wait to, from one address and in all, per
// server: past that the oldest gives its seat up (rpc/strangers.h), so idle
// or trickling peers cannot hold a server's memory or its fds, nor keep
// anyone out.
constexpr StrangerSeats::Limits kStrangerLimits = {
    .per_peer = 64, .loopback = 512, .total = 1024};
// New connections taken per wake-up of a listening socket: the loop then
// serves what else is ready (the hellos of those it took, requests, timers)
// before it takes more, however fast they come.
constexpr int kAcceptBatch = 32;
// What becomes of strangers is logged at most once per this long.
constexpr int64_t kStrangerLogIntervalUs = 10 * 1000 * 1000;

// Protobuf's own messages (a string field that is not UTF-8, say) go to
// Shoal's log, each kind at most a few times and then once per 1,000 with a
// count: one bad field repeated for every line a program prints must not
// flood the log or the terminal.
shoal::Mutex g_protobuf_log_mu;
// How many messages each place in protobuf's code has logged; made by the
// first message and never freed (a message may come while the process
// exits).
std::map<std::pair<std::string, int>, int64_t>* g_protobuf_log_seen
    ABSL_GUARDED_BY(g_protobuf_log_mu)
        ABSL_PT_GUARDED_BY(g_protobuf_log_mu) = nullptr;

void ProtobufLog(google::protobuf::LogLevel level, const char* file, int line,
                 const std::string& message) {
  int64_t n;
  {
    shoal::MutexLock lock(&g_protobuf_log_mu);
    if (g_protobuf_log_seen == nullptr) {
      g_protobuf_log_seen = new std::map<std::pair<std::string, int>, int64_t>;
    }
    n = ++(*g_protobuf_log_seen)[{file, line}];
  }
  if (n > 3 && n % 1000 != 0) return;
  std::string text = absl::StrCat("protobuf: ", message);
  if (n > 3) absl::StrAppend(&text, " (", n, " times so far)");
  if (level >= google::protobuf::LOGLEVEL_ERROR) {
    SHOAL_LOG(ERROR) << text;
  } else if (level == google::protobuf::LOGLEVEL_WARNING) {
    SHOAL_LOG(WARNING) << text;
  } else {
    SHOAL_LOG(INFO) << text;
  }
}

[[maybe_unused]] const bool kProtobufLogInstalled = [] {
  google::protobuf::SetLogHandler(&ProtobufLog);
  return true;
}();

// A peer whose host died or whose network went away without closing the
// connection (no FIN, no RST) is found by the kernel's keepalive probes on
// an idle connection and by the unacknowledged-data timeout on a busy one,
// within ~6 s: the head then ends a lost driver's job as it does for one
// that exited, and callers get an error instead of waiting forever.
constexpr int kKeepaliveIdleS = 3;
constexpr int kKeepaliveIntervalS = 1;
constexpr int kKeepaliveProbes = 3;
constexpr unsigned kUnackedTimeoutMs = 6000;

void SetSocketOptions(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &kKeepaliveIdleS,
             sizeof(kKeepaliveIdleS));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &kKeepaliveIntervalS,
             sizeof(kKeepaliveIntervalS));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &kKeepaliveProbes,
             sizeof(kKeepaliveProbes));
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &kUnackedTimeoutMs,
             sizeof(kUnackedTimeoutMs));
}

std::string PeerName(const sockaddr_in& addr) {
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &addr.sin_addr, buf, sizeof(buf));
  return absl::StrCat(buf, ":", ntohs(addr.sin_port));
}

}  // namespace

// One TCP connection: frames in, frames out. Lives on the loop; kept alive by
// its registration with the loop until closed.
// A server's request counts and latencies by method; used on its loop only.
class ServerStatsRecorder {
 public:
  void Record(uint32_t method, bool ok, int64_t latency_us) {
    Entry& e = methods_[method];
    ++(ok ? e.ok : e.errors);
    double seconds = static_cast<double>(latency_us) / 1e6;
    e.sum_seconds += seconds;
    int b = 0;
    while (b < kNumLatencyBuckets - 1 && seconds > kLatencyBucketsSeconds[b]) {
      ++b;
    }
    ++e.buckets[b];
  }

  proto::ServerStats Snapshot() const {
    proto::ServerStats out;
    for (const auto& [method, e] : methods_) {
      proto::MethodStats* m = out.add_methods();
      m->set_method(proto::Method_IsValid(static_cast<int>(method))
                        ? proto::Method_Name(static_cast<proto::Method>(method))
                        : absl::StrCat(method));
      m->set_ok(e.ok);
      m->set_errors(e.errors);
      for (int64_t count : e.buckets) m->add_buckets(count);
      m->set_sum_seconds(e.sum_seconds);
    }
    return out;
  }

 private:
  struct Entry {
    int64_t ok = 0;
    int64_t errors = 0;
    int64_t buckets[kNumLatencyBuckets] = {};
    double sum_seconds = 0;
  };
  std::map<uint32_t, Entry> methods_;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  using FrameFn =
      std::function<void(uint8_t, uint32_t, uint64_t, std::string_view)>;
  using CloseFn = std::function<void(const absl::Status&)>;
  // Told when a server's connection that has not authenticated is refused,
  // with the log line that says why: the server logs it through its
  // StrangerLog (one line per connection is not logged).
  using RefusedFn = std::function<void(StrangerFate, std::string line)>;

  // `tls`: the connection's TLS session; null for plain TCP.
  Connection(EventLoop* loop, int fd, std::string peer, uint64_t id,
             std::unique_ptr<TlsStream> tls)
      : loop_(loop),
        fd_(fd),
        peer_(std::move(peer)),
        id_(id),
        tls_(std::move(tls)) {}
  ~Connection() {
    if (fd_ >= 0) close(fd_);
  }

  // The TCP connection was made (a client's connect completed).
  bool established() const { return !connecting_; }

  void Start(FrameFn on_frame, CloseFn on_close, bool connecting) {
    on_frame_ = std::move(on_frame);
    on_close_ = std::move(on_close);
    connecting_ = connecting;
    accepted_ = !connecting;
    // A server looks at the first byte before its TLS handshake, to answer
    // a client without TLS with what to do.
    sniffing_ = tls_ != nullptr && accepted_;
    auto self = shared_from_this();
    uint32_t events = EPOLLIN | EPOLLRDHUP;
    if (connecting) events |= EPOLLOUT;
    watching_out_ = connecting;
    loop_->AddFd(fd_, events, [self](uint32_t ev) { self->OnEvents(ev); });
  }

  void Send(uint8_t kind, uint32_t method, uint64_t call_id,
            std::string_view payload) {
    if (closed_) return;
    char header[kHeaderSize];
    EncodeFrameHeader(header, kind, method, call_id, payload.size());
    out_.append(header, kHeaderSize);
    out_.append(payload.data(), payload.size());
    ScheduleFlush();
  }

  void Close(const absl::Status& why) {
    if (closed_) return;
    closed_ = true;
    loop_->RemoveFd(fd_);
    close(fd_);
    fd_ = -1;
    CloseFn fn = std::move(on_close_);
    on_frame_ = nullptr;
    on_refused_ = nullptr;
    if (fn) fn(why);
  }

  // Takes in what the peer has sent already, as if the socket had been
  // reported readable: a server does this to a new connection and to a
  // stranger it is about to drop, so that a hello that has arrived is served
  // whenever the loop would have got to it.
  void ReadWaiting() {
    if (closed_) return;
    auto self = shared_from_this();
    OnEvents(EPOLLIN);
  }

  // Sends what is queued, then closes (used to refuse a connection with a
  // reason the peer can print).
  void CloseAfterFlush(const absl::Status& why) {
    close_after_flush_ = true;
    close_reason_ = why;
    ScheduleFlush();
  }

  void FlushNow() {
    if (!connecting_) Flush();
  }

  void set_stats(std::shared_ptr<ServerStatsRecorder> stats) {
    stats_ = std::move(stats);
  }
  ServerStatsRecorder* stats() const { return stats_.get(); }
  void set_on_refused(RefusedFn fn) { on_refused_ = std::move(fn); }
  void set_authenticated() {
    authenticated_ = true;
    on_refused_ = nullptr;
  }
  bool authenticated() const { return authenticated_; }
  bool closed() const { return closed_; }
  const std::string& peer() const { return peer_; }
  uint64_t id() const { return id_; }

 private:
  void ScheduleFlush() {
    if (flush_scheduled_ || connecting_) return;
    flush_scheduled_ = true;
    auto self = shared_from_this();
    loop_->RunAtIterationEnd([self] {
      self->flush_scheduled_ = false;
      self->Flush();
    });
  }

  void WatchOut(bool on) {
    if (on == watching_out_) return;
    watching_out_ = on;
    loop_->ModifyFd(fd_, EPOLLIN | EPOLLRDHUP | (on ? uint32_t{EPOLLOUT} : 0u));
  }

  void Flush() {
    if (tls_ != nullptr && !tls_->established()) return;  // after it
    while (!closed_ && out_pos_ < out_.size()) {
      const char* data = out_.data() + out_pos_;
      size_t size = out_.size() - out_pos_;
      ssize_t n = tls_ != nullptr ? tls_->Send(data, size)
                                  : send(fd_, data, size, MSG_NOSIGNAL);
      if (n > 0) {
        out_pos_ += n;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        // A TLS write that waits for input is retried when input comes.
        WatchOut(tls_ == nullptr || tls_->wants_write());
        return;
      }
      if (n < 0 && errno == EPROTO && tls_ != nullptr) {
        FailTls();
        return;
      }
      Close(absl::UnavailableError(
          absl::StrCat("write to ", peer_, " failed: ", strerror(errno))));
      return;
    }
    if (closed_) return;
    out_.clear();
    out_pos_ = 0;
    WatchOut(read_wants_write_);
    if (close_after_flush_) Close(close_reason_);
  }

  // Moves the TLS handshake on (a server first looks at what the client
  // sent); once it is done, sends what waited for it and reads.
  void ContinueHandshake() {
    if (sniffing_) {
      char first = 0;
      ssize_t n = recv(fd_, &first, 1, MSG_PEEK);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
      if (n <= 0) {
        Close(absl::UnavailableError(absl::StrCat(
            "connection from ", peer_, " closed before the TLS handshake")));
        return;
      }
      sniffing_ = false;
      if (!StartsTlsHandshake(first)) {
        Refused(StrangerFate::kTlsFailed,
                absl::StrCat("refused a connection from ", peer_,
                             ": it does not use TLS, and this server does"));
        tls_.reset();  // the refusal goes out in plain text
        Refuse(kPlainClientOnTlsPort);
        return;
      }
    }
    if (tls_->Handshake() < 0) {
      if (errno == EAGAIN) {
        WatchOut(tls_->wants_write());
      } else {
        FailTls();
      }
      return;
    }
    Flush();
    if (!closed_) ReadAll();
  }

  // Answers a peer that must not be served with an error frame, reads
  // nothing more from it and closes once the answer is out.
  void Refuse(const char* why) {
    refused_ = true;
    in_.clear();
    in_pos_ = 0;
    Send(kError, static_cast<uint32_t>(absl::StatusCode::kUnauthenticated), 0,
         why);
    CloseAfterFlush(absl::UnauthenticatedError(why));
  }

  // Closes after the TLS session failed; a server says why in its log.
  void FailTls() {
    if (accepted_) {
      Refused(StrangerFate::kTlsFailed,
              absl::StrCat("refused a TLS connection from ", peer_, ": ",
                           tls_->error().message()));
    }
    Close(tls_->error());
  }

  // Says in the log why a connection is refused: through the server's
  // StrangerLog while it has not authenticated, else a line of its own.
  void Refused(StrangerFate fate, std::string line) {
    if (on_refused_) {
      on_refused_(fate, std::move(line));
    } else {
      SHOAL_LOG(WARNING) << line;
    }
  }

  void OnEvents(uint32_t ev) {
    if (closed_) return;
    if (connecting_) {
      if (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)) {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
          Close(absl::UnavailableError(
              absl::StrCat("cannot connect to ", peer_, ": ", strerror(err))));
          return;
        }
        connecting_ = false;
        if (tls_ == nullptr) Flush();  // with TLS, the handshake first
        if (closed_) return;
      }
    }
    if (tls_ != nullptr && !tls_->established()) {
      if (!connecting_) ContinueHandshake();
      return;
    }
    if (ev & EPOLLIN) {
      if (!ReadAll()) return;
    }
    if (read_wants_write_ && (ev & EPOLLOUT)) {
      read_wants_write_ = false;
      if (!ReadAll()) return;
    }
    if (!connecting_ &&
        ((ev & EPOLLOUT) || (tls_ != nullptr && out_pos_ < out_.size()))) {
      Flush();
    }
    if (closed_) return;
    if (ev & (EPOLLERR | EPOLLHUP | EPOLLRDHUP)) {
      // Read what is left before giving up: the peer may have replied and
      // then closed.
      if (!ReadAll()) return;
      Close(absl::UnavailableError(
          absl::StrCat("connection to ", peer_, " closed by the peer")));
    }
  }

  // Returns false when the connection closed.
  bool ReadAll() {
    char buf[65536];
    while (true) {
      ssize_t n = tls_ != nullptr ? tls_->Recv(buf, sizeof(buf))
                                  : recv(fd_, buf, sizeof(buf), 0);
      if (n > 0) {
        in_.append(buf, n);
        if (!Parse()) return false;
        // A short read emptied the socket. (TLS hands out a record at a
        // time: it says when the socket and the session are empty.)
        if (tls_ == nullptr ? static_cast<size_t>(n) < sizeof(buf)
                            : tls_->Drained()) {
          return true;
        }
        continue;
      }
      if (n == 0) {
        Close(absl::UnavailableError(
            absl::StrCat("connection to ", peer_, " closed by the peer")));
        return false;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (tls_ != nullptr && tls_->wants_write()) {
          read_wants_write_ = true;
          WatchOut(true);
        }
        return true;
      }
      if (errno == EPROTO && tls_ != nullptr) {
        FailTls();
        return false;
      }
      Close(absl::UnavailableError(
          absl::StrCat("read from ", peer_, " failed: ", strerror(errno))));
      return false;
    }
  }

  bool Parse() {
    auto self = shared_from_this();  // a frame handler may drop the last ref
    if (refused_) {
      in_.clear();
      return true;
    }
    size_t pos = in_pos_;
    if (!authenticated_ && accepted_ && tls_ == nullptr && pos == 0 &&
        !in_.empty() && StartsTlsHandshake(in_[0])) {
      Refused(StrangerFate::kTlsFailed,
              absl::StrCat("refused a connection from ", peer_,
                           ": it speaks TLS, and this server does not use TLS "
                           "(start it with --tls-cert, --tls-key and --tls-ca "
                           "for TLS)"));
      Refuse(kTlsClientOnPlainPort);
      return false;
    }
    while (in_.size() - pos >= 4) {
      uint32_t len;
      memcpy(&len, in_.data() + pos, 4);
      const uint32_t max_len =
          authenticated_ ? kMaxFrameSize : kMaxHandshakeFrameSize;
      if (len < kHeaderSize - 4 || len > max_len) {
        Refused(StrangerFate::kNotShoal,
                absl::StrCat("malformed frame from ", peer_, " (length ", len,
                             "); closing the connection"));
        Close(absl::DataLossError(absl::StrCat("malformed frame from ", peer_,
                                               ": is it a Shoal process?")));
        return false;
      }
      if (in_.size() - pos < 4 + static_cast<size_t>(len)) break;
      const char* f = in_.data() + pos;
      uint8_t kind = static_cast<uint8_t>(f[4]);
      uint32_t method;
      uint64_t call_id;
      memcpy(&method, f + 5, 4);
      memcpy(&call_id, f + 9, 8);
      std::string_view payload(f + kHeaderSize, len - (kHeaderSize - 4));
      pos += 4 + len;
      in_pos_ = pos;
      if (on_frame_) on_frame_(kind, method, call_id, payload);
      if (closed_) return false;
      pos = in_pos_;
    }
    // Compact.
    if (pos == in_.size()) {
      in_.clear();
      in_pos_ = 0;
    } else if (pos > (1 << 16)) {
      in_.erase(0, pos);
      in_pos_ = 0;
    } else {
      in_pos_ = pos;
    }
    return true;
  }

  EventLoop* loop_;
  int fd_;
  std::string peer_;
  uint64_t id_;
  FrameFn on_frame_;
  CloseFn on_close_;
  std::string in_;
  size_t in_pos_ = 0;
  std::string out_;
  size_t out_pos_ = 0;
  std::unique_ptr<TlsStream> tls_;  // null: plain TCP
  bool connecting_ = false;         // the TCP connect has not completed
  bool accepted_ = false;           // the server's end
  bool sniffing_ = false;           // a TLS server that has not read a byte yet
  bool refused_ = false;            // answered with an error; input is dropped
  bool read_wants_write_ = false;   // a TLS read waits for the socket's room
  bool watching_out_ = false;
  bool flush_scheduled_ = false;
  std::shared_ptr<ServerStatsRecorder> stats_;  // a server's, if it keeps them
  RefusedFn on_refused_;  // a server's, until the connection authenticates
  bool closed_ = false;
  bool authenticated_ = false;
  bool close_after_flush_ = false;
  absl::Status close_reason_;
};

// ---- Responder ----

void Responder::Reply(const google::protobuf::MessageLite& message) const {
  ReplyRaw(Serialize(message));
}

void Responder::Record(bool ok) const {
  if (start_us_ == 0 || conn_->stats() == nullptr) return;
  conn_->stats()->Record(method_, ok, MonotonicUs() - start_us_);
}

void Responder::ReplyRaw(std::string payload) const {
  if (sink_ != nullptr) {
    if (sink_->connected()) sink_->Deliver(std::move(payload));
    return;
  }
  if (conn_ == nullptr || conn_->closed()) return;
  Record(true);
  conn_->Send(kResponse, 0, call_id_, payload);
}

void Responder::ReplyNow(const google::protobuf::MessageLite& message) const {
  if (sink_ != nullptr) return ReplyRaw(Serialize(message));
  if (conn_ == nullptr || conn_->closed()) return;
  Record(true);
  conn_->Send(kResponse, 0, call_id_, Serialize(message));
  conn_->FlushNow();
}

void Responder::Error(const absl::Status& status) const {
  if (sink_ != nullptr) {
    // As it would arrive in an error frame.
    if (sink_->connected()) {
      sink_->Deliver(ErrorFrameStatus(static_cast<uint32_t>(status.code()),
                                      std::string(status.message())));
    }
    return;
  }
  if (conn_ == nullptr || conn_->closed()) return;
  Record(false);
  conn_->Send(kError, static_cast<uint32_t>(status.code()), call_id_,
              std::string(status.message()));
}

uint64_t Responder::connection_id() const {
  if (sink_ != nullptr) return sink_->connection_id();
  return conn_ ? conn_->id() : 0;
}

bool Responder::connected() const {
  if (sink_ != nullptr) return sink_->connected();
  return conn_ && !conn_->closed();
}

const std::string& Responder::peer() const {
  static const std::string kNone;
  if (sink_ != nullptr) return sink_->peer();
  return conn_ ? conn_->peer() : kNone;
}

// ---- Server ----

namespace {

// Connections the kernel completes and queues before the server accepts
// them (capped at net.core.somaxconn, 4096 by default). A connection waiting
// there costs the process nothing; when the queue is full, a new client's
// SYN is dropped and retried only after 1 s, then 3 s, 7 s... So it is deep
// enough that strangers which the server has dropped and that connect again
// at once do not fill it, and a client's connection waits its turn in it
// instead.
constexpr int kListenBacklog = 4096;

// A listening socket on host:port (port 0 picks one).
absl::StatusOr<int> ListenOn(const std::string& host, int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot listen on \"", host, "\": give an IPv4 address of this host"));
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    close(fd);
    if (err == EADDRINUSE) {
      return absl::AlreadyExistsError(
          absl::StrCat("address ", host, ":", port, " is already in use"));
    }
    return absl::UnavailableError(absl::StrCat("cannot listen on ", host, ":",
                                               port, ": ", strerror(err)));
  }
  if (listen(fd, kListenBacklog) != 0) {
    int err = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("listen: ", strerror(err)));
  }
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Server>> Server::Create(EventLoop* loop,
                                                       const std::string& host,
                                                       int port,
                                                       std::string token) {
  ASSIGN_OR_RETURN(std::shared_ptr<const TlsContext> tls, ProcessTls());
  return Create(loop, host, port, std::move(token), std::move(tls));
}

absl::StatusOr<std::unique_ptr<Server>> Server::Create(
    EventLoop* loop, const std::string& host, int port, std::string token,
    std::shared_ptr<const TlsContext> tls) {
  if (tls != nullptr) RETURN_IF_ERROR(tls->CheckCanServe());
  ASSIGN_OR_RETURN(int fd, ListenOn(host, port));
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::unique_ptr<Server> server(
      new Server(loop, ntohs(addr.sin_port), std::move(token), std::move(tls)));
  server->AddListener(fd);
  return server;
}

absl::Status Server::AlsoListen(const std::string& host) {
  ASSIGN_OR_RETURN(int fd, ListenOn(host, port_));
  AddListener(fd);
  return absl::OkStatus();
}

void Server::AddListener(int fd) {
  listen_fds_.push_back(fd);
  if (loop_->InLoop()) {
    loop_->AddFd(fd, EPOLLIN, [this, fd](uint32_t) { Accept(fd); });
  } else {
    loop_->Post([this, fd] {
      loop_->AddFd(fd, EPOLLIN, [this, fd](uint32_t) { Accept(fd); });
    });
  }
}

void AlsoListenOnLoopback(Server* server, const std::string& advertised_host) {
  if (advertised_host.rfind("127.", 0) == 0 || advertised_host == "0.0.0.0") {
    return;
  }
  absl::Status st = server->AlsoListen("127.0.0.1");
  if (!st.ok()) {
    SHOAL_LOG(WARNING) << "not answering on loopback as well: " << st.message();
  }
}

Server::Server(EventLoop* loop, int port, std::string token,
               std::shared_ptr<const TlsContext> tls)
    : loop_(loop),
      port_(port),
      token_(std::move(token)),
      tls_(std::move(tls)),
      strangers_(kStrangerLimits),
      stranger_log_(kStrangerLogIntervalUs) {}

Server::~Server() { Shutdown(); }

void Server::EnableStats() {
  if (stats_ != nullptr) return;
  stats_ = std::make_shared<ServerStatsRecorder>();
  for (auto& [id, conn] : conns_) conn->set_stats(stats_);
  Register(proto::GET_SERVER_STATS, [this](std::string_view, Responder r) {
    r.Reply(stats_->Snapshot());
  });
}

void Server::Register(int method, Handler handler) {
  handlers_[method] = std::move(handler);
}

void Server::OnDisconnect(std::function<void(uint64_t)> callback) {
  on_disconnect_ = std::move(callback);
}

void Server::Shutdown() {
  for (int fd : listen_fds_) {
    loop_->RemoveFd(fd);
    close(fd);
  }
  listen_fds_.clear();
  if (hello_timer_ != 0) loop_->CancelTimer(hello_timer_);
  hello_timer_ = 0;
  strangers_.Clear();
  auto conns = std::move(conns_);
  conns_.clear();
  on_disconnect_ = nullptr;
  for (auto& [id, conn] : conns)
    conn->Close(absl::CancelledError("server stopped"));
}

void Server::Accept(int listen_fd) {
  for (int taken = 0; taken < kAcceptBatch; ++taken) {
    sockaddr_in addr{};
    socklen_t len = sizeof(addr);
    int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      Admit(fd, addr);
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EMFILE || errno == ENFILE) {
      // Out of descriptors: a stranger gives its own up first...
      if (auto oldest = strangers_.Oldest()) {
        DropStranger(oldest->first, StrangerFate::kMadeRoomForFds);
        continue;
      }
      // ...and when there is none, stop listening for a moment rather than
      // spin on a socket that stays readable.
      PauseAccepting(listen_fd, errno);
    } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
      SHOAL_LOG(WARNING) << "accept: " << strerror(errno);
    }
    return;
  }
}

void Server::PauseAccepting(int listen_fd, int err) {
  int64_t now = MonotonicUs();
  if (last_pause_log_us_ == 0 ||
      now - last_pause_log_us_ >= kStrangerLogIntervalUs) {
    SHOAL_LOG(WARNING) << "accept on port " << port_ << ": " << strerror(err)
                       << " with no unauthenticated connection to close; not "
                          "accepting for 100 ms at a time (raise the limit "
                          "of open files: ulimit -n)";
    last_pause_log_us_ = now;
  }
  loop_->RemoveFd(listen_fd);
  std::weak_ptr<bool> alive = alive_;
  loop_->RunAfter(100, [this, alive, listen_fd] {
    if (alive.expired() || std::find(listen_fds_.begin(), listen_fds_.end(),
                                     listen_fd) == listen_fds_.end()) {
      return;  // stopped meanwhile
    }
    loop_->AddFd(listen_fd, EPOLLIN,
                 [this, listen_fd](uint32_t) { Accept(listen_fd); });
  });
}

void Server::Admit(int fd, const sockaddr_in& addr) {
  const std::string seat = StrangerSeats::PeerOf(addr);
  while (auto eviction = strangers_.ToMakeRoomFor(seat)) {
    DropStranger(eviction->id, eviction->fate);
  }
  SetSocketOptions(fd);
  std::string peer = PeerName(addr);
  std::unique_ptr<TlsStream> tls;
  if (tls_ != nullptr) {
    auto stream = TlsStream::Create(*tls_, fd, TlsStream::Role::kServer, peer);
    if (!stream.ok()) {
      SHOAL_LOG(WARNING) << "refused a connection from " << peer << ": "
                         << stream.status().message();
      close(fd);
      return;
    }
    tls = std::move(*stream);
  }
  uint64_t id = next_conn_id_++;
  auto conn = std::make_shared<Connection>(loop_, fd, std::move(peer), id,
                                           std::move(tls));
  conn->set_stats(stats_);
  conns_[id] = conn;
  strangers_.Seat(id, seat, MonotonicUs());
  ArmHelloDeadline();
  std::weak_ptr<bool> alive = alive_;
  conn->set_on_refused([this, alive](StrangerFate fate, std::string line) {
    if (!alive.expired()) NoteStranger(fate, std::move(line));
  });
  std::weak_ptr<Connection> weak = conn;
  conn->Start(
      [this, weak](uint8_t kind, uint32_t method, uint64_t call_id,
                   std::string_view payload) {
        if (auto c = weak.lock()) OnFrame(c, kind, method, call_id, payload);
      },
      [this, id](const absl::Status&) {
        auto it = conns_.find(id);
        if (it == conns_.end()) return;
        bool was_authenticated = it->second->authenticated();
        strangers_.Leave(id);
        conns_.erase(it);
        if (was_authenticated && on_disconnect_) on_disconnect_(id);
      },
      /*connecting=*/false);
  // Its hello is often here already: served now, it never counts against
  // anyone's seats.
  conn->ReadWaiting();
}

void Server::DropStranger(uint64_t id, StrangerFate fate) {
  auto it = conns_.find(id);
  if (it == conns_.end()) {
    strangers_.Leave(id);
    return;
  }
  std::shared_ptr<Connection> conn = it->second;
  // A last read: a hello that has arrived is served, not dropped.
  conn->ReadWaiting();
  if (!strangers_.Holds(id)) return;  // it got in, or closed
  strangers_.Leave(id);
  std::string why;
  switch (fate) {
    case StrangerFate::kMadeRoomForSamePeer:
      why = absl::StrCat("its address's ",
                         conn->peer().rfind("127.", 0) == 0
                             ? strangers_.limits().loopback
                             : strangers_.limits().per_peer,
                         " seats for connections that have not presented the "
                         "cluster token were taken, and it was the oldest");
      break;
    case StrangerFate::kMadeRoomForFds:
      why =
          "the process ran out of file descriptors, and it was the oldest "
          "connection that had not presented the cluster token";
      break;
    case StrangerFate::kNoHelloInTime:
      why = absl::StrCat("no hello within ", kHandshakeTimeoutMs, " ms");
      break;
    default:
      why = absl::StrCat("more than ", strangers_.limits().total,
                         " connections had not presented the cluster token, "
                         "and it was the oldest");
      break;
  }
  NoteStranger(fate, absl::StrCat("closed the connection from ", conn->peer(),
                                  " on port ", port_, ": ", why));
  // Without a word: a stranger is owed none, and one in its TLS handshake
  // could not be given one.
  conn->Close(absl::UnavailableError(why));
}

void Server::ArmHelloDeadline() {
  if (hello_timer_ != 0) return;
  auto oldest = strangers_.Oldest();
  if (!oldest) return;
  int64_t wait_us = oldest->second + kHandshakeTimeoutMs * 1000 - MonotonicUs();
  std::weak_ptr<bool> alive = alive_;
  hello_timer_ = loop_->RunAfter(
      std::max<int64_t>(0, (wait_us + 999) / 1000), [this, alive] {
        if (alive.expired()) return;
        hello_timer_ = 0;
        const int64_t now = MonotonicUs();
        while (auto stranger = strangers_.Oldest()) {
          if (stranger->second + kHandshakeTimeoutMs * 1000 > now) break;
          DropStranger(stranger->first, StrangerFate::kNoHelloInTime);
        }
        ArmHelloDeadline();
      });
}

void Server::NoteStranger(StrangerFate fate, std::string what) {
  if (auto line = stranger_log_.Note(fate, std::move(what), MonotonicUs())) {
    SHOAL_LOG(WARNING) << *line;
  }
  if (!stranger_log_.pending() || log_timer_ != 0) return;
  std::weak_ptr<bool> alive = alive_;
  int64_t wait_us = stranger_log_.next_line_us() - MonotonicUs();
  log_timer_ = loop_->RunAfter(
      std::max<int64_t>(0, (wait_us + 999) / 1000), [this, alive] {
        if (alive.expired()) return;
        log_timer_ = 0;
        if (auto line = stranger_log_.Flush(MonotonicUs())) {
          SHOAL_LOG(WARNING) << *line;
        }
      });
}

void Server::OnFrame(const std::shared_ptr<Connection>& conn, uint8_t kind,
                     uint32_t method, uint64_t call_id,
                     std::string_view payload) {
  if (!conn->authenticated()) {
    proto::Hello hello;
    if (kind != kHello ||
        !hello.ParseFromArray(payload.data(), payload.size())) {
      NoteStranger(StrangerFate::kNotShoal,
                   absl::StrCat("refused connection from ", conn->peer(),
                                ": it did not start with a Shoal hello"));
      conn->Send(kError,
                 static_cast<uint32_t>(absl::StatusCode::kUnauthenticated), 0,
                 "this is a Shoal port: speak the Shoal protocol");
      conn->CloseAfterFlush(absl::UnauthenticatedError("no hello"));
      return;
    }
    if (!ConstantTimeEquals(hello.token(), token_)) {
      NoteStranger(
          StrangerFate::kWrongToken,
          absl::StrCat("refused ", hello.peer_name(), " from ", conn->peer(),
                       ": wrong or missing cluster token"));
      conn->Send(
          kError, static_cast<uint32_t>(absl::StatusCode::kPermissionDenied), 0,
          "the cluster refused the connection: wrong or missing cluster token. "
          "Pass the token that `shoal start --head` printed with --token or "
          "SHOAL_TOKEN (it is kept in the head's session folder, file token)");
      conn->CloseAfterFlush(absl::PermissionDeniedError("bad token"));
      return;
    }
    conn->set_authenticated();
    strangers_.Leave(conn->id());
    conn->Send(kHelloOk, 0, 0, {});
    return;
  }
  if (kind != kRequest) {
    SHOAL_LOG(WARNING) << "unexpected frame kind " << int{kind} << " from "
                       << conn->peer();
    return;
  }
  auto it = handlers_.find(static_cast<int>(method));
  Responder responder(conn, call_id, method,
                      conn->stats() != nullptr ? MonotonicUs() : 0);
  if (it == handlers_.end()) {
    responder.Error(absl::UnimplementedError(absl::StrCat(
        "this process does not serve method ", method,
        "; is the peer a different kind of Shoal process or version?")));
    return;
  }
  it->second(payload, std::move(responder));
}

// ---- Channel ----

TcpChannel::TcpChannel(EventLoop* loop, std::string address, std::string token,
                       std::string peer_name)
    : loop_(loop),
      address_(std::move(address)),
      token_(std::move(token)),
      peer_name_(std::move(peer_name)),
      tls_(ProcessTls()) {}

TcpChannel::TcpChannel(EventLoop* loop, std::string address, std::string token,
                       std::string peer_name,
                       std::shared_ptr<const TlsContext> tls)
    : loop_(loop),
      address_(std::move(address)),
      token_(std::move(token)),
      peer_name_(std::move(peer_name)),
      tls_(std::move(tls)) {}

TcpChannel::~TcpChannel() {
  *alive_ = false;
  Close();
}

bool TcpChannel::connected() const { return conn_ != nullptr && ready_; }

void TcpChannel::OnDisconnect(
    std::function<void(const absl::Status&)> callback) {
  on_disconnect_ = std::move(callback);
}

void TcpChannel::Close() {
  if (conn_) {
    auto conn = std::move(conn_);
    conn->Close(absl::CancelledError("channel closed"));
  }
}

void TcpChannel::Connect() {
  auto fail_soon = [this](absl::Status why) {
    std::weak_ptr<bool> alive = alive_;
    loop_->Post([this, alive, why] {
      if (alive.lock() && *alive.lock()) OnClosed(why);
    });
  };
  sockaddr_in addr;
  if (absl::Status s = ResolveAddress(address_, &addr); !s.ok()) {
    conn_ = nullptr;
    fail_soon(s);
    return;
  }
  if (!tls_.ok()) {
    fail_soon(tls_.status());
    return;
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    fail_soon(absl::InternalError(absl::StrCat("socket: ", strerror(errno))));
    return;
  }
  SetSocketOptions(fd);
  int r = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  if (r != 0 && errno != EINPROGRESS) {
    int err = errno;
    close(fd);
    fail_soon(absl::UnavailableError(
        absl::StrCat("cannot connect to ", address_, ": ", strerror(err))));
    return;
  }
  std::unique_ptr<TlsStream> tls;
  if (*tls_ != nullptr) {
    auto stream =
        TlsStream::Create(**tls_, fd, TlsStream::Role::kClient, address_);
    if (!stream.ok()) {
      close(fd);
      fail_soon(stream.status());
      return;
    }
    tls = std::move(*stream);
  }
  auto conn =
      std::make_shared<Connection>(loop_, fd, address_, 0, std::move(tls));
  conn_ = conn;
  ready_ = false;
  frames_heard_ = 0;
  std::weak_ptr<bool> alive = alive_;
  std::weak_ptr<Connection> weak = conn;
  conn->Start(
      [this, alive](uint8_t kind, uint32_t method, uint64_t call_id,
                    std::string_view payload) {
        auto a = alive.lock();
        if (a && *a) OnFrame(kind, method, call_id, payload);
      },
      [this, alive, weak](const absl::Status& why) {
        auto a = alive.lock();
        if (!a || !*a) return;
        // Only the current connection's loss concerns us.
        std::shared_ptr<Connection> closed = weak.lock();
        if (closed != conn_ && conn_ != nullptr) return;
        if (closed != nullptr && closed->established() && !ready_ &&
            RetryBeforeHello(why)) {
          return;
        }
        OnClosed(why);
      },
      /*connecting=*/true);
  proto::Hello hello;
  hello.set_token(token_);
  hello.set_peer_name(peer_name_);
  std::string payload = hello.SerializeAsString();
  // Written once the connection completes.
  conn->Send(kHello, 0, 0, payload);
}

void TcpChannel::Call(int method, std::string payload, Callback callback,
                      int64_t timeout_ms) {
  uint64_t id = next_call_id_++;
  Pending& p = pending_[id];
  p.callback = std::move(callback);
  if (timeout_ms > 0) {
    std::weak_ptr<bool> alive = alive_;
    p.timer = loop_->RunAfter(timeout_ms, [this, alive, id, timeout_ms] {
      auto a = alive.lock();
      if (!a || !*a) return;
      auto it = pending_.find(id);
      if (it == pending_.end()) return;
      it->second.timer = 0;
      Fail(id, absl::DeadlineExceededError(absl::StrCat(
                   "no reply from ", address_, " within ", timeout_ms, " ms")));
    });
  }
  if (conn_ != nullptr && ready_) {
    conn_->Send(kRequest, static_cast<uint32_t>(method), id, payload);
    return;
  }
  char header[kHeaderSize];
  EncodeFrameHeader(header, kRequest, static_cast<uint32_t>(method), id,
                    payload.size());
  queued_.push_back(std::string(header, kHeaderSize) + payload);
  if (conn_ == nullptr) Connect();
}

bool TcpChannel::RetryBeforeHello(const absl::Status& why) {
  // A refusal (the token, TLS) or a close of our own is final, and so is
  // a server that said anything.
  if (why.code() != absl::StatusCode::kUnavailable) return false;
  if (frames_heard_ > 0) return false;
  if (hello_retries_ >= max_hello_retries_ || queued_.empty()) return false;
  ++hello_retries_;
  conn_ = nullptr;
  std::weak_ptr<bool> alive = alive_;
  loop_->RunAfter(int64_t{20} << hello_retries_, [this, alive] {
    auto a = alive.lock();
    if (!a || !*a) return;
    // A call made meanwhile may have connected already; calls that timed
    // out meanwhile left nothing to send.
    if (conn_ != nullptr) return;
    if (pending_.empty()) {
      queued_.clear();
      return;
    }
    Connect();
  });
  return true;
}

void TcpChannel::OnFrame(uint8_t kind, uint32_t method, uint64_t call_id,
                         std::string_view payload) {
  ++frames_heard_;
  if (kind == kHelloOk) {
    ready_ = true;
    hello_retries_ = 0;
    conn_->set_authenticated();  // the server took our token
    auto queued = std::move(queued_);
    queued_.clear();
    for (const std::string& frame : queued) {
      uint32_t m;
      uint64_t id;
      memcpy(&m, frame.data() + 5, 4);
      memcpy(&id, frame.data() + 9, 8);
      if (pending_.count(id) == 0) continue;  // timed out meanwhile
      conn_->Send(kRequest, m, id, std::string_view(frame).substr(kHeaderSize));
    }
    return;
  }
  if (kind == kError && call_id == 0) {
    // The server refused the handshake; it closes the connection next.
    absl::Status why = ErrorFrameStatus(method, payload);
    if (conn_) {
      auto conn = conn_;
      conn->Close(why);
    }
    return;
  }
  auto it = pending_.find(call_id);
  if (it == pending_.end()) return;  // timed out
  Pending p = std::move(it->second);
  pending_.erase(it);
  if (p.timer != 0) loop_->CancelTimer(p.timer);
  if (kind == kResponse) {
    p.callback(std::string(payload));
  } else {
    p.callback(ErrorFrameStatus(method, payload));
  }
}

void TcpChannel::Fail(uint64_t call_id, const absl::Status& status) {
  auto it = pending_.find(call_id);
  if (it == pending_.end()) return;
  Pending p = std::move(it->second);
  pending_.erase(it);
  if (p.timer != 0) loop_->CancelTimer(p.timer);
  p.callback(status);
}

void TcpChannel::OnClosed(const absl::Status& why) {
  bool was_ready = ready_;
  hello_retries_ = 0;  // the next connection has its tries again
  conn_ = nullptr;
  ready_ = false;
  // Calls still queued were never written: the peer cannot have seen them.
  std::set<uint64_t> unsent;
  for (const std::string& frame : queued_) {
    uint64_t id;
    memcpy(&id, frame.data() + 9, 8);
    unsent.insert(id);
  }
  queued_.clear();
  absl::Status status = why;
  if (why.code() != absl::StatusCode::kPermissionDenied &&
      why.code() != absl::StatusCode::kUnauthenticated) {
    status = absl::UnavailableError(why.message());
  }
  absl::Status not_sent = status;
  not_sent.SetPayload(kNotSentPayload, absl::Cord("1"));
  std::vector<uint64_t> ids;
  ids.reserve(pending_.size());
  for (auto& [id, p] : pending_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  std::weak_ptr<bool> alive = alive_;
  for (uint64_t id : ids) {
    Fail(id, unsent.count(id) ? not_sent : status);
    auto a = alive.lock();
    if (!a || !*a) return;
  }
  if (was_ready && on_disconnect_) on_disconnect_(status);
}

TcpChannelFactory::TcpChannelFactory(EventLoop* loop, std::string token,
                                     std::string peer_name)
    : loop_(loop), token_(std::move(token)), peer_name_(std::move(peer_name)) {}

std::unique_ptr<Channel> TcpChannelFactory::Connect(
    const std::string& address) {
  return std::make_unique<TcpChannel>(loop_, address, token_, peer_name_);
}

bool NeverSent(const absl::Status& status) {
  return status.GetPayload(kNotSentPayload).has_value();
}

absl::Status ErrorFrameStatus(uint32_t code, std::string_view message) {
  // An OK status would pass for a result: StatusOr aborts on one.
  if (code == static_cast<uint32_t>(absl::StatusCode::kOk)) {
    return absl::UnknownError(std::string(message));
  }
  return absl::Status(static_cast<absl::StatusCode>(code),
                      std::string(message));
}

bool ParseMessage(std::string_view payload, google::protobuf::MessageLite* m) {
  return m->ParseFromArray(payload.data(), static_cast<int>(payload.size()));
}

std::string Serialize(const google::protobuf::MessageLite& m) {
  return m.SerializeAsString();
}

}  // namespace shoal::rpc
