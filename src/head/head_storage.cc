#include "head/head_storage.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "head/redis_storage.h"
#include "head/sqlite_storage.h"
#include "head/wal_check.h"

namespace shoal {
namespace {

// The head's own table of single values (head.cc keeps the job counter in
// it too).
constexpr char kMetaTable[] = "meta";
constexpr char kTokenKey[] = "token_sha256";

// --discard-wal: sets a damaged write-ahead log of `db_path` aside, says
// so in the log and in the session folder (kDiscardedWalFile).
absl::Status DiscardDamagedWal(const std::string& db_path,
                               const std::string& session_dir) {
  const std::string wal_path = db_path + "-wal";
  absl::StatusOr<WalCheck> wal = CheckWal(wal_path);
  if (!wal.ok()) {
    return absl::UnavailableError(absl::StrCat("the head's state in ", db_path,
                                               ": ", wal.status().message()));
  }
  std::string said;
  if (!wal->damaged()) {
    said = absl::StrCat(
        "--discard-wal: the write-ahead log ", wal_path,
        PathExists(wal_path)
            ? absl::StrCat(" is intact (committed transactions in it: ",
                           wal->transactions,
                           "), so it was kept and the head took up all of "
                           "its state")
            : " does not exist: nothing was set aside");
    SHOAL_LOG(INFO) << said;
  } else {
    ASSIGN_OR_RETURN(std::vector<std::string> moved, SetWalAside(db_path));
    said = absl::StrCat(
        "--discard-wal: the write-ahead log ", wal_path, " was damaged (",
        wal->damage, "); it was set aside as ", absl::StrJoin(moved, " and "),
        ", and the head starts from what ", db_path, " alone holds");
    SHOAL_LOG(WARNING) << said;
  }
  if (!session_dir.empty()) {
    WriteFile(session_dir + "/" + kDiscardedWalFile, said + "\n").IgnoreError();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TableStorage>> OpenHeadStorage(
    const StorageOptions& options) {
  if (options.storage == "memory") return NewInMemoryTableStorage();
  std::unique_ptr<TableStorage> storage;
  std::string where;
  if (absl::StartsWith(options.storage, "redis://")) {
    ASSIGN_OR_RETURN(RedisAddress address, ParseRedisUrl(options.storage));
    where = address.Display();
    RedisStorageOptions redis;
    redis.sync = options.sync;
    ASSIGN_OR_RETURN(storage, OpenRedisTableStorage(options.storage, redis));
  } else {
    where = options.storage.empty() ? options.session_dir + "/head.db"
                                    : options.storage;
    if (options.discard_wal) {
      RETURN_IF_ERROR(DiscardDamagedWal(where, options.session_dir));
    }
    ASSIGN_OR_RETURN(storage, OpenSqliteTableStorage(where, options.sync));
  }
  SHOAL_LOG(INFO) << "the cluster's state is kept in " << where
                  << " (--storage-sync " << StorageSyncName(options.sync)
                  << ")";
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
