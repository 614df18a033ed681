// A synchronous client connection speaking the same frames as rpc::Channel,
// for threads that must not wait on an event loop: a worker runs its task on
// the loop thread, and a driver's Put/Get of store objects is one round trip
// on the caller's own thread instead of two thread hops.
//
// Threading: thread-safe; calls on one channel are serialized.
#ifndef SHOAL_RPC_BLOCKING_CHANNEL_H_
#define SHOAL_RPC_BLOCKING_CHANNEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"

namespace google::protobuf {
class MessageLite;
}

namespace shoal::rpc {

class TlsContext;
class TlsStream;

class BlockingChannel {
 public:
  // Connects to host:port and authenticates with `token`, over this
  // process's TLS (ProcessTls) or the overload's `tls` (null: plain TCP).
  // Errors name the address; a refused token is PermissionDenied, a failed
  // TLS handshake Unauthenticated.
  static absl::StatusOr<std::unique_ptr<BlockingChannel>> Connect(
      const std::string& address, const std::string& token,
      const std::string& peer_name, int64_t timeout_ms = 10000);
  static absl::StatusOr<std::unique_ptr<BlockingChannel>> Connect(
      const std::string& address, const std::string& token,
      const std::string& peer_name, int64_t timeout_ms,
      std::shared_ptr<const TlsContext> tls);
  ~BlockingChannel();
  BlockingChannel(const BlockingChannel&) = delete;
  BlockingChannel& operator=(const BlockingChannel&) = delete;

  // One request and its reply. timeout_ms <= 0: no deadline. After an I/O
  // error or a timeout the channel is broken and every later call fails
  // with Unavailable.
  absl::StatusOr<std::string> Call(int method, std::string_view payload,
                                   int64_t timeout_ms = 0);
  // Sends a request without waiting for its reply (read and dropped by a
  // later Call). For requests whose outcome the caller would ignore anyway.
  absl::Status Send(int method, std::string_view payload);
  absl::Status CallProto(int method,
                         const google::protobuf::MessageLite& request,
                         google::protobuf::MessageLite* reply,
                         int64_t timeout_ms = 0);
  const std::string& address() const { return address_; }

 private:
  BlockingChannel(int fd, std::string address);
  absl::Status Handshake(int64_t deadline_us)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits until the socket (or the TLS session) can move data.
  bool Wait(short events, int64_t deadline_us)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WriteFrame(uint8_t kind, uint32_t method, uint64_t call_id,
                          std::string_view payload, int64_t deadline_us)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads one frame; its kind, method and call id into the out-parameters.
  absl::StatusOr<std::string> ReadFrame(uint8_t* kind, uint32_t* method,
                                        uint64_t* call_id, int64_t deadline_us)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads exactly `size` bytes into `out`.
  absl::Status ReadExact(char* out, size_t size, int64_t deadline_us)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Broken(const std::string& what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  shoal::Mutex mu_;
  const int fd_;  // set once, by the constructor
  std::unique_ptr<TlsStream> tls_ ABSL_GUARDED_BY(mu_);  // null: plain TCP
  // The last read or write (or TLS call) could not go on: Wait polls.
  bool blocked_ ABSL_GUARDED_BY(mu_) = false;
  // Bytes read past the frames taken so far: in_[in_begin_, in_end_).
  std::unique_ptr<char[]> in_ ABSL_GUARDED_BY(mu_);
  size_t in_begin_ ABSL_GUARDED_BY(mu_) = 0;
  size_t in_end_ ABSL_GUARDED_BY(mu_) = 0;
  const std::string address_;
  uint64_t next_call_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Why the connection is unusable, once it is.
  std::string broken_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shoal::rpc

#endif  // SHOAL_RPC_BLOCKING_CHANNEL_H_
