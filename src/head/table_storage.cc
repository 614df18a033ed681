#include "head/table_storage.h"

namespace shoal {
namespace {

class InMemoryTableStorage : public TableStorage {
 public:
  absl::Status Put(const std::string& table, const std::string& key,
                   const std::string& value) override {
    tables_[table][key] = value;
    return absl::OkStatus();
  }
  std::optional<std::string> Get(const std::string& table,
                                 const std::string& key) const override {
    auto t = tables_.find(table);
    if (t == tables_.end()) return std::nullopt;
    auto it = t->second.find(key);
    if (it == t->second.end()) return std::nullopt;
    return it->second;
  }
  absl::Status Delete(const std::string& table,
                      const std::string& key) override {
    auto t = tables_.find(table);
    if (t != tables_.end()) t->second.erase(key);
    return absl::OkStatus();
  }
  std::map<std::string, std::string> Scan(
      const std::string& table) const override {
    auto t = tables_.find(table);
    if (t == tables_.end()) return {};
    return t->second;
  }

 private:
  std::map<std::string, std::map<std::string, std::string>> tables_;
};

}  // namespace

absl::Status ParseStorageSync(const std::string& text, StorageSync* sync) {
  if (text == "normal") {
    *sync = StorageSync::kNormal;
  } else if (text == "full") {
    *sync = StorageSync::kFull;
  } else {
    return absl::InvalidArgumentError(
        "--storage-sync is `normal` (a write survives a crash of the head) or "
        "`full` (it survives the host losing power too: one fsync per write), "
        "not `" +
        text + "`");
  }
  return absl::OkStatus();
}

const char* StorageSyncName(StorageSync sync) {
  return sync == StorageSync::kFull ? "full" : "normal";
}

std::unique_ptr<TableStorage> NewInMemoryTableStorage() {
  return std::make_unique<InMemoryTableStorage>();
}

}  // namespace shoal
