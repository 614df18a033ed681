#include "api/lent_objects.h"

#include <algorithm>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "api/owned_objects.h"
#include "common/logging.h"
#include "rpc/rpc.h"
#include "shoal/shoal.pb.h"

namespace shoal::internal {

proto::OwnedObjectState DescribeObject(const OwnedObjects& objects,
                                       const std::string& id, bool* found,
                                       bool* pending) {
  proto::OwnedObjectState state;
  OwnedObjects::Ready ready;
  absl::Status error;
  OwnedObjects::State now = objects.Peek(id, &ready, &error);
  *found = now != OwnedObjects::State::kUnknown;
  *pending = now == OwnedObjects::State::kPending;
  if (now == OwnedObjects::State::kReady) {
    state.set_ready(true);
    if (ready.stored) {
      state.set_is_stored(true);
      *state.mutable_stored() = std::move(ready.stored_object);
    } else if (ready.value != nullptr) {
      state.set_value(*ready.value);
    }
  } else if (now == OwnedObjects::State::kFailed) {
    state.set_error_code(static_cast<int>(error.code()));
    state.set_error_message(std::string(error.message()));
    error.ForEachPayload([&](absl::string_view url, const absl::Cord& value) {
      proto::StatusPayload* p = state.add_error_payloads();
      p->set_type_url(std::string(url));
      p->set_value(std::string(value));
    });
  }
  return state;
}

absl::Status ErrorOf(const proto::OwnedObjectState& state) {
  absl::StatusCode code = static_cast<absl::StatusCode>(state.error_code());
  if (code == absl::StatusCode::kOk) code = absl::StatusCode::kUnknown;
  absl::Status error(code, state.error_message());
  for (const proto::StatusPayload& p : state.error_payloads()) {
    error.SetPayload(p.type_url(), absl::Cord(p.value()));
  }
  return error;
}

namespace {
absl::Status NoSuchObject(const std::string& id) {
  return absl::NotFoundError(
      absl::StrCat("its owner holds no object ", id, " any more"));
}
}  // namespace

LentObjects::LentObjects(rpc::EventLoop* loop, OwnedObjects* objects,
                         Options options)
    : loop_(loop), objects_(objects), options_(std::move(options)) {}

LentObjects::~LentObjects() = default;

absl::Status LentObjects::Listen() {
  if (server_ != nullptr) return absl::OkStatus();
  auto server = rpc::Server::Create(loop_, options_.host, 0, options_.token);
  if (!server.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for the borrowers of this process's "
                     "objects on ",
                     options_.host, ": ", server.status().message()));
  }
  server_ = std::move(*server);
  rpc::RegisterProto<proto::BorrowRequest>(
      server_.get(), proto::WAIT_OWNED_OBJECT,
      [this](const proto::BorrowRequest& q, rpc::Responder r) { Wait(q, r); });
  rpc::RegisterProto<proto::BorrowRequest>(
      server_.get(), proto::BORROW_RELEASE,
      [this](const proto::BorrowRequest& q, rpc::Responder r) {
        Release(q, r);
      });
  rpc::RegisterProto<proto::BorrowRequest>(
      server_.get(), proto::BORROW_EXPORT,
      [this](const proto::BorrowRequest& q, rpc::Responder r) {
        AddExport(q, r);
      });
  rpc::RegisterProto<proto::BorrowRequest>(
      server_.get(), proto::CANCEL_OWNED,
      [this](const proto::BorrowRequest& q, rpc::Responder r) {
        Cancel(q, r);
      });
  server_->OnDisconnect([this](uint64_t conn) { Disconnected(conn); });
  address_ = absl::StrCat(options_.host, ":", server_->port());
  return absl::OkStatus();
}

absl::StatusOr<std::string> LentObjects::Export(
    std::shared_ptr<RefHandle> handle) {
  if (handle == nullptr) return absl::InvalidArgumentError("an empty ref");
  if (absl::Status listening = Listen(); !listening.ok()) return listening;
  Lent& lent = lent_[handle->id()];
  if (lent.handle == nullptr) lent.handle = std::move(handle);
  ++lent.exports;
  SetLending();
  return address_;
}

LentObjects::Lent* LentObjects::Find(const std::string& id) {
  auto it = lent_.find(id);
  if (it != lent_.end()) return &it->second;
  // A third process may borrow an object that another borrower's value
  // named, while this process still holds it.
  absl::StatusOr<std::shared_ptr<RefHandle>> handle = objects_->HandleFor(id);
  if (!handle.ok()) return nullptr;
  Lent& lent = lent_[id];
  lent.handle = std::move(*handle);
  SetLending();
  return &lent;
}

void LentObjects::Wait(const proto::BorrowRequest& request,
                       const rpc::Responder& r) {
  const std::string& id = request.object_id();
  Lent* lent = Find(id);
  if (lent == nullptr) {
    return r.Error(NoSuchObject(id));
  }
  lent->exports = std::max(0, lent->exports - request.exports_taken());
  lent->borrowers.insert(r.connection_id());
  if (!Answer(id, r)) lent->waiters.push_back(r);
}

bool LentObjects::Answer(const std::string& id, const rpc::Responder& r) {
  bool found = false, pending = false;
  proto::OwnedObjectState state =
      DescribeObject(*objects_, id, &found, &pending);
  if (pending) return false;
  if (!found) {
    r.Error(NoSuchObject(id));
  } else {
    r.Reply(state);
  }
  return true;
}

void LentObjects::Settled(const std::string& id) {
  if (lent_.empty()) return;  // every task's end passes here
  auto it = lent_.find(id);
  if (it == lent_.end() || it->second.waiters.empty()) return;
  std::vector<rpc::Responder> waiters = std::move(it->second.waiters);
  it->second.waiters.clear();
  for (const rpc::Responder& r : waiters) {
    if (r.connected() && !Answer(id, r)) it->second.waiters.push_back(r);
  }
}

void LentObjects::Release(const proto::BorrowRequest& request,
                          const rpc::Responder& r) {
  const std::string& id = request.object_id();
  auto it = lent_.find(id);
  if (it != lent_.end()) {
    // With exports_taken, a process that holds the object already took
    // them: its own borrow stays.
    if (request.exports_taken() > 0) {
      it->second.exports =
          std::max(0, it->second.exports - request.exports_taken());
    } else {
      it->second.borrowers.erase(r.connection_id());
    }
    // The borrower's copies are freed with the object.
    for (const proto::ObjectSource& copy : request.copies()) {
      objects_->AddCopy(id, copy.node_id(), copy.address());
    }
    DropIfUnused(id);
  }
  r.Reply(proto::Empty());
}

void LentObjects::AddExport(const proto::BorrowRequest& request,
                            const rpc::Responder& r) {
  Lent* lent = Find(request.object_id());
  if (lent == nullptr) {
    return r.Error(NoSuchObject(request.object_id()));
  }
  ++lent->exports;
  r.Reply(proto::Empty());
}

void LentObjects::Cancel(const proto::BorrowRequest& request,
                         const rpc::Responder& r) {
  absl::StatusOr<bool> cancelled =
      options_.cancel ? options_.cancel(request.object_id(), request.force(),
                                        request.recursive())
                      : absl::StatusOr<bool>(false);
  if (!cancelled.ok()) return r.Error(cancelled.status());
  proto::CancelOwnedReply reply;
  reply.set_cancelled(*cancelled);
  r.Reply(reply);
}

void LentObjects::Disconnected(uint64_t connection) {
  std::vector<std::string> touched;
  for (auto& [id, lent] : lent_) {
    if (lent.borrowers.erase(connection) > 0) touched.push_back(id);
  }
  for (const std::string& id : touched) DropIfUnused(id);
}

void LentObjects::DropIfUnused(const std::string& id) {
  auto it = lent_.find(id);
  if (it == lent_.end() || it->second.exports > 0 ||
      !it->second.borrowers.empty()) {
    return;
  }
  std::shared_ptr<RefHandle> handle = std::move(it->second.handle);
  lent_.erase(it);
  SetLending();
  handle.reset();  // may release the object: its owner forgets it
}

void LentObjects::SetLending() {
  const bool lending = !lent_.empty();
  if (lending == lending_) return;
  lending_ = lending;
  if (options_.lending) options_.lending(lending);
}

std::vector<std::shared_ptr<RefHandle>> LentObjects::Stop() {
  std::vector<std::shared_ptr<RefHandle>> handles;
  for (auto& [id, lent] : lent_) handles.push_back(std::move(lent.handle));
  lent_.clear();
  if (server_ != nullptr) server_->Shutdown();
  server_.reset();
  return handles;
}

}  // namespace shoal::internal
