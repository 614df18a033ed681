// Where the head keeps its tables (nodes, jobs, key-value pairs). Nothing else
// in the head knows how state is stored: durable backends (SQLite, Redis)
// implement this same interface.
//
// Threading: implementations are used from the head's event loop only.
#ifndef SHOAL_HEAD_TABLE_STORAGE_H_
#define SHOAL_HEAD_TABLE_STORAGE_H_

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"

namespace shoal {

// How far a write goes before Put and Delete return (`shoal start --head
// --storage-sync`; docs/design/durability.md).
enum class StorageSync {
  // Handed to the operating system (SQLite: WAL, synchronous=NORMAL; Redis:
  // an append-only file, any appendfsync): survives any crash of the head
  // (or of Redis); a crash or power loss of their host may lose the last
  // writes (Redis appendfsync everysec: at most about a second). No fsync
  // on the head's loop.
  kNormal,
  // On disk before the head answers (SQLite: synchronous=FULL; Redis:
  // appendfsync always): survives the host losing power too, at one fsync
  // per write, during which the head's loop waits.
  kFull,
};

// "normal" or "full"; anything else is an InvalidArgument error that says
// which are taken.
absl::Status ParseStorageSync(const std::string& text, StorageSync* sync);
const char* StorageSyncName(StorageSync sync);

class TableStorage {
 public:
  virtual ~TableStorage() = default;
  virtual absl::Status Put(const std::string& table, const std::string& key,
                           const std::string& value) = 0;
  virtual std::optional<std::string> Get(const std::string& table,
                                         const std::string& key) const = 0;
  virtual absl::Status Delete(const std::string& table,
                              const std::string& key) = 0;
  // Every row of `table`, ordered by key.
  virtual std::map<std::string, std::string> Scan(
      const std::string& table) const = 0;
  // True when the state lives outside the head's session folder (Redis),
  // so that a head on another temp dir or host may take it up: what the
  // head otherwise keeps only in that folder (jobs' output) is then kept
  // here too.
  virtual bool OutlivesSessionFolder() const { return false; }
};

// Keeps everything in memory: lost when the head stops.
std::unique_ptr<TableStorage> NewInMemoryTableStorage();

}  // namespace shoal

#endif  // SHOAL_HEAD_TABLE_STORAGE_H_
