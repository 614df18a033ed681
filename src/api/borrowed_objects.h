// The borrower's side of refs that travel inside task results: objects
// that another process owns (lent_objects.h) and this one reads. Each is an
// entry of this process's object table (owned_objects.h), pending until its
// owner answers WAIT_OWNED_OBJECT, so that get, wait and the tasks that take
// it as an argument treat it as any other object. The owner keeps it while
// this process holds a handle; the last handle's release tells it so. An
// owner that cannot be reached fails the object as lost.
//
// Threading: the runtime's loop thread only.
#ifndef SHOAL_API_BORROWED_OBJECTS_H_
#define SHOAL_API_BORROWED_OBJECTS_H_

#include <functional>
#include <memory>
#include <set>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "shoal/internal/runtime.h"

namespace shoal::proto {
class BorrowedRef;
}
namespace shoal::rpc {
class Channel;
class ChannelFactory;
}  // namespace shoal::rpc
namespace shoal::internal {

class OwnedObjects;

class BorrowedObjects {
 public:
  // `settled(id)`: borrowed `id` is no longer pending (the tasks that take
  // it go on).
  // REQUIRES: `objects` and `channels` outlive this.
  BorrowedObjects(OwnedObjects* objects, rpc::ChannelFactory* channels,
                  std::function<void(const std::string& id)> settled);
  ~BorrowedObjects();
  BorrowedObjects(const BorrowedObjects&) = delete;
  BorrowedObjects& operator=(const BorrowedObjects&) = delete;

  // A handle of the object `ref` names: this process's own handle when it
  // references the object already, else a new borrow from its owner, who
  // hears that this process takes over `exports_taken` of its exports
  // (those the result it came in counted).
  std::shared_ptr<RefHandle> Borrow(const proto::BorrowedRef& ref,
                                    int exports_taken);
  // The owner's address of borrowed `id`; "" when it is not borrowed.
  std::string OwnerOf(const std::string& id) const;

  // The last handle of borrowed `id` went: its owner may free it (and the
  // copies this process pulled to `copy_nodes`).
  void Forgotten(const std::string& id,
                 const std::set<std::string>& copy_nodes);
  // Asks the owner to cancel the task that makes `id`.
  void Cancel(const std::string& id, bool force, bool recursive,
              std::function<void(absl::StatusOr<bool>)> done);
  // `id` goes into a result of this process: its owner keeps it for the
  // borrower that will read it. `done` gets the owner's address.
  void Export(const std::string& id,
              std::function<void(absl::StatusOr<std::string>)> done);

  // Shutdown: forgets every owner (their borrows end with the connections).
  void Stop();

 private:
  rpc::Channel* OwnerChannel(const std::string& address);
  // The owner answered WAIT_OWNED_OBJECT for `id` (or could not be asked).
  void Settle(const std::string& id, const std::string& owner,
              absl::StatusOr<std::string> reply);

  OwnedObjects* const objects_;
  rpc::ChannelFactory* const channels_;
  const std::function<void(const std::string&)> settled_;
  absl::flat_hash_map<std::string, std::string> owner_of_;  // id -> address
  absl::flat_hash_map<std::string, std::unique_ptr<rpc::Channel>> owners_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace shoal::internal

#endif  // SHOAL_API_BORROWED_OBJECTS_H_
