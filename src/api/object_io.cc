#include "api/object_io.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "api/object_client.h"
#include "api/task_error.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "shoal/shoal.pb.h"

namespace shoal::internal {
namespace {

absl::Status OtherError(std::string_view message) {
  return TaskError(ErrorKind::kOther, std::string(message));
}

bool IsRaw(std::string_view metadata) {
  return !metadata.empty() && metadata[0] == kFormatRaw;
}

// The node's store through its agent (api/object_client.h).
class ObjectClientStore : public NodeStore {
 public:
  explicit ObjectClientStore(std::shared_ptr<ObjectClient> client)
      : client_(std::move(client)) {}

  const std::string& node_id() const override { return client_->node_id(); }
  const std::string& transfer_address() const override {
    return client_->transfer_address();
  }
  absl::Status Put(const std::string& id, const std::string& owner, size_t size,
                   std::string_view metadata,
                   const std::function<void(uint8_t*)>& fill) override {
    return client_->Put(id, owner, size, metadata, fill, /*owned_here=*/true);
  }
  absl::StatusOr<Mapped> Get(const std::string& id) override {
    return Map(client_->Get(id));
  }
  absl::StatusOr<Mapped> Pull(const proto::StoredObject& object) override {
    return Map(client_->Pull(object, 0));
  }

 private:
  static absl::StatusOr<Mapped> Map(
      absl::StatusOr<std::shared_ptr<StoredView>> view) {
    if (!view.ok()) return view.status();
    return Mapped{(*view)->data(), (*view)->metadata(), *view};
  }

  const std::shared_ptr<ObjectClient> client_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<NodeStore>> ConnectNodeStore(
    const std::string& agent_address, const std::string& token,
    const std::string& peer_name) {
  ASSIGN_OR_RETURN(std::shared_ptr<ObjectClient> client,
                   ObjectClient::Connect(agent_address, token, peer_name));
  return std::make_unique<ObjectClientStore>(std::move(client));
}

ObjectIo::ObjectIo(OwnedObjects* objects, uint64_t inline_threshold,
                   Hooks hooks)
    : objects_(objects),
      threshold_(inline_threshold),
      hooks_(std::move(hooks)) {}

void ObjectIo::SetStore(std::unique_ptr<NodeStore> store, std::string owner) {
  store_ = std::move(store);
  owner_ = std::move(owner);
  if (store_ != nullptr) objects_->SetLocalNode(store_->node_id());
}

absl::StatusOr<std::shared_ptr<RefHandle>> ObjectIo::Put(
    ObjectValue value, std::vector<std::shared_ptr<RefHandle>> contained) {
  std::string id = hooks_.new_id();
  if (store_ != nullptr && value.data.size() >= threshold_) {
    RETURN_IF_ERROR(Store(id, value.data.size(), value.raw, [&](uint8_t* dest) {
      memcpy(dest, value.data.data(), value.data.size());
    }));
  } else {
    objects_->AddValue(id,
                       std::make_shared<const std::string>(ToMsgpack(value)));
  }
  if (!contained.empty()) {
    // Kept with the object (on the loop, where it is dropped too).
    hooks_.post([this, id, contained = std::move(contained)]() mutable {
      contained_[id] = std::move(contained);
    });
  }
  return objects_->NewHandle(id);
}

absl::StatusOr<std::shared_ptr<RefHandle>> ObjectIo::PutPieces(
    const std::vector<BufferPiece>& pieces, size_t size) {
  for (const BufferPiece& p : pieces) {
    if (p.offset > size || p.bytes.size() > size - p.offset) {
      return OtherError(absl::StrCat(
          "a piece of ", p.bytes.size(), " bytes at offset ", p.offset,
          " does not fit an object of ", size, " bytes"));
    }
  }
  // The gaps between pieces are zeroed, not the whole object: one pass
  // over the memory.
  std::vector<const BufferPiece*> in_order;
  for (const BufferPiece& p : pieces) in_order.push_back(&p);
  std::sort(in_order.begin(), in_order.end(),
            [](const BufferPiece* a, const BufferPiece* b) {
              return a->offset < b->offset;
            });
  auto fill = [&](uint8_t* dest) {
    size_t covered = 0;
    for (const BufferPiece* p : in_order) {
      if (p->offset > covered) memset(dest + covered, 0, p->offset - covered);
      memcpy(dest + p->offset, p->bytes.data(), p->bytes.size());
      covered = std::max(covered, p->offset + p->bytes.size());
    }
    if (covered < size) memset(dest + covered, 0, size - covered);
  };
  if (store_ == nullptr || size < threshold_) {
    auto bytes = std::make_shared<std::string>(size, '\0');
    fill(reinterpret_cast<uint8_t*>(bytes->data()));
    return Put(ObjectValue{*bytes, /*raw=*/true, bytes}, {});
  }
  std::string id = hooks_.new_id();
  RETURN_IF_ERROR(Store(id, size, /*raw=*/true, fill));
  return objects_->NewHandle(id);
}

absl::Status ObjectIo::Store(const std::string& id, size_t size, bool raw,
                             const std::function<void(uint8_t*)>& fill) {
  const char format = raw ? kFormatRaw : kFormatMsgpack;
  absl::Status put =
      store_->Put(id, owner_, size, std::string_view(&format, 1), fill);
  if (!put.ok()) {
    return OtherError(
        absl::StrCat("Put of ", size, " bytes failed: ", put.message()));
  }
  proto::StoredObject so;
  so.set_object_id(id);
  so.set_data_size(size);
  so.set_metadata_size(1);
  so.set_owner(owner_);
  proto::ObjectSource* source = so.add_sources();
  source->set_node_id(store_->node_id());
  source->set_address(store_->transfer_address());
  objects_->AddStored(id, std::move(so));
  return absl::OkStatus();
}

absl::StatusOr<ObjectValue> ObjectIo::Get(const RefHandle& ref,
                                          int64_t timeout_ms) {
  int64_t deadline_us = timeout_ms < 0 ? -1 : MonotonicUs() + timeout_ms * 1000;
  while (true) {
    int64_t left_ms =
        deadline_us < 0
            ? -1
            : std::max<int64_t>(0, (deadline_us - MonotonicUs()) / 1000);
    ASSIGN_OR_RETURN(OwnedObjects::Ready ready,
                     objects_->WaitReady(ref.id(), left_ms, hooks_.blocked));
    if (!ready.stored) return ObjectValue{*ready.value, false, ready.value};
    absl::StatusOr<ObjectValue> value =
        FetchStored(ready.stored_object, ready.local_copy);
    if (value.ok()) return value;
    if (value.status().code() != absl::StatusCode::kDataLoss) {
      return OtherError(absl::StrCat("Get of object ", ref.id(),
                                     " failed: ", value.status().message()));
    }
    // Every copy is gone: rebuild it from its task, or say it is lost.
    absl::Status rebuilding = hooks_.rebuild(ref.id(), ready.stored_object);
    if (!rebuilding.ok()) {
      return TaskError(
          ErrorKind::kObjectLost,
          absl::StrCat(value.status().message(), "; ", rebuilding.message()));
    }
  }
}

std::vector<size_t> ObjectIo::Wait(const std::vector<const RefHandle*>& refs,
                                   size_t num_ready, int64_t timeout_ms) {
  std::vector<std::string> ids;
  ids.reserve(refs.size());
  for (const RefHandle* ref : refs) ids.push_back(ref->id());
  return objects_->WaitAny(ids, num_ready, timeout_ms, hooks_.blocked);
}

absl::Status ObjectIo::PrepareArgs(std::vector<TaskArg>& args) {
  for (TaskArg& arg : args) {
    if (arg.ref != nullptr) continue;
    if (store_ != nullptr && arg.value.data.size() >= threshold_) {
      ASSIGN_OR_RETURN(arg.ref,
                       Put(std::move(arg.value), std::move(arg.contained)));
      arg.value = {};
    } else if (arg.value.raw || arg.value.keepalive == nullptr) {
      arg.value = ObjectValue::Owned(ToMsgpack(arg.value));
    }
  }
  return absl::OkStatus();
}

bool ObjectIo::ArgsReady(const std::vector<TaskArg>& args) const {
  for (const TaskArg& arg : args) {
    if (arg.ref == nullptr) continue;
    OwnedObjects::State state = objects_->Peek(arg.ref->id(), nullptr, nullptr);
    if (state == OwnedObjects::State::kPending ||
        state == OwnedObjects::State::kFailed) {
      return false;
    }
  }
  return true;
}

absl::Status ObjectIo::WriteActorArgs(
    std::vector<TaskArg>& args, proto::ActorArgs* out,
    std::vector<std::shared_ptr<RefHandle>>* keep,
    const std::atomic<bool>& stop) {
  RETURN_IF_ERROR(PrepareArgs(args));
  for (size_t i = 0; i < args.size(); ++i) {
    TaskArg& arg = args[i];
    if (arg.ref == nullptr) {
      out->add_args(std::string(arg.value.data));
      for (auto& c : arg.contained) keep->push_back(std::move(c));
      continue;
    }
    absl::StatusOr<OwnedObjects::Ready> ready;
    // In slices, so that a stop is seen.
    do {
      if (stop.load()) {
        return absl::CancelledError("this process shut down first");
      }
      ready = objects_->WaitReady(arg.ref->id(), 200, nullptr);
    } while (!ready.ok() && KindOf(ready.status()) == ErrorKind::kTimeout);
    if (!ready.ok()) return ready.status();
    if (ready->stored) {
      out->add_args("");
      (*out->mutable_stored_args())[static_cast<int>(i)] = ready->stored_object;
    } else {
      out->add_args(*ready->value);
    }
    keep->push_back(arg.ref);
  }
  return absl::OkStatus();
}

absl::StatusOr<ObjectValue> ObjectIo::FetchStored(
    const proto::StoredObject& where, bool have_copy) {
  if (store_ == nullptr) return FetchIntoMemory(where);
  absl::StatusOr<NodeStore::Mapped> mapped =
      absl::NotFoundError("no copy here");
  if (have_copy) mapped = store_->Get(where.object_id());
  if (!mapped.ok() && mapped.status().code() == absl::StatusCode::kNotFound) {
    mapped = store_->Pull(where);
    if (mapped.ok()) {
      objects_->AddCopy(where.object_id(), store_->node_id(),
                        store_->transfer_address());
    }
  }
  if (!mapped.ok()) return mapped.status();
  return ObjectValue{mapped->data, IsRaw(mapped->metadata),
                     std::move(mapped->keepalive)};
}

absl::StatusOr<ObjectValue> ObjectIo::FetchIntoMemory(
    const proto::StoredObject& where) {
  uint64_t size = where.data_size() + where.metadata_size();
  auto bytes = std::make_shared<std::string>(size, '\0');
  RETURN_IF_ERROR(hooks_.pull_into_memory(
      where, reinterpret_cast<uint8_t*>(bytes->data()), size));
  std::string_view all(*bytes);
  std::string_view metadata = all.substr(where.data_size());
  return ObjectValue{all.substr(0, where.data_size()), IsRaw(metadata), bytes};
}

std::unordered_map<std::string, std::vector<std::shared_ptr<RefHandle>>>
ObjectIo::TakeContained() {
  auto contained = std::move(contained_);
  contained_.clear();
  return contained;
}

}  // namespace shoal::internal
