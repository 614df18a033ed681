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

std::unique_ptr<TableStorage> NewInMemoryTableStorage() {
  return std::make_unique<InMemoryTableStorage>();
}

}  // namespace shoal
