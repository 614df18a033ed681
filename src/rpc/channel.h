// A client's connection to one peer, as callers of an RPC see it: calls with
// callbacks, a deadline per call, and word of a lost connection. The real one
// is TcpChannel (rpc/rpc.h: framed protobuf over TCP, or TLS); tests use the
// in-memory one of rpc/fake_channel.h.
//
// Threading: a channel lives on one loop; all its methods must be called on
// that loop's thread, and callbacks run there, never inside Call itself.
#ifndef SHOAL_RPC_CHANNEL_H_
#define SHOAL_RPC_CHANNEL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shoal::rpc {

class Channel {
 public:
  using Callback = std::function<void(absl::StatusOr<std::string> payload)>;

  virtual ~Channel() = default;

  // Sends request `payload` for `method`; `callback` gets the reply's
  // payload or why there is none: Unavailable when the connection is lost
  // (with NeverSent() true when the request was never written), the
  // peer's error, or DeadlineExceeded once `timeout_ms` (> 0) have passed.
  // timeout_ms <= 0: no deadline (the call still fails if the connection
  // is lost).
  virtual void Call(int method, std::string payload, Callback callback,
                    int64_t timeout_ms) = 0;
  void Call(int method, std::string payload, Callback callback) {
    Call(method, std::move(payload), std::move(callback), 0);
  }
  // Called each time an established connection is lost.
  virtual void OnDisconnect(
      std::function<void(const absl::Status&)> callback) = 0;
  virtual const std::string& address() const = 0;
  virtual bool connected() const = 0;
  virtual size_t pending_calls() const = 0;
  // Closes the connection; pending calls fail (Unavailable). The next call
  // connects again.
  virtual void Close() = 0;
};

// Makes channels to addresses: the seam through which a manager reaches its
// peers (TcpChannelFactory in rpc/rpc.h, FakeNetwork in tests).
class ChannelFactory {
 public:
  virtual ~ChannelFactory() = default;
  // A channel to `address`; it connects on its first call.
  virtual std::unique_ptr<Channel> Connect(const std::string& address) = 0;
};

}  // namespace shoal::rpc

#endif  // SHOAL_RPC_CHANNEL_H_
