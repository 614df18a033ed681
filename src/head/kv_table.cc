#include "head/kv_table.h"

#include "head/table_storage.h"

namespace shoal {
namespace {

constexpr char kKvTable[] = "kv";

}  // namespace

absl::StatusOr<proto::KvPutReply> KvTable::Put(
    const proto::KvPutRequest& request) {
  proto::KvPutReply reply;
  const bool exists = storage_->Get(kKvTable, request.key()).has_value();
  if (!exists || request.overwrite()) {
    absl::Status st = storage_->Put(kKvTable, request.key(), request.value());
    if (!st.ok()) return st;
    reply.set_added(!exists);
  }
  return reply;
}

proto::KvGetReply KvTable::Get(const proto::KvGetRequest& request) const {
  proto::KvGetReply reply;
  if (auto value = storage_->Get(kKvTable, request.key())) {
    reply.set_found(true);
    reply.set_value(*value);
  }
  return reply;
}

}  // namespace shoal
