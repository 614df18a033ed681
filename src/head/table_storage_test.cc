#include "head/table_storage.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Optional;
using ::testing::Pair;

class InMemoryTableStorageTest : public ::testing::Test {
 protected:
  std::unique_ptr<TableStorage> storage_ = NewInMemoryTableStorage();
};

TEST_F(InMemoryTableStorageTest, PutThenGetReturnsTheValue) {
  ASSERT_TRUE(storage_->Put("nodes", "n1", "alive").ok());
  EXPECT_THAT(storage_->Get("nodes", "n1"), Optional(std::string("alive")));
}

TEST_F(InMemoryTableStorageTest, StoresEmptyAndBinaryValues) {
  const std::string binary("a\0b\xff", 4);
  ASSERT_TRUE(storage_->Put("kv", "empty", "").ok());
  ASSERT_TRUE(storage_->Put("kv", "binary", binary).ok());
  EXPECT_THAT(storage_->Get("kv", "empty"), Optional(std::string()));
  EXPECT_THAT(storage_->Get("kv", "binary"), Optional(binary));
}

TEST_F(InMemoryTableStorageTest, PutOverwrites) {
  ASSERT_TRUE(storage_->Put("jobs", "j1", "running").ok());
  ASSERT_TRUE(storage_->Put("jobs", "j1", "finished").ok());
  EXPECT_THAT(storage_->Get("jobs", "j1"), Optional(std::string("finished")));
  EXPECT_THAT(storage_->Scan("jobs"), ElementsAre(Pair("j1", "finished")));
}

TEST_F(InMemoryTableStorageTest, MissingKeysAndTablesAreEmpty) {
  ASSERT_TRUE(storage_->Put("nodes", "n1", "alive").ok());
  EXPECT_EQ(storage_->Get("nodes", "n2"), std::nullopt);
  EXPECT_EQ(storage_->Get("no_such_table", "n1"), std::nullopt);
  EXPECT_THAT(storage_->Scan("no_such_table"), IsEmpty());
}

TEST_F(InMemoryTableStorageTest, DeleteRemovesOnlyThatKey) {
  ASSERT_TRUE(storage_->Put("kv", "a", "1").ok());
  ASSERT_TRUE(storage_->Put("kv", "b", "2").ok());
  ASSERT_TRUE(storage_->Delete("kv", "a").ok());
  EXPECT_EQ(storage_->Get("kv", "a"), std::nullopt);
  EXPECT_THAT(storage_->Scan("kv"), ElementsAre(Pair("b", "2")));
}

TEST_F(InMemoryTableStorageTest, DeletingWhatIsNotThereSucceeds) {
  EXPECT_TRUE(storage_->Delete("no_such_table", "k").ok());
  ASSERT_TRUE(storage_->Put("kv", "a", "1").ok());
  EXPECT_TRUE(storage_->Delete("kv", "missing").ok());
  EXPECT_THAT(storage_->Scan("kv"), ElementsAre(Pair("a", "1")));
}

TEST_F(InMemoryTableStorageTest, PutAfterDeleteStoresAgain) {
  ASSERT_TRUE(storage_->Put("kv", "a", "1").ok());
  ASSERT_TRUE(storage_->Delete("kv", "a").ok());
  ASSERT_TRUE(storage_->Put("kv", "a", "2").ok());
  EXPECT_THAT(storage_->Get("kv", "a"), Optional(std::string("2")));
}

TEST_F(InMemoryTableStorageTest, ScanIsOrderedByKey) {
  // Inserted out of order; byte order puts upper case before lower case.
  for (const char* key : {"node_b", "node_a", "Node_z", "node_10", "node_1"}) {
    ASSERT_TRUE(storage_->Put("nodes", key, std::string("v_") + key).ok());
  }
  EXPECT_THAT(
      storage_->Scan("nodes"),
      ElementsAre(Pair("Node_z", "v_Node_z"), Pair("node_1", "v_node_1"),
                  Pair("node_10", "v_node_10"), Pair("node_a", "v_node_a"),
                  Pair("node_b", "v_node_b")));
}

TEST_F(InMemoryTableStorageTest, ScanReturnsASnapshot) {
  ASSERT_TRUE(storage_->Put("kv", "a", "1").ok());
  std::map<std::string, std::string> before = storage_->Scan("kv");
  ASSERT_TRUE(storage_->Put("kv", "b", "2").ok());
  ASSERT_TRUE(storage_->Delete("kv", "a").ok());
  EXPECT_THAT(before, ElementsAre(Pair("a", "1")));
}

TEST_F(InMemoryTableStorageTest, TablesAreIndependent) {
  ASSERT_TRUE(storage_->Put("nodes", "k", "node value").ok());
  ASSERT_TRUE(storage_->Put("jobs", "k", "job value").ok());
  EXPECT_THAT(storage_->Get("nodes", "k"), Optional(std::string("node value")));
  EXPECT_THAT(storage_->Get("jobs", "k"), Optional(std::string("job value")));

  ASSERT_TRUE(storage_->Delete("nodes", "k").ok());
  EXPECT_EQ(storage_->Get("nodes", "k"), std::nullopt);
  EXPECT_THAT(storage_->Get("jobs", "k"), Optional(std::string("job value")));
  EXPECT_THAT(storage_->Scan("nodes"), IsEmpty());
  EXPECT_THAT(storage_->Scan("jobs"), ElementsAre(Pair("k", "job value")));
}

TEST_F(InMemoryTableStorageTest, InstancesDoNotShareState) {
  std::unique_ptr<TableStorage> other = NewInMemoryTableStorage();
  ASSERT_TRUE(storage_->Put("kv", "a", "1").ok());
  EXPECT_EQ(other->Get("kv", "a"), std::nullopt);
}

}  // namespace
}  // namespace shoal
