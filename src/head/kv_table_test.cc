#include "head/kv_table.h"

#include <memory>

#include "gtest/gtest.h"
#include "head/table_storage.h"

namespace shoal {
namespace {

proto::KvPutRequest Put(const std::string& key, const std::string& value,
                        bool overwrite) {
  proto::KvPutRequest r;
  r.set_key(key);
  r.set_value(value);
  r.set_overwrite(overwrite);
  return r;
}

proto::KvGetRequest Get(const std::string& key) {
  proto::KvGetRequest r;
  r.set_key(key);
  return r;
}

// Storage that refuses every write.
class RefusingStorage : public TableStorage {
 public:
  absl::Status Put(const std::string&, const std::string&,
                   const std::string&) override {
    return absl::UnavailableError("disk full");
  }
  std::optional<std::string> Get(const std::string&,
                                 const std::string&) const override {
    return std::nullopt;
  }
  absl::Status Delete(const std::string&, const std::string&) override {
    return absl::UnavailableError("disk full");
  }
  std::map<std::string, std::string> Scan(const std::string&) const override {
    return {};
  }
};

TEST(KvTableTest, OverwritesOnlyWhenAsked) {
  std::unique_ptr<TableStorage> storage = NewInMemoryTableStorage();
  KvTable kv(storage.get());
  absl::StatusOr<proto::KvPutReply> first = kv.Put(Put("k", "v1", false));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->added());

  absl::StatusOr<proto::KvPutReply> kept = kv.Put(Put("k", "v2", false));
  ASSERT_TRUE(kept.ok());
  EXPECT_FALSE(kept->added());
  EXPECT_EQ(kv.Get(Get("k")).value(), "v1");

  absl::StatusOr<proto::KvPutReply> replaced = kv.Put(Put("k", "v3", true));
  ASSERT_TRUE(replaced.ok());
  EXPECT_FALSE(replaced->added());
  EXPECT_EQ(kv.Get(Get("k")).value(), "v3");
}

TEST(KvTableTest, KeysAreFlatSoPrefixesActAsNamespaces) {
  std::unique_ptr<TableStorage> storage = NewInMemoryTableStorage();
  KvTable kv(storage.get());
  ASSERT_TRUE(kv.Put(Put("groupA/rank0", "a", false)).ok());
  ASSERT_TRUE(kv.Put(Put("groupB/rank0", "b", false)).ok());
  ASSERT_TRUE(kv.Put(Put("empty", "", false)).ok());
  EXPECT_EQ(kv.Get(Get("groupA/rank0")).value(), "a");
  EXPECT_EQ(kv.Get(Get("groupB/rank0")).value(), "b");
  EXPECT_FALSE(kv.Get(Get("groupA")).found());
  EXPECT_FALSE(kv.Get(Get("rank0")).found());
  // An empty value is a value.
  EXPECT_TRUE(kv.Get(Get("empty")).found());
  EXPECT_FALSE(kv.Get(Get("missing")).found());
  EXPECT_EQ(kv.Get(Get("missing")).value(), "");
}

TEST(KvTableTest, PairsOutliveTheTableInItsStorage) {
  std::unique_ptr<TableStorage> storage = NewInMemoryTableStorage();
  ASSERT_TRUE(KvTable(storage.get()).Put(Put("k", "kept", false)).ok());
  KvTable again(storage.get());
  EXPECT_EQ(again.Get(Get("k")).value(), "kept");
  EXPECT_FALSE(again.Put(Put("k", "other", false))->added());
}

TEST(KvTableTest, AWriteTheStorageRefusesIsAnError) {
  RefusingStorage storage;
  KvTable kv(&storage);
  absl::StatusOr<proto::KvPutReply> put = kv.Put(Put("k", "v", true));
  ASSERT_FALSE(put.ok());
  EXPECT_EQ(put.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(kv.Get(Get("k")).found());
}

}  // namespace
}  // namespace shoal
