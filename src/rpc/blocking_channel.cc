#include "rpc/blocking_channel.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/net.h"
#include "rpc/frame.h"
#include "rpc/rpc.h"
#include "rpc/tls.h"
#include "shoal/shoal.pb.h"

namespace shoal::rpc {
namespace {

int64_t DeadlineUs(int64_t timeout_ms) {
  return timeout_ms > 0 ? MonotonicUs() + timeout_ms * 1000 : -1;
}

// Waits until fd is ready for `events`; false when the deadline passed.
bool WaitFd(int fd, short events, int64_t deadline_us) {
  while (true) {
    int wait_ms = -1;
    if (deadline_us >= 0) {
      int64_t left = deadline_us - MonotonicUs();
      if (left <= 0) return false;
      wait_ms = static_cast<int>((left + 999) / 1000);
    }
    pollfd p{fd, events, 0};
    int r = poll(&p, 1, wait_ms);
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return true;  // let the read/write report it
  }
}

// A TLS record is at most 16 KiB: a frame up to that size leaves as one
// record (one write) when its header and payload are sent together.
constexpr size_t kTlsCoalesceBytes = 16 << 10;

// How much a read asks for when a frame's rest is smaller: a TLS record.
constexpr size_t kReadChunk = 16 << 10;

}  // namespace

BlockingChannel::BlockingChannel(int fd, std::string address)
    : fd_(fd), address_(std::move(address)) {}

absl::StatusOr<std::unique_ptr<BlockingChannel>> BlockingChannel::Connect(
    const std::string& address, const std::string& token,
    const std::string& peer_name, int64_t timeout_ms) {
  absl::StatusOr<std::shared_ptr<const TlsContext>> tls = ProcessTls();
  if (!tls.ok()) return tls.status();
  return Connect(address, token, peer_name, timeout_ms, *std::move(tls));
}

absl::StatusOr<std::unique_ptr<BlockingChannel>> BlockingChannel::Connect(
    const std::string& address, const std::string& token,
    const std::string& peer_name, int64_t timeout_ms,
    std::shared_ptr<const TlsContext> tls) {
  sockaddr_in addr;
  if (absl::Status s = ResolveAddress(address, &addr); !s.ok()) return s;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot connect to ", address, ": ", strerror(err)));
  }
  std::unique_ptr<BlockingChannel> channel(new BlockingChannel(fd, address));
  int64_t deadline = DeadlineUs(timeout_ms);
  shoal::MutexLock lock(&channel->mu_);
  if (tls != nullptr) {
    // Non-blocking, so that the TLS calls return and the deadlines hold.
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    auto stream =
        TlsStream::Create(*tls, fd, TlsStream::Role::kClient, address);
    if (!stream.ok()) return stream.status();
    channel->tls_ = std::move(*stream);
    if (auto s = channel->Handshake(deadline); !s.ok()) return s;
  }
  proto::Hello hello;
  hello.set_token(token);
  hello.set_peer_name(peer_name);
  if (auto s = channel->WriteFrame(kHello, 0, 0, hello.SerializeAsString(),
                                   deadline);
      !s.ok()) {
    return s;
  }
  uint8_t kind = 0;
  uint32_t method = 0;
  uint64_t call_id = 0;
  auto payload = channel->ReadFrame(&kind, &method, &call_id, deadline);
  if (!payload.ok()) return payload.status();
  if (kind == kError) {
    return ErrorFrameStatus(method, *payload);
  }
  if (kind != kHelloOk) {
    return absl::DataLossError(
        absl::StrCat(address, " answered the handshake with frame kind ",
                     int{kind}, ": is it a Shoal process?"));
  }
  return channel;
}

BlockingChannel::~BlockingChannel() {
  tls_.reset();
  if (fd_ >= 0) close(fd_);
}

bool BlockingChannel::Wait(short events, int64_t deadline_us) {
  // Each read or write is tried first, and waited for only once it could
  // not move a byte: a call costs a write, a poll and a read, not a poll
  // before each. A TLS session says what it waits for (a read may need to
  // write, and bytes it holds are not seen by poll).
  if (!blocked_) return true;
  blocked_ = false;
  if (tls_ != nullptr) events = tls_->wants_write() ? POLLOUT : POLLIN;
  return WaitFd(fd_, events, deadline_us);
}

absl::Status BlockingChannel::Handshake(int64_t deadline_us) {
  while (tls_->Handshake() < 0) {
    if (errno != EAGAIN) return tls_->error();
    blocked_ = true;
    if (!Wait(POLLIN, deadline_us)) {
      return absl::DeadlineExceededError(
          absl::StrCat("the TLS handshake with ", address_, " timed out"));
    }
  }
  return absl::OkStatus();
}

absl::Status BlockingChannel::Broken(const std::string& what) {
  if (broken_.empty()) broken_ = what;
  return absl::UnavailableError(broken_);
}

absl::Status BlockingChannel::WriteFrame(uint8_t kind, uint32_t method,
                                         uint64_t call_id,
                                         std::string_view payload,
                                         int64_t deadline_us) {
  char header[kHeaderSize];
  EncodeFrameHeader(header, kind, method, call_id, payload.size());
  std::string small;  // TLS: a small frame in one piece
  iovec iov[2] = {{header, kHeaderSize},
                  {const_cast<char*>(payload.data()), payload.size()}};
  int idx = 0;
  if (tls_ != nullptr && payload.size() <= kTlsCoalesceBytes) {
    small.reserve(kHeaderSize + payload.size());
    small.append(header, kHeaderSize).append(payload);
    iov[1] = {small.data(), small.size()};
    idx = 1;
  }
  while (idx < 2) {
    if (!Wait(POLLOUT, deadline_us)) {
      return Broken(absl::StrCat("writing to ", address_, " timed out"));
    }
    ssize_t n;
    if (tls_ != nullptr) {
      n = tls_->Send(iov[idx].iov_base, iov[idx].iov_len);
    } else {
      msghdr msg{};
      msg.msg_iov = iov + idx;
      msg.msg_iovlen = 2 - idx;
      n = sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    if (n < 0) {
      blocked_ = errno == EAGAIN;
      if (errno == EINTR || errno == EAGAIN) continue;
      if (errno == EPROTO && tls_ != nullptr) {
        Broken(std::string(tls_->error().message())).IgnoreError();
        return tls_->error();
      }
      return Broken(
          absl::StrCat("connection to ", address_, " lost: ", strerror(errno)));
    }
    while (idx < 2 && static_cast<size_t>(n) >= iov[idx].iov_len) {
      n -= static_cast<ssize_t>(iov[idx].iov_len);
      ++idx;
    }
    if (idx < 2) {
      iov[idx].iov_base = static_cast<char*>(iov[idx].iov_base) + n;
      iov[idx].iov_len -= static_cast<size_t>(n);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> BlockingChannel::ReadFrame(uint8_t* kind,
                                                       uint32_t* method,
                                                       uint64_t* call_id,
                                                       int64_t deadline_us) {
  char header[kHeaderSize];
  if (auto s = ReadExact(header, kHeaderSize, deadline_us); !s.ok()) return s;
  uint32_t len;
  memcpy(&len, header, 4);
  if (len < kHeaderSize - 4 || len > kMaxFrameSize) {
    return Broken(absl::StrCat("malformed frame from ", address_));
  }
  *kind = static_cast<uint8_t>(header[4]);
  memcpy(method, header + 5, 4);
  memcpy(call_id, header + 9, 8);
  std::string payload(len - (kHeaderSize - 4), '\0');
  if (auto s = ReadExact(payload.data(), payload.size(), deadline_us);
      !s.ok()) {
    return s;
  }
  return payload;
}

absl::Status BlockingChannel::ReadExact(char* out, size_t size,
                                        int64_t deadline_us) {
  // What an earlier read brought past its frame comes first.
  size_t got = std::min(size, in_end_ - in_begin_);
  if (got > 0) memcpy(out, in_.get() + in_begin_, got);
  in_begin_ += got;
  while (got < size) {
    if (!Wait(POLLIN, deadline_us)) {
      return Broken(absl::StrCat("no reply from ", address_, " in time"));
    }
    // Small frames are read a chunk at a time, so that a header, its
    // payload and the frames after them come in one read; a large payload
    // goes straight to its place.
    const size_t want = size - got;
    const bool direct = want >= kReadChunk;
    if (!direct && in_ == nullptr) in_ = std::make_unique<char[]>(kReadChunk);
    char* into = direct ? out + got : in_.get();
    const size_t room = direct ? want : kReadChunk;
    ssize_t n = tls_ != nullptr ? tls_->Recv(into, room)
                                : recv(fd_, into, room, MSG_DONTWAIT);
    if (n == 0) {
      return Broken(absl::StrCat(address_, " closed the connection"));
    }
    if (n < 0) {
      blocked_ = errno == EAGAIN;
      if (errno == EINTR || errno == EAGAIN) continue;
      if (errno == EPROTO && tls_ != nullptr) {
        Broken(std::string(tls_->error().message())).IgnoreError();
        return tls_->error();
      }
      return Broken(
          absl::StrCat("connection to ", address_, " lost: ", strerror(errno)));
    }
    if (direct) {
      got += static_cast<size_t>(n);
      continue;
    }
    const size_t take = std::min(want, static_cast<size_t>(n));
    memcpy(out + got, in_.get(), take);
    got += take;
    in_begin_ = take;
    in_end_ = static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> BlockingChannel::Call(int method,
                                                  std::string_view payload,
                                                  int64_t timeout_ms) {
  shoal::MutexLock lock(&mu_);
  if (!broken_.empty()) return absl::UnavailableError(broken_);
  int64_t deadline = DeadlineUs(timeout_ms);
  uint64_t id = next_call_id_++;
  if (auto s = WriteFrame(kRequest, static_cast<uint32_t>(method), id, payload,
                          deadline);
      !s.ok()) {
    return s;
  }
  // Its reply cannot be here yet: wait for it rather than try a read first
  // (plain TCP only; a TLS session may hold bytes that poll does not see).
  if (tls_ == nullptr && in_begin_ == in_end_) blocked_ = true;
  while (true) {
    uint8_t kind = 0;
    uint32_t code = 0;
    uint64_t call_id = 0;
    auto reply = ReadFrame(&kind, &code, &call_id, deadline);
    if (!reply.ok()) return reply.status();
    if (kind == kError && call_id == 0) {
      return Broken(absl::StrCat(address_, " closed the connection: ", *reply));
    }
    if (call_id != id) continue;  // a reply to a call that timed out earlier
    if (kind == kResponse) return reply;
    if (kind == kError) {
      return ErrorFrameStatus(code, *reply);
    }
    return Broken(
        absl::StrCat("unexpected frame kind ", int{kind}, " from ", address_));
  }
}

absl::Status BlockingChannel::Send(int method, std::string_view payload) {
  shoal::MutexLock lock(&mu_);
  if (!broken_.empty()) return absl::UnavailableError(broken_);
  return WriteFrame(kRequest, static_cast<uint32_t>(method), next_call_id_++,
                    payload, DeadlineUs(10000));
}

absl::Status BlockingChannel::CallProto(
    int method, const google::protobuf::MessageLite& request,
    google::protobuf::MessageLite* reply, int64_t timeout_ms) {
  auto payload = Call(method, Serialize(request), timeout_ms);
  if (!payload.ok()) return payload.status();
  if (!ParseMessage(*payload, reply)) {
    return absl::DataLossError(
        absl::StrCat("malformed reply from ", address_, " to method ", method));
  }
  return absl::OkStatus();
}

}  // namespace shoal::rpc
