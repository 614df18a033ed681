// Moving objects' bytes between nodes: each node agent with an object store
// runs a TransferServer that serves ranges of its sealed objects straight
// from the mapped arena, and PullObject fetches an object from such servers
// into memory the caller owns (a secondary copy in the agent's own arena, or
// a driver's heap when its host has no agent).
//
// Wire protocol (TCP, inside TLS when the process has TLS on (rpc/tls.h),
// integers little endian, one request at a time per connection):
//   hello    client -> server: "SHXF", u32 token length, token bytes.
//            server -> client: a reply header (kOk, or kBadToken and then
//            the server closes the connection).
//   request  client -> server: u32 id length, u64 offset, u64 length,
//            id bytes.
//   reply    server -> client: u32 status, u64 object size (data plus
//            metadata), u64 payload length, then the payload: the object's
//            bytes [offset, offset + length) when kOk, else a message.
// The server pins the object for the transfer connection while its bytes
// are being sent, so that it is neither freed nor evicted meanwhile.
#ifndef SHOAL_AGENT_OBJECT_TRANSFER_H_
#define SHOAL_AGENT_OBJECT_TRANSFER_H_

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shoal::rpc {
class TlsContext;
}

namespace shoal::agent {

// A node that may hold a copy of the object.
struct TransferSource {
  std::string node_id;
  std::string address;  // host:port of the node's TransferServer
};

struct PullOptions {
  // Bytes per request; several requests are in flight at once.
  // 4 MiB measured faster than 16 or 64 MiB on loopback (cache-sized).
  uint64_t chunk_bytes = 4 << 20;
  // Connections to a source, each pulling the next missing chunk.
  int connections = 4;
  // The whole pull, all sources included.
  int64_t timeout_ms = 60000;
  // A source that sends nothing for this long is treated as dead.
  int64_t io_timeout_ms = 10000;
  // SO_RCVBUF of the pulling sockets; 0 leaves the kernel's autotuning.
  int socket_buffer_bytes = 0;
  // Faults the destination's pages in (MADV_POPULATE_WRITE) a chunk ahead
  // of receiving into them: cheaper than a fault per page inside recv().
  bool populate_destination = true;
  // When it becomes true (set by another thread) the pull stops within
  // about 200 ms and returns Cancelled.
  const std::atomic<bool>* cancel = nullptr;
  // This node's own TransferServer address: sources there are skipped.
  std::string self_address;
  // The TLS of the connections: unset, this process's (rpc::ProcessTls);
  // null, plain TCP.
  std::optional<std::shared_ptr<const rpc::TlsContext>> tls;
};

// Fetches the `size` bytes of object `id` (its data then its metadata) into
// `dest`, trying `sources` in order. Chunks are received straight into
// `dest` over several connections; when a source fails mid-way only the
// chunks still missing are fetched from the next one. A source that has
// not sealed its copy yet is tried again until the timeout.
// Errors: DataLoss when no source could supply the object (the message
// names the object and says, for each node tried, why it could not);
// Cancelled; InvalidArgument for an empty id.
// REQUIRES: `dest` has `size` writable bytes. Thread-safe (uses only its
// arguments); blocks until done.
absl::Status PullObject(const std::string& id, uint8_t* dest, uint64_t size,
                        const std::vector<TransferSource>& sources,
                        const std::string& token,
                        const PullOptions& options = {});

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
  // Joins the threads of connections that ended.
  void Reap() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int listen_fd_;
  const std::string address_;
  const std::string token_;
  const std::shared_ptr<const rpc::TlsContext> tls_;  // null: plain TCP
  ObjectPins* const pins_;
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;

  std::mutex mu_;
  std::list<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  int64_t next_client_ ABSL_GUARDED_BY(mu_) = -1;
};

}  // namespace shoal::agent

#endif  // SHOAL_AGENT_OBJECT_TRANSFER_H_
