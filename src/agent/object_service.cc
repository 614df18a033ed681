#include "agent/object_service.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/util.h"
#include "rpc/rpc.h"
#include "shoal/shoal.pb.h"

namespace shoal::agent {
namespace {

using object_store::ClientId;
using object_store::CopyKind;
using object_store::ObjectLocation;

proto::ObjectPlace ToProto(const ObjectLocation& location) {
  proto::ObjectPlace place;
  place.set_offset(location.offset);
  place.set_data_size(location.data_size);
  place.set_metadata_size(location.metadata_size);
  return place;
}

// Replies with the location, or the store's error as it is: its messages
// already say what holds the memory and what to do.
void ReplyLocation(const absl::StatusOr<ObjectLocation>& location,
                   rpc::Responder& resp) {
  if (!location.ok()) return resp.Error(location.status());
  resp.Reply(ToProto(*location));
}

void ReplyStatus(const absl::Status& status, rpc::Responder& resp) {
  if (!status.ok()) return resp.Error(status);
  resp.Reply(proto::Empty());
}

// Arenas are named shoal-node-<node id>-<agent pid>: removes those whose
// agent died without removing its own (kill -9), so that their memory comes
// back.
void RemoveStaleArenas(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::string file = entry.path().filename().string();
    if (!absl::StartsWith(file, "shoal-node-")) continue;
    int pid = 0;
    size_t dash = file.rfind('-');
    if (!absl::SimpleAtoi(file.substr(dash + 1), &pid) || pid <= 0) continue;
    if (ProcessAlive(pid)) continue;
    std::filesystem::remove(entry.path(), ec);
    SHOAL_LOG(INFO) << "object store: removed " << entry.path().string()
                    << " of a node agent that is gone (pid " << pid << ")";
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<ObjectService>> ObjectService::Create(
    const std::string& name, uint64_t capacity, const std::string& spill_dir) {
  RemoveStaleArenas("/dev/shm");
  ASSIGN_OR_RETURN(auto arena, object_store::ShmArena::Create(name, capacity));
  if (!arena->backing_note().empty()) {
    SHOAL_LOG(WARNING) << "object store: " << arena->backing_note();
  }
  ASSIGN_OR_RETURN(auto spill,
                   object_store::FolderSpillStorage::Create(spill_dir));
  SHOAL_LOG(INFO) << "object store: " << capacity << " bytes at "
                  << arena->path() << ", spilling to " << spill_dir;
  return std::unique_ptr<ObjectService>(
      new ObjectService(std::make_unique<object_store::ObjectStore>(
          std::move(arena), std::move(spill))));
}

void ObjectService::Register(rpc::Server* s) {
  rpc::RegisterProto<proto::ObjectRequest>(
      s, proto::OBJECT_CREATE, [this](const auto& r, rpc::Responder resp) {
        ReplyLocation(
            store_->Create(
                r.object_id(), r.data_size(), r.metadata_size(),
                static_cast<ClientId>(resp.connection_id()),
                r.secondary() ? CopyKind::kSecondary : CopyKind::kPrimary,
                r.owner()),
            resp);
      });
  rpc::RegisterProto<proto::ObjectRequest>(
      s, proto::OBJECT_SEAL, [this](const auto& r, rpc::Responder resp) {
        ReplyStatus(store_->Seal(r.object_id(),
                                 static_cast<ClientId>(resp.connection_id())),
                    resp);
      });
  rpc::RegisterProto<proto::ObjectRequest>(
      s, proto::OBJECT_ABORT, [this](const auto& r, rpc::Responder resp) {
        ReplyStatus(store_->Abort(r.object_id(),
                                  static_cast<ClientId>(resp.connection_id())),
                    resp);
      });
  rpc::RegisterProto<proto::ObjectRequest>(
      s, proto::OBJECT_GET, [this](const auto& r, rpc::Responder resp) {
        ReplyLocation(store_->Get(r.object_id(),
                                  static_cast<ClientId>(resp.connection_id())),
                      resp);
      });
  rpc::RegisterProto<proto::ObjectRequest>(
      s, proto::OBJECT_RELEASE, [this](const auto& r, rpc::Responder resp) {
        ReplyStatus(store_->Release(r.object_id(), static_cast<ClientId>(
                                                       resp.connection_id())),
                    resp);
      });
  rpc::RegisterProto<proto::ObjectRequest>(
      s, proto::OBJECT_DELETE, [this](const auto& r, rpc::Responder resp) {
        ReplyStatus(store_->Delete(r.object_id()), resp);
      });
}

void ObjectService::OnDisconnect(uint64_t connection_id) {
  int64_t released =
      store_->ReleaseClient(static_cast<ClientId>(connection_id));
  if (released > 0) {
    SHOAL_LOG(INFO) << "object store: a client left; released " << released
                    << " pin(s) and unfinished object(s) it held";
  }
}

uint64_t ObjectService::used_bytes() const {
  return store_->Stats().used_bytes;
}

void ObjectService::Describe(proto::ObjectStoreInfo* info) const {
  object_store::ObjectStoreStats stats = store_->Stats();
  info->set_path(store_->arena().path());
  info->set_capacity(stats.capacity);
  info->set_used_bytes(stats.used_bytes);
  info->set_pinned_bytes(stats.pinned_bytes);
  info->set_num_objects(stats.num_objects);
  info->set_num_spilled(stats.num_spilled);
  info->set_spilled_bytes(stats.spilled_bytes);
  info->set_evictions(stats.evictions);
}

}  // namespace shoal::agent
