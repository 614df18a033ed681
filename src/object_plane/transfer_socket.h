// Blocking socket IO shared by both ends of the object-transfer protocol
// (transfer_codec.h): whole reads and writes over a connection, plain or
// inside TLS, that give up on a stop flag, an idle time or a deadline.
// Internal to object_plane/.
//
// Threading: a Link is used by one thread at a time.
#ifndef SHOAL_OBJECT_PLANE_TRANSFER_SOCKET_H_
#define SHOAL_OBJECT_PLANE_TRANSFER_SOCKET_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "object_plane/transfer_codec.h"

struct iovec;

namespace shoal::rpc {
class TlsStream;
}

namespace shoal::object_plane {

// Blocking socket calls wake up this often to look at stop flags.
inline constexpr int kPollMs = 200;
inline constexpr int64_t kHandshakeTimeoutUs = 5'000'000;

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
absl::Status CheckLimits(const IoLimits& limits, int64_t last_progress_us);

// TCP_NODELAY, kPollMs send and receive timeouts, and SO_RCVBUF (`receive`)
// or SO_SNDBUF of `buffer_bytes` when it is above 0.
void SetSocketOptions(int fd, int buffer_bytes, bool receive);

// One end of a transfer connection: a connected socket and, with TLS, its
// session, which every read and write then goes through. Closes the socket.
struct Link {
  explicit Link(int fd);
  ~Link();
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  const int fd;
  std::unique_ptr<rpc::TlsStream> tls;  // null: plain TCP
};

// Receives exactly `n` bytes. Unavailable when the peer closed or reset the
// connection.
absl::Status RecvAll(Link& link, void* buf, size_t n, const IoLimits& limits);
// Sends every byte of `iov` (modified as it goes).
absl::Status SendAll(Link& link, iovec* iov, int count, const IoLimits& limits);
absl::Status SendBytes(Link& link, const void* data, size_t n,
                       const IoLimits& limits);
// Runs the TLS handshake on a blocking socket whose calls time out (the
// limits are looked at between tries). REQUIRES: link.tls is set.
absl::Status TlsHandshake(Link& link, const IoLimits& limits);

// A reply whose payload is `message`.
absl::Status SendReply(Link& link, WireStatus status, uint64_t object_size,
                       const std::string& message, const IoLimits& limits);
absl::StatusOr<ReplyHeader> RecvReplyHeader(Link& link, const IoLimits& limits);
// The message that follows a reply that is not kOk; DataLoss when it is too
// long to be one.
absl::StatusOr<std::string> RecvMessage(Link& link, const ReplyHeader& reply,
                                        const IoLimits& limits);

}  // namespace shoal::object_plane

#endif  // SHOAL_OBJECT_PLANE_TRANSFER_SOCKET_H_
