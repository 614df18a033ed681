#include "api/lending.h"

#include <utility>

#include "api/object_io.h"
#include "api/owned_objects.h"
#include "api/task_error.h"
#include "api/task_path.h"
#include "common/environment.h"
#include "common/net.h"
#include "rpc/event_loop.h"
#include "shoal/shoal.pb.h"

namespace shoal::internal {

namespace {

// Where the listener for borrowers listens: the node's address.
std::string ListenHost(const std::string& agent_address) {
  std::string host = env::Get(env::Var::kNodeIp);
  if (host.empty()) host = agent_address.substr(0, agent_address.rfind(':'));
  if (host.empty()) host = PrimaryIpAddress();
  return host;
}

}  // namespace

Lending::Lending(rpc::EventLoop* loop, OwnedObjects* objects, ObjectIo* io,
                 TaskPath* path, const std::string& token,
                 const std::string& peer_name, const std::string& agent_address)
    : loop_(loop),
      objects_(objects),
      io_(io),
      channels_(loop, token, peer_name),
      borrowed_(objects, &channels_,
                [path](const std::string& id) { path->ObjectSettled(id); }),
      lent_(loop, objects,
            LentObjects::Options{
                .host = ListenHost(agent_address),
                .token = token,
                .cancel =
                    [path](const std::string& id, bool force, bool recursive) {
                      return path->Cancel(id, force, recursive);
                    },
                .lending = [path](bool lending) { path->TellLending(lending); },
            }) {}

absl::StatusOr<std::string> Lending::Lend(
    const std::shared_ptr<RefHandle>& ref) {
  if (ref == nullptr) {
    return TaskError(ErrorKind::kOther, "an empty ref cannot be lent");
  }
  if (objects_->IsBorrowed(ref->id())) {
    return rpc::RunOnLoopAndWait<absl::StatusOr<std::string>>(
        loop_, [&](rpc::LoopDone<absl::StatusOr<std::string>>::Type done) {
          borrowed_.Export(ref->id(), std::move(done));
        });
  }
  absl::StatusOr<std::string> owner;
  loop_->RunSync([&] { owner = lent_.Export(ref); });
  return owner;
}

absl::StatusOr<std::shared_ptr<RefHandle>> Lending::Borrow(
    const std::string& id, const std::string& owner) {
  // Most often held already: the result it came in keeps it.
  if (auto held = objects_->HandleFor(id); held.ok()) return held;
  proto::BorrowedRef ref;
  ref.set_object_id(id);
  ref.set_owner_address(owner);
  std::shared_ptr<RefHandle> handle;
  loop_->RunSync([&] { handle = borrowed_.Borrow(ref, 0); });
  return handle;
}

absl::StatusOr<bool> Lending::CancelBorrowed(const std::string& id, bool force,
                                             bool recursive) {
  return rpc::RunOnLoopAndWait<absl::StatusOr<bool>>(
      loop_, [&](rpc::LoopDone<absl::StatusOr<bool>>::Type done) {
        borrowed_.Cancel(id, force, recursive, std::move(done));
      });
}

void Lending::BorrowFromResult(
    const std::string& id,
    const google::protobuf::RepeatedPtrField<proto::BorrowedRef>& refs) {
  std::vector<std::shared_ptr<RefHandle>> held;
  held.reserve(refs.size());
  for (const proto::BorrowedRef& ref : refs) {
    held.push_back(borrowed_.Borrow(ref, /*exports_taken=*/1));
  }
  // Unless the result was forgotten already.
  if (objects_->Peek(id, nullptr, nullptr) != OwnedObjects::State::kUnknown) {
    io_->KeepContained(id, std::move(held));
  }
}

std::vector<std::shared_ptr<RefHandle>> Lending::Stop() {
  borrowed_.Stop();
  return lent_.Stop();
}

}  // namespace shoal::internal
