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
};

// Keeps everything in memory: lost when the head stops.
std::unique_ptr<TableStorage> NewInMemoryTableStorage();

}  // namespace shoal

#endif  // SHOAL_HEAD_TABLE_STORAGE_H_
