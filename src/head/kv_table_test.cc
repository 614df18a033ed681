#include "head/kv_table.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "head/table_storage.h"

namespace shoal {
namespace {

using ::testing::HasSubstr;

proto::KvSpace UserSpace(const std::string& ns) {
  proto::KvSpace space;
  space.set_user(true);
  space.set_ns(ns);
  return space;
}

proto::KvPutRequest Put(const std::string& key, const std::string& value,
                        bool overwrite,
                        const proto::KvSpace& space = proto::KvSpace()) {
  proto::KvPutRequest r;
  r.set_key(key);
  r.set_value(value);
  r.set_overwrite(overwrite);
  *r.mutable_space() = space;
  return r;
}

proto::KvGetRequest Get(const std::string& key,
                        const proto::KvSpace& space = proto::KvSpace()) {
  proto::KvGetRequest r;
  r.set_key(key);
  *r.mutable_space() = space;
  return r;
}

// The value under `key`, nullopt when it has none.
std::optional<std::string> Read(const KvTable& kv, const std::string& key,
                                const proto::KvSpace& space = {}) {
  absl::StatusOr<proto::KvGetReply> reply = kv.Get(Get(key, space));
  EXPECT_TRUE(reply.ok()) << reply.status();
  if (!reply.ok() || !reply->found()) return std::nullopt;
  return reply->value();
}

int64_t Del(KvTable& kv, const std::string& key, bool by_prefix,
            const proto::KvSpace& space) {
  proto::KvDelRequest r;
  r.set_key(key);
  r.set_by_prefix(by_prefix);
  *r.mutable_space() = space;
  absl::StatusOr<proto::KvDelReply> reply = kv.Del(r);
  EXPECT_TRUE(reply.ok()) << reply.status();
  return reply.ok() ? reply->deleted() : -1;
}

std::vector<std::string> Keys(const KvTable& kv, const std::string& prefix,
                              const proto::KvSpace& space) {
  proto::KvKeysRequest r;
  r.set_prefix(prefix);
  *r.mutable_space() = space;
  absl::StatusOr<proto::KvKeysReply> reply = kv.Keys(r);
  EXPECT_TRUE(reply.ok()) << reply.status();
  if (!reply.ok()) return {};
  return {reply->keys().begin(), reply->keys().end()};
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
  EXPECT_EQ(Read(kv, "k"), "v1");

  absl::StatusOr<proto::KvPutReply> replaced = kv.Put(Put("k", "v3", true));
  ASSERT_TRUE(replaced.ok());
  EXPECT_FALSE(replaced->added());
  EXPECT_EQ(Read(kv, "k"), "v3");
}

TEST(KvTableTest, KeysAreFlatSoPrefixesActAsNamespaces) {
  std::unique_ptr<TableStorage> storage = NewInMemoryTableStorage();
  KvTable kv(storage.get());
  ASSERT_TRUE(kv.Put(Put("groupA/rank0", "a", false)).ok());
  ASSERT_TRUE(kv.Put(Put("groupB/rank0", "b", false)).ok());
  ASSERT_TRUE(kv.Put(Put("empty", "", false)).ok());
  EXPECT_EQ(Read(kv, "groupA/rank0"), "a");
  EXPECT_EQ(Read(kv, "groupB/rank0"), "b");
  EXPECT_EQ(Read(kv, "groupA"), std::nullopt);
  EXPECT_EQ(Read(kv, "rank0"), std::nullopt);
  // An empty value is a value.
  EXPECT_EQ(Read(kv, "empty"), "");
  EXPECT_EQ(Read(kv, "missing"), std::nullopt);
}

TEST(KvTableTest, PairsOutliveTheTableInItsStorage) {
  std::unique_ptr<TableStorage> storage = NewInMemoryTableStorage();
  ASSERT_TRUE(KvTable(storage.get()).Put(Put("k", "kept", false)).ok());
  KvTable again(storage.get());
  EXPECT_EQ(Read(again, "k"), "kept");
  EXPECT_FALSE(again.Put(Put("k", "other", false))->added());
}

TEST(KvTableTest, AWriteTheStorageRefusesIsAnError) {
  RefusingStorage storage;
  KvTable kv(&storage);
  absl::StatusOr<proto::KvPutReply> put = kv.Put(Put("k", "v", true));
  ASSERT_FALSE(put.ok());
  EXPECT_EQ(put.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Read(kv, "k"), std::nullopt);
  proto::KvDelRequest del;
  del.set_key("k");
  del.set_by_prefix(true);
  // Nothing to delete: nothing is written, and that is no error.
  absl::StatusOr<proto::KvDelReply> none = kv.Del(del);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->deleted(), 0);
}

TEST(KvTableTest, TheUsersSpaceAndItsNamespacesNeverSeeEachOther) {
  std::unique_ptr<TableStorage> storage = NewInMemoryTableStorage();
  KvTable kv(storage.get());
  const proto::KvSpace shoal_space, user = UserSpace(""),
                                    team = UserSpace("team");
  ASSERT_TRUE(kv.Put(Put("k", "shoal", false, shoal_space)).ok());
  ASSERT_TRUE(kv.Put(Put("k", "default", false, user)).ok());
  ASSERT_TRUE(kv.Put(Put("k", "team", false, team)).ok());
  EXPECT_EQ(Read(kv, "k", shoal_space), "shoal");
  EXPECT_EQ(Read(kv, "k", user), "default");
  EXPECT_EQ(Read(kv, "k", team), "team");
  // A namespace is no key prefix: "te" + "am..." is not "team".
  ASSERT_TRUE(kv.Put(Put("amk", "te", false, UserSpace("te"))).ok());
  EXPECT_EQ(Keys(kv, "", team), std::vector<std::string>{"k"});
  EXPECT_EQ(Keys(kv, "", UserSpace("te")), std::vector<std::string>{"amk"});
  EXPECT_EQ(Del(kv, "k", false, team), 1);
  EXPECT_EQ(Read(kv, "k", team), std::nullopt);
  EXPECT_EQ(Read(kv, "k", user), "default");
  EXPECT_EQ(Read(kv, "k", shoal_space), "shoal");
}

TEST(KvTableTest, KeysAreAnyBytes) {
  std::unique_ptr<TableStorage> storage = NewInMemoryTableStorage();
  KvTable kv(storage.get());
  const proto::KvSpace user = UserSpace("\xff ns");
  const std::string odd("\xff\0\xfe", 3);
  ASSERT_TRUE(kv.Put(Put(odd, std::string("\0v", 2), false, user)).ok());
  EXPECT_EQ(Read(kv, odd, user), std::string("\0v", 2));
  EXPECT_EQ(Read(kv, std::string("\xff", 1), user), std::nullopt);
  EXPECT_EQ(Keys(kv, std::string("\xff", 1), user),
            std::vector<std::string>{odd});
}

TEST(KvTableTest, DeletesOneKeyOrEveryKeyUnderAPrefix) {
  std::unique_ptr<TableStorage> storage = NewInMemoryTableStorage();
  KvTable kv(storage.get());
  const proto::KvSpace user = UserSpace("");
  for (const char* key : {"a/1", "a/2", "a/3", "ab", "b"}) {
    ASSERT_TRUE(kv.Put(Put(key, "v", false, user)).ok());
  }
  EXPECT_EQ(Keys(kv, "a/", user),
            (std::vector<std::string>{"a/1", "a/2", "a/3"}));
  EXPECT_EQ(Del(kv, "a/", false, user), 0);  // no key "a/" itself
  EXPECT_EQ(Del(kv, "a/2", false, user), 1);
  EXPECT_EQ(Del(kv, "a/2", false, user), 0);
  EXPECT_EQ(Del(kv, "a/", true, user), 2);
  EXPECT_EQ(Keys(kv, "", user), (std::vector<std::string>{"ab", "b"}));
  EXPECT_EQ(Del(kv, "", true, user), 2);
  EXPECT_EQ(Keys(kv, "", user), std::vector<std::string>{});
}

// A job's keys are the Python frontend's groups under its id alone: not
// another job's whose id starts the same, not another group, not the users'
// space; an actor's is its handle note.
TEST(KvTableTest, AJobsAndAnActorsKeysGoWithThem) {
  std::unique_ptr<TableStorage> storage = NewInMemoryTableStorage();
  KvTable kv(storage.get());
  const std::vector<std::string> of_job1 = {
      "pyjob/job1/namespace", "pyfn/job1/abc/__main__/f",
      "pyactor/job1/abc/__main__/A", "pyenv/job1/abc/folder"};
  const std::vector<std::string> others = {
      "pyjob/job10/namespace", "pyfn/job10/abc/__main__/f", "launch/job1/port",
      "pykept/0123456789abcdef", "cluster/version"};
  for (const auto* keys : {&of_job1, &others}) {
    for (const std::string& key : *keys) {
      ASSERT_TRUE(kv.Put(Put(key, "v", false)).ok());
    }
  }
  ASSERT_TRUE(
      kv.Put(Put("pyfn/job1/abc/__main__/f", "v", false, UserSpace(""))).ok());

  EXPECT_TRUE(kv.HasJobKeys("job1"));
  absl::StatusOr<int> deleted = kv.DeleteJobKeys("job1");
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 4);
  for (const std::string& key : of_job1) EXPECT_EQ(Read(kv, key), std::nullopt);
  for (const std::string& key : others) EXPECT_EQ(Read(kv, key), "v") << key;
  EXPECT_EQ(Read(kv, "pyfn/job1/abc/__main__/f", UserSpace("")), "v");
  EXPECT_FALSE(kv.HasJobKeys("job1"));
  EXPECT_TRUE(kv.HasJobKeys("job10"));

  EXPECT_EQ(kv.DeleteActorKeys("0123456789abcdef").value_or(-1), 1);
  EXPECT_EQ(Read(kv, "pykept/0123456789abcdef"), std::nullopt);
  EXPECT_EQ(kv.DeleteActorKeys("0123456789abcdef").value_or(-1), 0);
}

// Only a job with a Python driver's namespace key is looked for (its
// driver writes it first); the others cost one read.
TEST(KvTableTest, AJobWithoutANamespaceKeyHasNoKeysToDelete) {
  std::unique_ptr<TableStorage> storage = NewInMemoryTableStorage();
  KvTable kv(storage.get());
  ASSERT_TRUE(kv.Put(Put("pyfn/job2/abc/m/f", "v", false)).ok());
  EXPECT_FALSE(kv.HasJobKeys("job2"));
  EXPECT_EQ(kv.DeleteJobKeys("job2").value_or(-1), 0);
  EXPECT_EQ(Read(kv, "pyfn/job2/abc/m/f"), "v");
}

TEST(KvTableTest, ANamespaceWithANulByteIsRefused) {
  std::unique_ptr<TableStorage> storage = NewInMemoryTableStorage();
  KvTable kv(storage.get());
  const proto::KvSpace bad = UserSpace(std::string("a\0b", 3));
  absl::StatusOr<proto::KvPutReply> put = kv.Put(Put("k", "v", true, bad));
  ASSERT_FALSE(put.ok());
  EXPECT_EQ(put.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(put.status().message()), HasSubstr("NUL"));
  EXPECT_FALSE(kv.Get(Get("k", bad)).ok());
  // Nor does Shoal's own space take a namespace.
  proto::KvSpace shoal_with_ns;
  shoal_with_ns.set_ns("x");
  EXPECT_FALSE(kv.Put(Put("k", "v", true, shoal_with_ns)).ok());
  EXPECT_EQ(Keys(kv, "", UserSpace("")), std::vector<std::string>{});
}

}  // namespace
}  // namespace shoal
