// Opens the storage a head was given (HeadOptions::storage): a
// `redis://` URL, `memory`, or a SQLite file (default
// <session_dir>/head.db), and checks that the state in it is this
// cluster's.
#ifndef SHOAL_HEAD_HEAD_STORAGE_H_
#define SHOAL_HEAD_HEAD_STORAGE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "head/head.h"
#include "head/table_storage.h"

namespace shoal {

// With HeadOptions::discard_wal, what was done with the write-ahead log is
// written to this file of the session folder, for `shoal start` to print.
inline constexpr char kDiscardedWalFile[] = "discarded_wal";

// State kept by a head of another cluster (another token) is refused: the
// agents and drivers of that cluster could not reach this head, which would
// then declare them all dead. The first head on new state records its
// token's SHA-256 there.
absl::StatusOr<std::unique_ptr<TableStorage>> OpenHeadStorage(
    const HeadOptions& options);

}  // namespace shoal

#endif  // SHOAL_HEAD_HEAD_STORAGE_H_
