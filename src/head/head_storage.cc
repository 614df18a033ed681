#include "head/head_storage.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/util.h"
#include "head/redis_storage.h"
#include "head/sqlite_storage.h"

namespace shoal {
namespace {

// The head's own table of single values (head.cc keeps the job counter in
// it too).
constexpr char kMetaTable[] = "meta";
constexpr char kTokenKey[] = "token_sha256";

}  // namespace

absl::StatusOr<std::unique_ptr<TableStorage>> OpenHeadStorage(
    const HeadOptions& options) {
  if (options.storage == "memory") return NewInMemoryTableStorage();
  std::unique_ptr<TableStorage> storage;
  std::string where;
  if (absl::StartsWith(options.storage, "redis://")) {
    ASSIGN_OR_RETURN(RedisAddress address, ParseRedisUrl(options.storage));
    where = address.Display();
    RedisStorageOptions redis;
    redis.sync = options.storage_sync;
    ASSIGN_OR_RETURN(storage, OpenRedisTableStorage(options.storage, redis));
  } else {
    where = options.storage.empty() ? options.session_dir + "/head.db"
                                    : options.storage;
    ASSIGN_OR_RETURN(storage,
                     OpenSqliteTableStorage(where, options.storage_sync));
  }
  SHOAL_LOG(INFO) << "the cluster's state is kept in " << where
                  << " (--storage-sync "
                  << StorageSyncName(options.storage_sync) << ")";
  if (options.token.empty()) return storage;
  const std::string mine = Sha256Hex(options.token);
  std::optional<std::string> kept = storage->Get(kMetaTable, kTokenKey);
  if (!kept.has_value()) {
    RETURN_IF_ERROR(storage->Put(kMetaTable, kTokenKey, mine));
  } else if (*kept != mine) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the cluster state in ", where,
        " is that of a cluster with another token: to take that cluster "
        "over, start this head with its token (--token, or SHOAL_TOKEN; "
        "`shoal start --head` printed it, and it is in the file `token` of "
        "the old head's session folder); to start a new cluster, give this "
        "head other storage"));
  }
  return storage;
}

}  // namespace shoal
