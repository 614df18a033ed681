// The cluster's key-value store (KV_PUT, KV_GET): flat keys, byte values,
// kept in the head's storage (table "kv") so that a restarted head has them.
// Callers make namespaces with key prefixes ("<group>/rank0", say): the
// table gives a prefix no meaning.
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
  // the write, and nothing changed.
  absl::StatusOr<proto::KvPutReply> Put(const proto::KvPutRequest& request);
  proto::KvGetReply Get(const proto::KvGetRequest& request) const;

 private:
  TableStorage* const storage_;
};

}  // namespace shoal

#endif  // SHOAL_HEAD_KV_TABLE_H_
