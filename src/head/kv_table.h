// The cluster's key-value store (KV_PUT, KV_GET, KV_DEL, KV_KEYS): byte keys,
// byte values, kept in the head's storage so that a restarted head has them.
// Two spaces that never see each other (proto::KvSpace): Shoal's own keys
// (table "kv"; callers make groups with key prefixes, "<group>/rank0") and
// the users' (table "user_kv", Ray's internal_kv), where every key lives in
// a namespace.
//
// Threading: lives on the head's event loop; not thread-safe.
#ifndef SHOAL_HEAD_KV_TABLE_H_
#define SHOAL_HEAD_KV_TABLE_H_

#include "absl/status/statusor.h"
#include "shoal/shoal.pb.h"

namespace shoal {

class TableStorage;

class KvTable {
 public:
  // REQUIRES: `storage` outlives this table.
  explicit KvTable(TableStorage* storage) : storage_(storage) {}

  // Stores the pair unless the key has a value and `overwrite` is false;
  // `added` says whether the key was new. An error: the storage refused
  // the write, or the request names a namespace that cannot be (a NUL
  // byte in it), and nothing changed.
  absl::StatusOr<proto::KvPutReply> Put(const proto::KvPutRequest& request);
  absl::StatusOr<proto::KvGetReply> Get(
      const proto::KvGetRequest& request) const;
  // Deletes the key, or every key that starts with it (`by_prefix`), and
  // says how many went. An error: as Put's; what was deleted before a
  // refused write stays deleted.
  absl::StatusOr<proto::KvDelReply> Del(const proto::KvDelRequest& request);
  // Every key of the space (and namespace) that starts with `prefix`,
  // ordered.
  absl::StatusOr<proto::KvKeysReply> Keys(
      const proto::KvKeysRequest& request) const;

  // What a frontend keeps in Shoal's space for a job or an actor, deleted
  // by the head once that is over: the Python frontend's copies of a job's
  // functions, classes, packages and settings ("pyfn/<job id>/...",
  // "pyactor/", "pyenv/", "pyjob/"), which the job's actors still read
  // after it ends; and its note that some process keeps a handle of an
  // actor ("pykept/<actor id>"). Each returns how many keys went; an
  // error: the storage refused a delete.
  absl::StatusOr<int> DeleteJobKeys(const std::string& job_id);
  // Whether job `job_id` may have such keys: it has the namespace key a
  // Python driver writes first. One read: a job without it (a C++
  // driver's, a worker's own, one swept already) costs no scan.
  bool HasJobKeys(const std::string& job_id) const;
  absl::StatusOr<int> DeleteActorKeys(const std::string& actor_id);

 private:
  // Where a space's keys live: the storage table, and the prefix that a
  // namespace puts before them.
  struct Place {
    const char* table;
    std::string prefix;
  };
  static absl::StatusOr<Place> PlaceOf(const proto::KvSpace& space);
  // The space's keys (without the namespace's prefix) that start with
  // `prefix`.
  std::vector<std::string> KeysUnder(const Place& place,
                                     const std::string& prefix) const;

  TableStorage* const storage_;
};

}  // namespace shoal

#endif  // SHOAL_HEAD_KV_TABLE_H_
