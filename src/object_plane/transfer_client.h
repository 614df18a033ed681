// Pulling an object's bytes from the nodes that hold it (the client end of
// the object-transfer protocol, transfer_codec.h) into memory the caller
// owns: a secondary copy in a node agent's own arena, or a driver's heap
// when its host has no agent.
#ifndef SHOAL_OBJECT_PLANE_TRANSFER_CLIENT_H_
#define SHOAL_OBJECT_PLANE_TRANSFER_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace shoal::rpc {
class TlsContext;
}

namespace shoal::object_plane {

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

}  // namespace shoal::object_plane

#endif  // SHOAL_OBJECT_PLANE_TRANSFER_CLIENT_H_
