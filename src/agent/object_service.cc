#include "agent/object_service.h"

#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/process.h"
#include "common/status_macros.h"
#include "object_store/format_util.h"
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
                   const rpc::Responder& resp) {
  if (!location.ok()) return resp.Error(location.status());
  resp.Reply(ToProto(*location));
}

void ReplyStatus(const absl::Status& status, const rpc::Responder& resp) {
  if (!status.ok()) return resp.Error(status);
  resp.Reply(proto::Empty());
}

}  // namespace

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

absl::StatusOr<std::unique_ptr<ObjectService>> ObjectService::Create(
    const ObjectServiceOptions& options) {
  RemoveStaleArenas("/dev/shm");
  ASSIGN_OR_RETURN(auto arena, object_store::ShmArena::Create(
                                   options.name, options.capacity));
  if (!arena->backing_note().empty()) {
    SHOAL_LOG(WARNING) << "object store: " << arena->backing_note();
  }
  ASSIGN_OR_RETURN(auto spill,
                   object_store::FolderSpillStorage::Create(options.spill_dir));
  SHOAL_LOG(INFO) << "object store: " << options.capacity << " bytes at "
                  << arena->path() << ", spilling to " << options.spill_dir;
  std::unique_ptr<ObjectService> service(
      new ObjectService(options, std::make_unique<object_store::ObjectStore>(
                                     std::move(arena), std::move(spill))));
  ASSIGN_OR_RETURN(service->transfer_,
                   object_plane::TransferServer::Create(
                       options.node_ip, options.token, service.get()));
  SHOAL_LOG(INFO) << "object store: serving objects to other nodes at "
                  << service->transfer_->address();
  return service;
}

ObjectService::ObjectService(const ObjectServiceOptions& options,
                             std::unique_ptr<object_store::ObjectStore> store)
    : options_(options), store_(std::move(store)) {}

ObjectService::~ObjectService() {
  // The loop has stopped (or Shutdown ran): nothing else touches pulls_.
  if (transfer_ != nullptr) transfer_->Shutdown();
  for (auto& [id, pull] : pulls_) pull.cancel->store(true);
  for (auto& [id, pull] : pulls_) {
    if (pull.thread.joinable()) pull.thread.join();
  }
}

void ObjectService::Shutdown() {
  // Transfer threads wait for the loop, so they end first, while it runs.
  transfer_->Shutdown();
  std::vector<std::thread> threads;
  OnLoop([&] {
    shut_down_ = true;
    for (auto& [id, pull] : pulls_) {
      pull.cancel->store(true);
      threads.push_back(std::move(pull.thread));
    }
  });
  // Each posts its FinishPull, which answers the waiters.
  for (std::thread& t : threads) t.join();
}

void ObjectService::OnLoop(const std::function<void()>& fn) {
  options_.loop->RunSync(fn);
}

absl::StatusOr<object_plane::TransferServer::PinnedObject> ObjectService::Pin(
    const std::string& id, int64_t client) {
  absl::StatusOr<object_plane::TransferServer::PinnedObject> pinned;
  OnLoop([&] {
    absl::StatusOr<ObjectLocation> location = store_->Get(id, client);
    if (!location.ok()) {
      pinned = location.status();
      return;
    }
    pinned = object_plane::TransferServer::PinnedObject{
        store_->arena().data() + location->offset, location->size()};
  });
  return pinned;
}

void ObjectService::Unpin(const std::string& id, int64_t client) {
  OnLoop([&] { store_->Release(id, client).IgnoreError(); });
}

void ObjectService::UnpinAll(int64_t client) {
  OnLoop([&] { store_->ReleaseClient(client); });
}

void ObjectService::StartPull(const proto::ObjectPullRequest& r,
                              rpc::Responder resp) {
  const proto::StoredObject& object = r.object();
  const std::string& id = object.object_id();
  const std::string shown = object_store::FormatId(id);
  auto client = static_cast<ClientId>(resp.connection_id());
  if (store_->IsSealed(id)) return ReplyLocation(store_->Get(id, client), resp);
  if (auto it = pulls_.find(id); it != pulls_.end()) {
    it->second.waiters.push_back(std::move(resp));
    return;
  }
  if (shut_down_) {
    return resp.Error(absl::UnavailableError(
        "this node's agent is shutting down; pull the object elsewhere"));
  }
  if (store_->Contains(id)) {
    return resp.Error(absl::UnavailableError(
        absl::StrCat("object ", shown,
                     " is being written on this node; get it once sealed")));
  }
  absl::StatusOr<ObjectLocation> location =
      store_->Create(id, object.data_size(), object.metadata_size(),
                     kAgentClient, CopyKind::kSecondary, object.owner());
  if (!location.ok()) return resp.Error(location.status());

  std::vector<object_plane::TransferSource> sources;
  for (const proto::ObjectSource& s : object.sources()) {
    sources.push_back({s.node_id(), s.address()});
  }
  object_plane::PullOptions pull_options = options_.pull;
  if (r.timeout_ms() > 0) pull_options.timeout_ms = r.timeout_ms();
  pull_options.self_address = transfer_->address();
  Pull& pull = pulls_[id];
  pull.waiters.push_back(std::move(resp));
  pull.cancel = std::make_shared<std::atomic<bool>>(false);
  pull_options.cancel = pull.cancel.get();
  uint8_t* dest = store_->arena().data() + location->offset;
  // The thread only reads its own copies and the arena's memory for this
  // object, which stays allocated until FinishPull seals or aborts it.
  pull.thread = std::thread([this, id, dest, size = location->size(),
                             sources = std::move(sources), pull_options,
                             cancel = pull.cancel] {
    absl::Status status = object_plane::PullObject(
        id, dest, size, sources, options_.token, pull_options);
    options_.loop->Post([this, id, status] { FinishPull(id, status); });
  });
}

void ObjectService::FinishPull(const std::string& id,
                               const absl::Status& pulled) {
  auto it = pulls_.find(id);
  if (it == pulls_.end()) return;
  Pull pull = std::move(it->second);
  pulls_.erase(it);
  // It has posted this and is returning.
  if (pull.thread.joinable()) pull.thread.join();
  const std::string shown = object_store::FormatId(id);
  absl::Status status = pulled;
  if (pull.deleted) {
    status = absl::NotFoundError(
        absl::StrCat("object ", shown,
                     " was deleted by its owner while this node pulled it"));
  } else if (shut_down_ && absl::IsCancelled(status)) {
    status = absl::UnavailableError(absl::StrCat(
        "this node's agent shut down while it pulled object ", shown));
  }
  if (status.ok()) {
    status = store_->Seal(id, kAgentClient);
  } else {
    absl::Status aborted = store_->Abort(id, kAgentClient);
    if (!aborted.ok()) {
      SHOAL_LOG(WARNING) << "object store: cannot drop the failed copy of "
                         << shown << ": " << aborted;
    }
  }
  if (!status.ok()) {
    if (!pull.deleted && !shut_down_) {
      SHOAL_LOG(WARNING) << "object store: pull failed: " << status;
    }
    for (const rpc::Responder& waiter : pull.waiters) waiter.Error(status);
    return;
  }
  // Waiters whose connection closed were dropped by OnDisconnect: a pin
  // for them would never be released.
  for (const rpc::Responder& waiter : pull.waiters) {
    ReplyLocation(
        store_->Get(id, static_cast<ClientId>(waiter.connection_id())), waiter);
  }
}

void ObjectService::Register(rpc::Server* s) {
  rpc::RegisterProto<proto::ObjectRequest>(
      s, proto::OBJECT_CREATE, [this](const auto& r, rpc::Responder resp) {
        absl::StatusOr<ObjectLocation> location = store_->Create(
            r.object_id(), r.data_size(), r.metadata_size(),
            static_cast<ClientId>(resp.connection_id()),
            r.secondary() ? CopyKind::kSecondary : CopyKind::kPrimary,
            r.owner());
        if (location.ok() && r.owned_by_creator()) {
          owned_[resp.connection_id()].insert(r.object_id());
          owner_of_[r.object_id()] = resp.connection_id();
        }
        ReplyLocation(location, resp);
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
        if (auto it = pulls_.find(r.object_id()); it != pulls_.end()) {
          // The copy being pulled is freed when FinishPull aborts it.
          it->second.deleted = true;
          it->second.cancel->store(true);
        }
        ForgetOwned(r.object_id());
        ReplyStatus(store_->Delete(r.object_id()), resp);
      });
  rpc::RegisterProto<proto::ListObjectsRequest>(
      s, proto::LIST_OBJECTS, [this](const auto& r, rpc::Responder resp) {
        const size_t limit = r.limit() > 0 ? r.limit() : 100;
        proto::ObjectList list;
        int64_t total = 0;
        store_->ForEach([&](const object_store::ObjectId& id,
                            const object_store::ObjectInfo& info) {
          if (info.deleted) return true;
          ++total;
          if (static_cast<size_t>(list.objects_size()) >= limit) return true;
          proto::ObjectEntry* e = list.add_objects();
          e->set_object_id(id);
          e->set_node_id(options_.node_id);
          e->set_size(static_cast<int64_t>(info.data_size));
          e->set_owner(info.owner);
          e->set_state(
              info.state == object_store::ObjectState::kCreated   ? "CREATING"
              : info.state == object_store::ObjectState::kSpilled ? "SPILLED"
                                                                  : "SEALED");
          e->set_copy(info.copy == object_store::CopyKind::kPrimary
                          ? "PRIMARY"
                          : "SECONDARY");
          e->set_pins(info.pins);
          return true;
        });
        list.set_total(total);
        resp.Reply(list);
      });
  rpc::RegisterProto<proto::ObjectPullRequest>(
      s, proto::OBJECT_PULL, [this](const auto& r, rpc::Responder resp) {
        StartPull(r, std::move(resp));
      });
}

void ObjectService::ForgetOwned(const std::string& id) {
  auto owner = owner_of_.find(id);
  if (owner == owner_of_.end()) return;
  auto owned = owned_.find(owner->second);
  if (owned != owned_.end()) {
    owned->second.erase(id);
    if (owned->second.empty()) owned_.erase(owned);
  }
  owner_of_.erase(owner);
}

void ObjectService::OnDisconnect(uint64_t connection_id) {
  for (auto& [id, pull] : pulls_) {
    std::erase_if(pull.waiters, [&](const rpc::Responder& waiter) {
      return waiter.connection_id() == connection_id;
    });
  }
  // An owner that went without freeing its objects (it crashed, or was
  // killed) leaves no one who could: they go with it.
  if (auto owned = owned_.find(connection_id); owned != owned_.end()) {
    std::unordered_set<std::string> ids = std::move(owned->second);
    owned_.erase(owned);
    for (const std::string& id : ids) {
      owner_of_.erase(id);
      store_->Delete(id).IgnoreError();
    }
    SHOAL_LOG(INFO) << "object store: freed " << ids.size()
                    << " object(s) whose owner went away";
  }
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
