// The owner's side of refs that travel inside task results: a process
// (a worker, in practice) that returns refs it owns, or holds, without
// waiting for them lends them to whoever reads the result. This keeps each
// lent object alive while it is exported (inside a result nobody took yet)
// or borrowed (a connection to this process's listener read it), and
// answers the borrowers on a listener of its own, started on the first
// lend:
//  - WAIT_OWNED_OBJECT: once the object is not pending, its value (or where
//    it is stored) or its error; the asking connection borrows it until it
//    says BORROW_RELEASE or closes;
//  - BORROW_EXPORT: a borrower puts the ref into a result of its own;
//  - CANCEL_OWNED: cancels the task that makes it (the owner's cancel).
// See docs/design/python.md, "Refs inside results".
//
// Threading: the runtime's loop thread only.
#ifndef SHOAL_API_LENT_OBJECTS_H_
#define SHOAL_API_LENT_OBJECTS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "shoal/internal/runtime.h"

namespace shoal::proto {
class BorrowRequest;
class OwnedObjectState;
}  // namespace shoal::proto

namespace shoal::rpc {
class EventLoop;
class Responder;
class Server;
}  // namespace shoal::rpc

namespace shoal::internal {

class OwnedObjects;

// What a borrower reads of an object: its value, where it is stored, or its
// error; `found` false when `objects` holds no such object.
proto::OwnedObjectState DescribeObject(const OwnedObjects& objects,
                                       const std::string& id, bool* found,
                                       bool* pending);
// The object's error as the owner held it, from its description.
absl::Status ErrorOf(const proto::OwnedObjectState& state);

class LentObjects {
 public:
  struct Options {
    std::string host;  // the listener's address, reachable by other nodes
    std::string token;
    // Cancels the task whose result is `id` (the owner's own cancel).
    std::function<absl::StatusOr<bool>(const std::string& id, bool force,
                                       bool recursive)>
        cancel;
    // Told with true when this process starts lending objects, and with
    // false when it lends none any more (a worker asks its agent to keep it
    // meanwhile, as an idle worker that owns borrowed objects).
    std::function<void(bool lending)> lending;
  };

  // REQUIRES: `loop` and `objects` outlive this.
  LentObjects(rpc::EventLoop* loop, OwnedObjects* objects, Options options);
  ~LentObjects();
  LentObjects(const LentObjects&) = delete;
  LentObjects& operator=(const LentObjects&) = delete;

  // `handle`'s object goes into a result: kept until a borrower takes it.
  // Returns the listener's host:port (started on the first call).
  absl::StatusOr<std::string> Export(std::shared_ptr<RefHandle> handle);
  // `id` is no longer pending: its waiting borrowers hear how it ended.
  void Settled(const std::string& id);
  // Stops the listener; returns the handles held, to drop off the loop.
  std::vector<std::shared_ptr<RefHandle>> Stop();

  size_t lent() const { return lent_.size(); }
  const std::string& address() const { return address_; }

 private:
  struct Lent {
    std::shared_ptr<RefHandle> handle;
    int exports = 0;               // in results no borrower took yet
    std::set<uint64_t> borrowers;  // their connections
    std::vector<rpc::Responder> waiters;
  };
  using Table = absl::flat_hash_map<std::string, Lent>;

  absl::Status Listen();
  // The entry of `id`, made for an object this process still holds; null
  // when it holds none.
  Lent* Find(const std::string& id);
  void Wait(const proto::BorrowRequest& request, const rpc::Responder& r);
  void Release(const proto::BorrowRequest& request, const rpc::Responder& r);
  void AddExport(const proto::BorrowRequest& request, const rpc::Responder& r);
  void Cancel(const proto::BorrowRequest& request, const rpc::Responder& r);
  // Replies to `r` with the state of `id`; false while it is pending.
  bool Answer(const std::string& id, const rpc::Responder& r);
  void Disconnected(uint64_t connection);
  // Drops `id`'s entry once nothing holds it.
  void DropIfUnused(const std::string& id);
  void SetLending();

  rpc::EventLoop* const loop_;
  OwnedObjects* const objects_;
  const Options options_;
  std::unique_ptr<rpc::Server> server_;
  std::string address_;
  Table lent_;
  bool lending_ = false;  // as options_.lending was last told
};

}  // namespace shoal::internal

#endif  // SHOAL_API_LENT_OBJECTS_H_
