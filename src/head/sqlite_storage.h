// The head's tables in one SQLite file (the default durable backend; see
// docs/design/durability.md). WAL journal; with StorageSync::kNormal
// (synchronous=NORMAL) Put and Delete return once the change is in the
// operating system's hands, so whatever the head acknowledged survives a
// crash of the head; with kFull (synchronous=FULL) once it is on disk, so
// it survives a crash of the host too.
#ifndef SHOAL_HEAD_SQLITE_STORAGE_H_
#define SHOAL_HEAD_SQLITE_STORAGE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "head/table_storage.h"

namespace shoal {

// Opens the database at `path`, creating it if absent. A file that is not
// a Shoal head database, or fails SQLite's integrity check, or cannot be
// opened, is an error that names the file and says what to do.
absl::StatusOr<std::unique_ptr<TableStorage>> OpenSqliteTableStorage(
    const std::string& path, StorageSync sync = StorageSync::kNormal);

}  // namespace shoal

#endif  // SHOAL_HEAD_SQLITE_STORAGE_H_
