// The head's Redis storage against a real redis-server (ctest label
// `integration`).
#include "head/redis_storage.h"

#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/redis_server.h"

namespace shoal {
namespace {

using ::shoal::testing::RedisServer;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Optional;
using ::testing::Pair;

class RedisTableStorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = RedisServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }
  std::unique_ptr<TableStorage> Open(int db = 0) {
    auto storage = OpenRedisTableStorage(server_->url(db));
    EXPECT_TRUE(storage.ok()) << storage.status();
    return storage.ok() ? std::move(*storage) : nullptr;
  }
  std::unique_ptr<RedisServer> server_;
};

TEST_F(RedisTableStorageTest, WhatWasWrittenIsThereAfterReopening) {
  const std::string binary("a\0b\xff", 4);
  {
    auto s = Open();
    ASSERT_NE(s, nullptr);
    EXPECT_TRUE(s->OutlivesSessionFolder());
    ASSERT_TRUE(s->Put("kv", "binary", binary).ok());
    ASSERT_TRUE(s->Put("kv", std::string("key\0nul", 7), "v").ok());
    ASSERT_TRUE(s->Put("kv", "empty", "").ok());
    ASSERT_TRUE(s->Put("nodes", "n1", "alive").ok());
    ASSERT_TRUE(s->Put("nodes", "n1", "dead").ok());
    ASSERT_TRUE(s->Put("nodes", "n2", "alive").ok());
    ASSERT_TRUE(s->Delete("nodes", "n2").ok());
    ASSERT_TRUE(s->Delete("nodes", "never-there").ok());
    EXPECT_THAT(s->Get("kv", "binary"), Optional(binary));
  }
  auto s = Open();
  ASSERT_NE(s, nullptr);
  EXPECT_THAT(s->Get("kv", "binary"), Optional(binary));
  EXPECT_THAT(s->Get("kv", std::string("key\0nul", 7)),
              Optional(std::string("v")));
  EXPECT_THAT(s->Get("kv", "empty"), Optional(std::string()));
  EXPECT_EQ(s->Get("kv", "missing"), std::nullopt);
  EXPECT_THAT(s->Scan("nodes"), ElementsAre(Pair("n1", "dead")));
  EXPECT_TRUE(s->Scan("no_such_table").empty());
  // One hash per table, beside the schema marker and the owner counter.
  auto keys = server_->Cli({"--raw", "KEYS", "shoal:*"});
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_THAT(*keys, HasSubstr("shoal:table:kv"));
  EXPECT_THAT(*keys, HasSubstr("shoal:table:nodes"));
  EXPECT_THAT(*keys, HasSubstr("shoal:schema"));
}

TEST_F(RedisTableStorageTest, KeysOfAScanAreOrdered) {
  {
    auto s = Open();
    ASSERT_NE(s, nullptr);
    for (const char* k : {"b", "c", "a", "aa"}) {
      ASSERT_TRUE(s->Put("t", k, k).ok());
    }
  }
  auto s = Open();
  ASSERT_NE(s, nullptr);
  EXPECT_THAT(s->Scan("t"), ElementsAre(Pair("a", "a"), Pair("aa", "aa"),
                                        Pair("b", "b"), Pair("c", "c")));
}

TEST_F(RedisTableStorageTest, DatabasesAreSeparate) {
  auto zero = Open(0);
  auto three = Open(3);
  ASSERT_NE(zero, nullptr);
  ASSERT_NE(three, nullptr);
  ASSERT_TRUE(three->Put("kv", "k", "3").ok());
  EXPECT_EQ(Open(0)->Get("kv", "k"), std::nullopt);
  EXPECT_THAT(Open(3)->Get("kv", "k"), Optional(std::string("3")));
}

TEST_F(RedisTableStorageTest, BadUrlsAreClearErrors) {
  for (const char* url :
       {"redis:/localhost:6379", "http://localhost:6379", "redis://localhost",
        "redis://:6379", "redis://localhost:port", "redis://localhost:70000",
        "redis://localhost:6379/x", "redis://user:pw@localhost:6379",
        "redis://localhost:6379/0/1"}) {
    auto s = OpenRedisTableStorage(url);
    ASSERT_FALSE(s.ok()) << url;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << url;
    EXPECT_THAT(s.status().message(), HasSubstr("redis://HOST:PORT")) << url;
  }
  auto hidden = ParseRedisUrl("redis://user:secret@localhost:6379");
  ASSERT_FALSE(hidden.ok());
  EXPECT_THAT(hidden.status().message(), Not(HasSubstr("secret")));
  auto a = ParseRedisUrl("redis://:secret@10.0.0.5:6380/2");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->host, "10.0.0.5");
  EXPECT_EQ(a->port, 6380);
  EXPECT_EQ(a->password, "secret");
  EXPECT_EQ(a->db, 2);
  EXPECT_EQ(a->Display(), "redis://:***@10.0.0.5:6380/2");
  auto v6 = ParseRedisUrl("redis://[::1]:6379");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->host, "::1");
}

TEST_F(RedisTableStorageTest, AnUnreachableServerIsAClearError) {
  const std::string url = server_->url();
  server_->Kill();
  auto s = OpenRedisTableStorage(url);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.status().message(), HasSubstr(url));
  EXPECT_THAT(s.status().message(), HasSubstr("start redis-server"));
}

TEST_F(RedisTableStorageTest, ForeignDataAndANewerSchemaAreRefused) {
  ASSERT_TRUE(server_->Cli({"SET", "shoal:something", "else"}).ok());
  auto foreign = OpenRedisTableStorage(server_->url());
  ASSERT_FALSE(foreign.ok());
  EXPECT_THAT(foreign.status().message(), HasSubstr("not a Shoal head's"));
  EXPECT_THAT(foreign.status().message(), HasSubstr("database of its own"));

  ASSERT_TRUE(server_
                  ->Cli({"-n", "1", "SET", "shoal:schema",
                         "shoal head state, schema 99"})
                  .ok());
  auto newer = OpenRedisTableStorage(server_->url(1));
  ASSERT_FALSE(newer.ok());
  EXPECT_THAT(newer.status().message(), HasSubstr("newer Shoal"));

  ASSERT_TRUE(server_->Cli({"-n", "2", "HSET", "shoal:schema", "a", "b"}).ok());
  auto wrong_type = OpenRedisTableStorage(server_->url(2));
  ASSERT_FALSE(wrong_type.ok());
  EXPECT_THAT(wrong_type.status().message(), HasSubstr("not a Shoal head's"));
}

TEST_F(RedisTableStorageTest, WritesAreAsDurableAsAskedOrWarnedAbout) {
  // An append-only file (everysec) keeps what a crash of Redis would lose:
  // enough for --storage-sync normal.
  std::string warning = "unset";
  ASSERT_TRUE(OpenRedisTableStorage(server_->url(), {}, &warning).ok());
  EXPECT_EQ(warning, "");
  // `full` wants each write fsynced before the reply.
  RedisStorageOptions full;
  full.sync = StorageSync::kFull;
  ASSERT_TRUE(OpenRedisTableStorage(server_->url(), full, &warning).ok());
  EXPECT_THAT(warning, HasSubstr("--appendfsync always"));
  ASSERT_TRUE(server_->Cli({"CONFIG", "SET", "appendfsync", "always"}).ok());
  ASSERT_TRUE(OpenRedisTableStorage(server_->url(), full, &warning).ok());
  EXPECT_EQ(warning, "");
  // No append-only file: a restart of Redis loses everything.
  ASSERT_TRUE(server_->Cli({"CONFIG", "SET", "appendonly", "no"}).ok());
  ASSERT_TRUE(OpenRedisTableStorage(server_->url(), {}, &warning).ok());
  EXPECT_THAT(warning, HasSubstr("lost if Redis crashes"));
  EXPECT_THAT(warning, HasSubstr("--appendonly yes"));
}

TEST_F(RedisTableStorageTest, ARestartedServerIsReconnectedTo) {
  // Written to the append-only file before each answer: with the default
  // (everysec) a busy Redis may put off the write, and its SIGKILL below
  // then loses what it acknowledged (the head warns of that setting).
  ASSERT_TRUE(server_->Cli({"CONFIG", "SET", "appendfsync", "always"}).ok());
  auto s = Open();
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->Put("kv", "before", "1").ok());
  ASSERT_TRUE(server_->Restart().ok());
  // The first call after the restart finds its connection closed and makes
  // it again; what was written before is still there (append-only file).
  absl::Status after = s->Put("kv", "after", "2");
  ASSERT_TRUE(after.ok()) << after;
  auto again = Open();
  ASSERT_NE(again, nullptr);
  EXPECT_THAT(again->Scan("kv"),
              ElementsAre(Pair("after", "2"), Pair("before", "1")));
}

TEST_F(RedisTableStorageTest, AKilledServerMakesCallsFailNotCrash) {
  auto s = Open();
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->Put("kv", "k", "v").ok());
  server_->Kill();
  absl::Status put = s->Put("kv", "k2", "v2");
  EXPECT_EQ(put.code(), absl::StatusCode::kUnavailable) << put;
  EXPECT_THAT(put.message(), HasSubstr(server_->url()));
  EXPECT_FALSE(s->Delete("kv", "k").ok());
  // What was written is still served; what failed is not.
  EXPECT_THAT(s->Get("kv", "k"), Optional(std::string("v")));
  EXPECT_EQ(s->Get("kv", "k2"), std::nullopt);
}

TEST_F(RedisTableStorageTest, AHeadThatWasTakenOverCannotWrite) {
  auto old_head = Open();
  auto new_head = Open();
  ASSERT_NE(old_head, nullptr);
  ASSERT_NE(new_head, nullptr);
  absl::Status put = old_head->Put("kv", "k", "old");
  EXPECT_EQ(put.code(), absl::StatusCode::kFailedPrecondition) << put;
  EXPECT_THAT(put.message(), HasSubstr("another head took over"));
  ASSERT_TRUE(new_head->Put("kv", "k", "new").ok());
  EXPECT_THAT(Open()->Get("kv", "k"), Optional(std::string("new")));
}

TEST_F(RedisTableStorageTest, StateLostByTheServerStopsWrites) {
  auto s = Open();
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(server_->Cli({"FLUSHALL"}).ok());
  absl::Status put = s->Put("kv", "k", "v");
  EXPECT_EQ(put.code(), absl::StatusCode::kDataLoss) << put;
  EXPECT_THAT(put.message(), HasSubstr("no longer holds"));
}

}  // namespace
}  // namespace shoal
