#include "api/borrowed_objects.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "api/lent_objects.h"
#include "api/owned_objects.h"
#include "api/task_error.h"
#include "rpc/rpc.h"
#include "shoal/shoal.pb.h"

namespace shoal::internal {

namespace {
// How long a release or an export waits for the owner's answer.
constexpr int64_t kOwnerCallMs = 10000;
}  // namespace

BorrowedObjects::BorrowedObjects(
    OwnedObjects* objects, rpc::ChannelFactory* channels,
    std::function<void(const std::string& id)> settled)
    : objects_(objects), channels_(channels), settled_(std::move(settled)) {}

BorrowedObjects::~BorrowedObjects() { *alive_ = false; }

rpc::Channel* BorrowedObjects::OwnerChannel(const std::string& address) {
  std::unique_ptr<rpc::Channel>& channel = owners_[address];
  if (channel == nullptr) channel = channels_->Connect(address);
  return channel.get();
}

std::shared_ptr<RefHandle> BorrowedObjects::Borrow(
    const proto::BorrowedRef& ref, int exports_taken) {
  const std::string& id = ref.object_id();
  const std::string& owner = ref.owner_address();
  proto::BorrowRequest request;
  request.set_object_id(id);
  request.set_exports_taken(exports_taken);
  if (absl::StatusOr<std::shared_ptr<RefHandle>> held = objects_->HandleFor(id);
      held.ok()) {
    // Held here already (owned, or borrowed before): the owner drops the
    // exports this result counted.
    if (exports_taken > 0) {
      rpc::CallProto<proto::Empty>(
          OwnerChannel(owner), proto::BORROW_RELEASE, request,
          [](absl::StatusOr<proto::Empty>) {}, kOwnerCallMs);
    }
    return *held;
  }
  objects_->AddBorrowed(id);
  std::shared_ptr<RefHandle> handle = objects_->NewHandle(id);
  owner_of_[id] = owner;
  // A long poll: the owner answers once the object is made, however long
  // its task runs.
  OwnerChannel(owner)->Call(
      proto::WAIT_OWNED_OBJECT, rpc::Serialize(request),
      [this, alive = alive_, id, owner](absl::StatusOr<std::string> reply) {
        if (*alive) Settle(id, owner, std::move(reply));
      },
      /*timeout_ms=*/0);
  return handle;
}

void BorrowedObjects::Settle(const std::string& id, const std::string& owner,
                             absl::StatusOr<std::string> reply) {
  proto::OwnedObjectState state;
  if (!reply.ok()) {
    const bool gone = reply.status().code() == absl::StatusCode::kNotFound;
    objects_->Fail(
        id,
        TaskError(ErrorKind::kObjectLost,
                  absl::StrCat(
                      "object ", id, " is lost: ",
                      gone ? reply.status().message()
                           : absl::StrCat("its owner (the process at ", owner,
                                          " that made it) cannot be "
                                          "reached; it has ended? (",
                                          reply.status().message(), ")"))));
  } else if (!rpc::ParseMessage(*reply, &state)) {
    objects_->Fail(id,
                   TaskError(ErrorKind::kObjectLost,
                             absl::StrCat("object ", id, "'s owner at ", owner,
                                          " sent a malformed reply")));
  } else if (!state.ready()) {
    objects_->Fail(id, ErrorOf(state));
  } else {
    proto::TaskResult result;
    if (state.is_stored()) {
      *result.mutable_stored() = std::move(*state.mutable_stored());
    } else {
      result.set_value(std::move(*state.mutable_value()));
    }
    objects_->Complete(id, &result);
  }
  settled_(id);
}

std::string BorrowedObjects::OwnerOf(const std::string& id) const {
  auto it = owner_of_.find(id);
  return it == owner_of_.end() ? std::string() : it->second;
}

void BorrowedObjects::Forgotten(const std::string& id,
                                const std::set<std::string>& copy_nodes) {
  auto it = owner_of_.find(id);
  if (it == owner_of_.end()) return;
  const std::string owner = std::move(it->second);
  owner_of_.erase(it);
  proto::BorrowRequest request;
  request.set_object_id(id);
  for (const std::string& node : copy_nodes) {
    request.add_copies()->set_node_id(node);
  }
  rpc::CallProto<proto::Empty>(
      OwnerChannel(owner), proto::BORROW_RELEASE, request,
      [](absl::StatusOr<proto::Empty>) {}, kOwnerCallMs);
}

void BorrowedObjects::Cancel(const std::string& id, bool force, bool recursive,
                             std::function<void(absl::StatusOr<bool>)> done) {
  const std::string owner = OwnerOf(id);
  proto::BorrowRequest request;
  request.set_object_id(id);
  request.set_force(force);
  request.set_recursive(recursive);
  rpc::CallProto<proto::CancelOwnedReply>(
      OwnerChannel(owner), proto::CANCEL_OWNED, request,
      [done = std::move(done),
       owner](absl::StatusOr<proto::CancelOwnedReply> reply) {
        if (!reply.ok()) {
          return done(TaskError(
              ErrorKind::kOther,
              absl::StrCat(
                  "the owner of the object (the process at ", owner,
                  ") did not cancel its task: ", reply.status().message())));
        }
        done(reply->cancelled());
      },
      kOwnerCallMs);
}

void BorrowedObjects::Export(
    const std::string& id,
    std::function<void(absl::StatusOr<std::string>)> done) {
  const std::string owner = OwnerOf(id);
  proto::BorrowRequest request;
  request.set_object_id(id);
  rpc::CallProto<proto::Empty>(
      OwnerChannel(owner), proto::BORROW_EXPORT, request,
      [done = std::move(done), owner](absl::StatusOr<proto::Empty> reply) {
        if (!reply.ok()) return done(reply.status());
        done(owner);
      },
      kOwnerCallMs);
}

void BorrowedObjects::Stop() {
  *alive_ = false;
  for (auto& [address, channel] : owners_) channel->Close();
  owners_.clear();
  owner_of_.clear();
}

}  // namespace shoal::internal
