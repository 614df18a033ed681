#include "object_plane/transfer_socket.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "rpc/tls.h"

namespace shoal::object_plane {
namespace {

// What a failed socket call (errno) means, for the helpers below.
absl::Status LinkError(const Link& link) {
  if (errno == EPROTO && link.tls != nullptr) return link.tls->error();
  return absl::UnavailableError(strerror(errno));
}

}  // namespace

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

Link::Link(int fd) : fd(fd) {}

Link::~Link() {
  tls.reset();
  close(fd);
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
  EncodeReplyHeader({status, object_size, message.size()}, header);
  iovec iov[2] = {{header, sizeof(header)},
                  {const_cast<char*>(message.data()), message.size()}};
  return SendAll(link, iov, 2, limits);
}

absl::StatusOr<ReplyHeader> RecvReplyHeader(Link& link,
                                            const IoLimits& limits) {
  uint8_t header[kReplyHeaderSize];
  if (absl::Status s = RecvAll(link, header, sizeof(header), limits); !s.ok()) {
    return s;
  }
  return DecodeReply(header);
}

// The message that follows a reply that is not kOk.
absl::StatusOr<std::string> RecvMessage(Link& link, const ReplyHeader& reply,
                                        const IoLimits& limits) {
  if (!ReplyMessageFits(reply)) {
    return absl::DataLossError("a reply message too long to be one");
  }
  std::string message(reply.length, '\0');
  if (absl::Status s = RecvAll(link, message.data(), message.size(), limits);
      !s.ok()) {
    return s;
  }
  return message;
}

}  // namespace shoal::object_plane
