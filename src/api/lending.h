// Refs that travel inside task results, both ways, as the runtime uses them:
// those this process lends (its own objects, or borrowed ones passed on;
// lent_objects.h) and those it borrows (borrowed_objects.h), over a
// listener on this process's node. See docs/design/python.md, "Refs inside
// results".
//
// Threading: the methods marked "user threads" block on the loop and must
// not be called on it; the rest run on the loop.
#ifndef SHOAL_API_LENDING_H_
#define SHOAL_API_LENDING_H_

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "api/borrowed_objects.h"
#include "api/lent_objects.h"
#include "rpc/rpc.h"
#include "shoal/internal/runtime.h"
#include "shoal/shoal.pb.h"

namespace shoal::internal {

class ObjectIo;
class TaskPath;

class Lending {
 public:
  // Serves `path`'s process, whose objects are `objects` (and their bytes
  // `io`), presenting `token` as `peer_name`; the listener takes the host of
  // `agent_address` (this node's agent) unless SHOAL_NODE_IP names one.
  // REQUIRES: the pointers outlive this. Loop thread.
  Lending(rpc::EventLoop* loop, OwnedObjects* objects, ObjectIo* io,
          TaskPath* path, const std::string& token,
          const std::string& peer_name, const std::string& agent_address);

  // ---- User threads ----
  // CoreRuntime::Lend and Borrow.
  absl::StatusOr<std::string> Lend(const std::shared_ptr<RefHandle>& ref);
  absl::StatusOr<std::shared_ptr<RefHandle>> Borrow(const std::string& id,
                                                    const std::string& owner);
  // Cancels borrowed `id` through its owner.
  absl::StatusOr<bool> CancelBorrowed(const std::string& id, bool force,
                                      bool recursive);

  // ---- Loop ----
  // The refs the result `id` lent: borrowed, their exports taken over,
  // and kept with the result (TaskLifecycle::Hooks::borrowed).
  void BorrowFromResult(
      const std::string& id,
      const google::protobuf::RepeatedPtrField<proto::BorrowedRef>& refs);
  // Object `id` this process owns is no longer pending.
  void Settled(const std::string& id) { lent_.Settled(id); }
  // The last handle of borrowed `id` went.
  void Forgotten(const std::string& id,
                 const std::set<std::string>& copy_nodes) {
    borrowed_.Forgotten(id, copy_nodes);
  }
  // Shutdown: the handles lent, to drop off the loop.
  std::vector<std::shared_ptr<RefHandle>> Stop();

 private:
  rpc::EventLoop* const loop_;
  OwnedObjects* const objects_;
  ObjectIo* const io_;
  rpc::TcpChannelFactory channels_;
  BorrowedObjects borrowed_;
  LentObjects lent_;
};

}  // namespace shoal::internal

#endif  // SHOAL_API_LENDING_H_
