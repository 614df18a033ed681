// Serving the bytes of a node's sealed objects to the nodes that pull them
// (the server end of the object-transfer protocol, transfer_codec.h; the
// pulling end is transfer_client.h). The server pins the object for the
// transfer connection while its bytes are being sent, so that it is
// neither freed nor evicted meanwhile.
#ifndef SHOAL_OBJECT_PLANE_TRANSFER_SERVER_H_
#define SHOAL_OBJECT_PLANE_TRANSFER_SERVER_H_

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"

namespace shoal::rpc {
class TlsContext;
}

namespace shoal::object_plane {

struct IoLimits;
struct Link;

// Serves the bytes of this node's sealed objects to pulling nodes: a
// listening thread and one thread per connection (pullers open a handful).
// A connection whose first message lacks the cluster token is logged and
// closed.
//
// Threading: Create, address() and Shutdown() may be called from any
// thread; the ObjectPins are called from the connection threads.
class TransferServer {
 public:
  struct PinnedObject {
    const uint8_t* data = nullptr;  // data then metadata, in the arena
    uint64_t size = 0;
  };
  // The object store as the server sees it. Implementations must be
  // thread-safe (the agent runs each call on its event loop and waits).
  class ObjectPins {
   public:
    virtual ~ObjectPins() = default;
    // Pins a sealed object for `client`. NotFound when the node does not
    // hold it; Unavailable while it is still being written.
    virtual absl::StatusOr<PinnedObject> Pin(const std::string& id,
                                             int64_t client) = 0;
    virtual void Unpin(const std::string& id, int64_t client) = 0;
    // The connection `client` closed: drops whatever it still pins.
    virtual void UnpinAll(int64_t client) = 0;
  };

  // Listens on host:<ephemeral port>. Each connection pins as its own
  // client, numbered -1, -2, ... (negative, so never a local process).
  // REQUIRES: `pins` outlives the server.
  // Connections use this process's TLS (rpc::ProcessTls), or the
  // overload's `tls` (null: plain TCP).
  static absl::StatusOr<std::unique_ptr<TransferServer>> Create(
      const std::string& host, std::string token, ObjectPins* pins);
  static absl::StatusOr<std::unique_ptr<TransferServer>> Create(
      const std::string& host, std::string token, ObjectPins* pins,
      std::shared_ptr<const rpc::TlsContext> tls);
  ~TransferServer();

  TransferServer(const TransferServer&) = delete;
  TransferServer& operator=(const TransferServer&) = delete;

  // host:port to put in NodeInfo.object_transfer_address.
  const std::string& address() const { return address_; }
  // Stops accepting, ends every connection and joins the threads (within
  // about 200 ms plus one pin call). Idempotent.
  void Shutdown();

 private:
  struct Connection {
    std::thread thread;
    std::atomic<bool> done{false};
  };

  TransferServer(int listen_fd, std::string address, std::string token,
                 std::shared_ptr<const rpc::TlsContext> tls, ObjectPins* pins);
  void AcceptLoop();
  void Serve(int fd, const std::string& peer, int64_t client);
  // Reads the puller's hello; false (logged, the puller told) when it
  // lacks the cluster token.
  bool Authenticate(Link& link, const std::string& peer,
                    const IoLimits& handshake);
  // Answers requests until the puller closes the connection or breaks the
  // protocol, then drops what the connection still pins.
  void ServeRequests(Link& link, int64_t client);
  // Sends bytes [offset, offset + length) of object `id`, or why not.
  absl::Status SendRange(Link& link, const std::string& id, uint64_t offset,
                         uint64_t length, int64_t client,
                         const IoLimits& limits);
  // Joins the threads of connections that ended.
  void Reap() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int listen_fd_;
  const std::string address_;
  const std::string token_;
  const std::shared_ptr<const rpc::TlsContext> tls_;  // null: plain TCP
  ObjectPins* const pins_;
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;

  shoal::Mutex mu_;
  std::list<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  int64_t next_client_ ABSL_GUARDED_BY(mu_) = -1;
};

}  // namespace shoal::object_plane

#endif  // SHOAL_OBJECT_PLANE_TRANSFER_SERVER_H_
