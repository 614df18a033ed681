#include "api/object_client.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/environment.h"
#include "common/files.h"
#include "common/logging.h"
#include "object_store/shm_arena.h"
#include "rpc/blocking_channel.h"
#include "rpc/rpc.h"
#include "shoal/shoal.pb.h"

namespace shoal::internal {
namespace {

constexpr int64_t kCallTimeoutMs = 60000;

// Prefaults only when some of the range was never written (mincore: not
// in memory) at its start, middle or end: walking pages that are already
// there costs a third of the copy.
void PrefaultIfFresh(uint8_t* dest, uint64_t size) {
  if (size < (1 << 20)) return;
  const uintptr_t page = 4096;
  uintptr_t begin = reinterpret_cast<uintptr_t>(dest) & ~(page - 1);
  uintptr_t end = reinterpret_cast<uintptr_t>(dest) + size;
  for (uintptr_t probe : {begin, (begin + (end - begin) / 2) & ~(page - 1),
                          (end - 1) & ~(page - 1)}) {
    unsigned char resident = 0;
    if (mincore(reinterpret_cast<void*>(probe), page, &resident) == 0 &&
        (resident & 1) == 0) {
      PrefaultForWrite(dest, size);
      return;
    }
  }
}

}  // namespace

uint64_t InlineThresholdBytes() {
  static const uint64_t threshold =
      static_cast<uint64_t>(env::GetInt(env::Var::kInlineThresholdBytes));
  return threshold;
}

StoredView::~StoredView() { client_->Release(id_); }

absl::StatusOr<std::shared_ptr<ObjectClient>> ObjectClient::Connect(
    const std::string& agent_address, const std::string& token,
    const std::string& peer_name) {
  std::shared_ptr<ObjectClient> client(new ObjectClient());
  auto channel =
      rpc::BlockingChannel::Connect(agent_address, token, peer_name, 10000);
  if (!channel.ok()) return channel.status();
  client->channel_ = std::move(*channel);
  proto::AgentInfo info;
  if (auto s = client->channel_->CallProto(proto::GET_AGENT_INFO,
                                           proto::Empty(), &info, 10000);
      !s.ok()) {
    return s;
  }
  if (info.object_store().path().empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "node ", info.node().node_id(),
        " has no object store (it was started with --object-store-memory 0)"));
  }
  auto arena = object_store::ShmArena::Open(info.object_store().path());
  if (!arena.ok()) return arena.status();
  client->arena_ = std::move(*arena);
  client->node_id_ = info.node().node_id();
  client->agent_address_ = agent_address;
  client->transfer_address_ = info.node().object_transfer_address();
  return client;
}

ObjectClient::~ObjectClient() = default;

absl::Status ObjectClient::Put(const std::string& id, const std::string& owner,
                               uint64_t data_size, std::string_view metadata,
                               const std::function<void(uint8_t* dest)>& write,
                               bool owned_here) {
  proto::ObjectRequest req;
  req.set_object_id(id);
  req.set_data_size(data_size);
  req.set_metadata_size(metadata.size());
  req.set_owner(owner);
  req.set_owned_by_creator(owned_here);
  proto::ObjectPlace place;
  if (auto s = channel_->CallProto(proto::OBJECT_CREATE, req, &place,
                                   kCallTimeoutMs);
      !s.ok()) {
    return s;
  }
  uint8_t* dest = arena_->data() + place.offset();
  PrefaultIfFresh(dest, data_size + metadata.size());
  write(dest);
  if (!metadata.empty()) {
    memcpy(dest + data_size, metadata.data(), metadata.size());
  }
  proto::ObjectRequest seal;
  seal.set_object_id(id);
  proto::Empty ignored;
  return channel_->CallProto(proto::OBJECT_SEAL, seal, &ignored,
                             kCallTimeoutMs);
}

absl::StatusOr<std::shared_ptr<StoredView>> ObjectClient::MakeView(
    const std::string& id, const std::string& place_payload) {
  proto::ObjectPlace place;
  if (!place.ParseFromString(place_payload)) {
    return absl::DataLossError("malformed object place from the node agent");
  }
  if (place.offset() + place.data_size() + place.metadata_size() >
      arena_->capacity()) {
    return absl::DataLossError(absl::StrCat("the node agent placed object ", id,
                                            " outside its arena"));
  }
  return std::make_shared<StoredView>(shared_from_this(), id,
                                      arena_->data() + place.offset(),
                                      place.data_size(), place.metadata_size());
}

absl::StatusOr<std::shared_ptr<StoredView>> ObjectClient::Get(
    const std::string& id) {
  proto::ObjectRequest req;
  req.set_object_id(id);
  auto reply =
      channel_->Call(proto::OBJECT_GET, rpc::Serialize(req), kCallTimeoutMs);
  if (!reply.ok()) return reply.status();
  return MakeView(id, *reply);
}

absl::StatusOr<std::shared_ptr<StoredView>> ObjectClient::Pull(
    const proto::StoredObject& object, int64_t timeout_ms) {
  proto::ObjectPullRequest req;
  *req.mutable_object() = object;
  req.set_timeout_ms(timeout_ms);
  // The agent gives up on the sources by itself; wait a little longer.
  int64_t wait_ms = (timeout_ms > 0 ? timeout_ms : 60000) + 10000;
  auto reply = channel_->Call(proto::OBJECT_PULL, rpc::Serialize(req), wait_ms);
  if (!reply.ok()) return reply.status();
  return MakeView(object.object_id(), *reply);
}

absl::Status ObjectClient::Delete(const std::string& id) {
  proto::ObjectRequest req;
  req.set_object_id(id);
  proto::Empty ignored;
  return channel_->CallProto(proto::OBJECT_DELETE, req, &ignored,
                             kCallTimeoutMs);
}

void ObjectClient::Release(const std::string& id) {
  proto::ObjectRequest req;
  req.set_object_id(id);
  // Its reply is read (and dropped) by the next call: a release costs a
  // write, not a round trip.
  absl::Status s = channel_->Send(proto::OBJECT_RELEASE, rpc::Serialize(req));
  if (!s.ok()) {
    SHOAL_LOG(WARNING) << "releasing object " << id << ": " << s;
  }
}

}  // namespace shoal::internal
