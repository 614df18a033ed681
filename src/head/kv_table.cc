#include "head/kv_table.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "head/table_storage.h"

namespace shoal {
namespace {

constexpr char kKvTable[] = "kv";
constexpr char kUserKvTable[] = "user_kv";

}  // namespace

absl::StatusOr<KvTable::Place> KvTable::PlaceOf(const proto::KvSpace& space) {
  if (!space.user()) {
    if (!space.ns().empty()) {
      return absl::InvalidArgumentError(
          "Shoal's own key-value space has no namespaces; a namespace "
          "goes with the users' space");
    }
    return Place{kKvTable, ""};
  }
  if (space.ns().find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(
        "a key-value namespace may not hold a NUL byte; name it with "
        "printable text");
  }
  // The NUL ends the namespace: no namespace's keys start with another's.
  return Place{kUserKvTable, absl::StrCat(space.ns(), std::string(1, '\0'))};
}

absl::StatusOr<proto::KvPutReply> KvTable::Put(
    const proto::KvPutRequest& request) {
  absl::StatusOr<Place> place = PlaceOf(request.space());
  if (!place.ok()) return place.status();
  const std::string key = place->prefix + request.key();
  proto::KvPutReply reply;
  const bool exists = storage_->Get(place->table, key).has_value();
  if (!exists || request.overwrite()) {
    absl::Status st = storage_->Put(place->table, key, request.value());
    if (!st.ok()) return st;
    reply.set_added(!exists);
  }
  return reply;
}

absl::StatusOr<proto::KvGetReply> KvTable::Get(
    const proto::KvGetRequest& request) const {
  absl::StatusOr<Place> place = PlaceOf(request.space());
  if (!place.ok()) return place.status();
  proto::KvGetReply reply;
  if (auto value = storage_->Get(place->table, place->prefix + request.key())) {
    reply.set_found(true);
    reply.set_value(*value);
  }
  return reply;
}

absl::StatusOr<proto::KvDelReply> KvTable::Del(
    const proto::KvDelRequest& request) {
  absl::StatusOr<Place> place = PlaceOf(request.space());
  if (!place.ok()) return place.status();
  std::vector<std::string> doomed;
  if (request.by_prefix()) {
    doomed = KeysUnder(*place, request.key());
  } else if (storage_->Get(place->table, place->prefix + request.key())) {
    doomed.push_back(request.key());
  }
  proto::KvDelReply reply;
  for (const std::string& key : doomed) {
    absl::Status st = storage_->Delete(place->table, place->prefix + key);
    if (!st.ok()) return st;
    reply.set_deleted(reply.deleted() + 1);
  }
  return reply;
}

absl::StatusOr<proto::KvKeysReply> KvTable::Keys(
    const proto::KvKeysRequest& request) const {
  absl::StatusOr<Place> place = PlaceOf(request.space());
  if (!place.ok()) return place.status();
  proto::KvKeysReply reply;
  for (std::string& key : KeysUnder(*place, request.prefix())) {
    reply.add_keys(std::move(key));
  }
  return reply;
}

absl::StatusOr<int> KvTable::DeleteJobKeys(const std::string& job_id) {
  if (!HasJobKeys(job_id)) return 0;
  std::vector<std::string> prefixes;
  for (const char* group : {"pyfn/", "pyactor/", "pyenv/", "pyjob/"}) {
    prefixes.push_back(absl::StrCat(group, job_id, "/"));
  }
  std::vector<std::string> doomed;
  // One pass over the space: a job ends often, and most keys are not its.
  for (const auto& [key, value] : storage_->Scan(kKvTable)) {
    for (const std::string& prefix : prefixes) {
      if (absl::StartsWith(key, prefix)) doomed.push_back(key);
    }
  }
  for (const std::string& key : doomed) {
    RETURN_IF_ERROR(storage_->Delete(kKvTable, key));
  }
  return static_cast<int>(doomed.size());
}

bool KvTable::HasJobKeys(const std::string& job_id) const {
  return storage_->Get(kKvTable, absl::StrCat("pyjob/", job_id, "/namespace"))
      .has_value();
}

absl::StatusOr<int> KvTable::DeleteActorKeys(const std::string& actor_id) {
  const std::string key = absl::StrCat("pykept/", actor_id);
  if (!storage_->Get(kKvTable, key).has_value()) return 0;
  RETURN_IF_ERROR(storage_->Delete(kKvTable, key));
  return 1;
}

std::vector<std::string> KvTable::KeysUnder(const Place& place,
                                            const std::string& prefix) const {
  const std::string full = place.prefix + prefix;
  std::vector<std::string> keys;
  for (const auto& [key, value] : storage_->Scan(place.table)) {
    if (absl::StartsWith(key, full))
      keys.push_back(key.substr(place.prefix.size()));
  }
  return keys;
}

}  // namespace shoal
