// The node agent's object store service: owns the node's shared-memory store
// and answers OBJECT_* requests from processes on the node. A client is a
// connection: when it closes, the objects it pinned are released and those
// it was still writing are aborted.
//
// Threading: runs on the agent's event loop; not thread-safe.
#ifndef SHOAL_AGENT_OBJECT_SERVICE_H_
#define SHOAL_AGENT_OBJECT_SERVICE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "object_store/object_store.h"

namespace shoal::rpc {
class Server;
}
namespace shoal::proto {
class ObjectStoreInfo;
}

namespace shoal::agent {

class ObjectService {
 public:
  // An arena of `capacity` bytes named after `name` (unique per node), with
  // spilled objects under `spill_dir`.
  static absl::StatusOr<std::unique_ptr<ObjectService>> Create(
      const std::string& name, uint64_t capacity, const std::string& spill_dir);

  // Adds the OBJECT_* handlers to `server`.
  void Register(rpc::Server* server);
  // A connection closed (the agent's disconnect callback calls this).
  void OnDisconnect(uint64_t connection_id);

  void Describe(proto::ObjectStoreInfo* info) const;
  uint64_t capacity() const { return store_->capacity(); }
  uint64_t used_bytes() const;

 private:
  explicit ObjectService(std::unique_ptr<object_store::ObjectStore> store)
      : store_(std::move(store)) {}

  std::unique_ptr<object_store::ObjectStore> store_;
};

}  // namespace shoal::agent

#endif  // SHOAL_AGENT_OBJECT_SERVICE_H_
