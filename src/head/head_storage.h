// Opens the storage a head was given (StorageOptions::storage): a
// `redis://` URL, `memory`, or a SQLite file (default
// <session_dir>/head.db), and checks that the state in it is this
// cluster's.
#ifndef SHOAL_HEAD_HEAD_STORAGE_H_
#define SHOAL_HEAD_HEAD_STORAGE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "head/table_storage.h"

namespace shoal {

// What a head's storage is, as its flags give it (HeadOptions has the
// same fields).
struct StorageOptions {
  // "" for <session_dir>/head.db (SQLite), a path for another SQLite file,
  // "memory" for none, or a `redis://` URL.
  std::string storage;
  std::string session_dir;
  // The cluster's token; empty: the state is not checked against one.
  std::string token;
  StorageSync sync = StorageSync::kNormal;
  // SQLite only: a damaged write-ahead log is set aside (head/wal_check.h)
  // instead of refusing to start.
  bool discard_wal = false;
};

// With StorageOptions::discard_wal, what was done with the write-ahead log is
// written to this file of the session folder, for `shoal start` to print.
inline constexpr char kDiscardedWalFile[] = "discarded_wal";

// State kept by a head of another cluster (another token) is refused: the
// agents and drivers of that cluster could not reach this head, which would
// then declare them all dead. The first head on new state records its
// token's SHA-256 there.
absl::StatusOr<std::unique_ptr<TableStorage>> OpenHeadStorage(
    const StorageOptions& options);

}  // namespace shoal

#endif  // SHOAL_HEAD_HEAD_STORAGE_H_
