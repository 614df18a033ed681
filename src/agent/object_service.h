// The node agent's object store service: owns the node's shared-memory store
// and answers OBJECT_* requests from processes on the node. A client is a
// connection: when it closes, the objects it pinned are released and those
// it was still writing are aborted.
//
// It also moves objects between nodes: a TransferServer serves this node's
// objects to other nodes, and OBJECT_PULL makes a local (secondary) copy of
// an object held elsewhere, pulled on a background thread.
//
// Threading: runs on the agent's event loop; not thread-safe, except the
// TransferServer::ObjectPins methods, which any thread may call (they run
// their work on the loop and wait for it) and Shutdown().
#ifndef SHOAL_AGENT_OBJECT_SERVICE_H_
#define SHOAL_AGENT_OBJECT_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/status/statusor.h"
#include "object_plane/transfer_client.h"
#include "object_plane/transfer_server.h"
#include "object_store/object_store.h"
#include "rpc/rpc.h"

namespace shoal::proto {
class ObjectStoreInfo;
class ObjectPullRequest;
}  // namespace shoal::proto

namespace shoal::agent {

// Arenas are named shoal-node-<node id>-<agent pid>: removes those in `dir`
// whose agent died without removing its own (kill -9), so that their
// memory comes back. An agent does this as it starts, `shoal stop` as it
// ends.
void RemoveStaleArenas(const std::string& dir);

struct ObjectServiceOptions {
  // The arena is named after `name` (unique per node) and holds `capacity`
  // bytes; spilled objects go under `spill_dir`.
  std::string name;
  uint64_t capacity = 0;
  std::string spill_dir;
  // The agent's loop, where the service runs.
  rpc::EventLoop* loop = nullptr;
  // The transfer server listens on this address of the node; pullers must
  // present `token`.
  std::string node_ip = "127.0.0.1";
  std::string token;
  std::string node_id;  // names the node in LIST_OBJECTS
  // Tuning of pulls this node makes.
  object_plane::PullOptions pull;
};

class ObjectService : private object_plane::TransferServer::ObjectPins {
 public:
  // Called on the loop.
  static absl::StatusOr<std::unique_ptr<ObjectService>> Create(
      const ObjectServiceOptions& options);
  // REQUIRES: Shutdown() was called, or the loop has stopped.
  ~ObjectService() override;

  // Adds the OBJECT_* and LIST_OBJECTS handlers to `server`.
  void Register(rpc::Server* server);
  // A connection closed (the agent's disconnect callback calls this).
  void OnDisconnect(uint64_t connection_id);
  // Stops serving transfers, cancels the pulls in progress and joins every
  // thread. REQUIRES: called off the loop while the loop still runs.
  void Shutdown();

  void Describe(proto::ObjectStoreInfo* info) const;
  uint64_t capacity() const { return store_->capacity(); }
  uint64_t used_bytes() const;
  // host:port of the transfer server, for NodeInfo.object_transfer_address.
  const std::string& transfer_address() const { return transfer_->address(); }

 private:
  // The store's client id for copies the agent itself writes (pulls);
  // connections are numbered from 1, transfer connections below 0.
  static constexpr object_store::ClientId kAgentClient = 0;

  struct Pull {
    std::vector<rpc::Responder> waiters;
    std::shared_ptr<std::atomic<bool>> cancel;
    std::thread thread;
    bool deleted = false;  // by its owner, while being pulled
  };

  ObjectService(const ObjectServiceOptions& options,
                std::unique_ptr<object_store::ObjectStore> store);

  void StartPull(const proto::ObjectPullRequest& request, rpc::Responder resp);
  void FinishPull(const std::string& id, const absl::Status& status);

  // TransferServer::ObjectPins, called from transfer threads.
  absl::StatusOr<object_plane::TransferServer::PinnedObject> Pin(
      const std::string& id, int64_t client) override;
  void Unpin(const std::string& id, int64_t client) override;
  void UnpinAll(int64_t client) override;
  // The object is no longer owned by a connection (deleted).
  void ForgetOwned(const std::string& id);
  // Runs `fn` on the loop and waits for it.
  void OnLoop(const std::function<void()>& fn);

  const ObjectServiceOptions options_;
  std::unique_ptr<object_store::ObjectStore> store_;
  std::unique_ptr<object_plane::TransferServer> transfer_;
  std::unordered_map<std::string, Pull> pulls_;  // by object id
  // Objects whose creating connection owns them, both ways.
  std::unordered_map<uint64_t, std::unordered_set<std::string>> owned_;
  std::unordered_map<std::string, uint64_t> owner_of_;
  bool shut_down_ = false;
};

}  // namespace shoal::agent

#endif  // SHOAL_AGENT_OBJECT_SERVICE_H_
