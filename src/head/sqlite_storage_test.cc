#include "head/sqlite_storage.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "head/wal_check.h"

namespace shoal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Optional;
using ::testing::Pair;
using ::testing::SizeIs;

class SqliteTableStorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shoal-sqlite-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/head.db";
  }
  void TearDown() override {
    std::string rm = "rm -rf '" + dir_ + "'";
    ASSERT_EQ(system(rm.c_str()), 0);
  }
  std::unique_ptr<TableStorage> Open() {
    auto storage = OpenSqliteTableStorage(path_);
    EXPECT_TRUE(storage.ok()) << storage.status();
    return storage.ok() ? std::move(*storage) : nullptr;
  }

  std::string dir_, path_;
};

TEST_F(SqliteTableStorageTest, WhatWasWrittenIsThereAfterReopening) {
  const std::string binary("a\0b\xff", 4);
  {
    auto s = Open();
    ASSERT_TRUE(s->Put("kv", "binary", binary).ok());
    ASSERT_TRUE(s->Put("kv", "empty", "").ok());
    ASSERT_TRUE(s->Put("nodes", "n1", "alive").ok());
    ASSERT_TRUE(s->Put("nodes", "n1", "dead").ok());
    ASSERT_TRUE(s->Put("nodes", "n2", "alive").ok());
    ASSERT_TRUE(s->Delete("nodes", "n2").ok());
    ASSERT_TRUE(s->Delete("nodes", "never-there").ok());
  }
  auto s = Open();
  EXPECT_THAT(s->Get("kv", "binary"), Optional(binary));
  EXPECT_THAT(s->Get("kv", "empty"), Optional(std::string()));
  EXPECT_EQ(s->Get("kv", "missing"), std::nullopt);
  EXPECT_THAT(s->Scan("nodes"), ElementsAre(Pair("n1", "dead")));
  EXPECT_TRUE(s->Scan("no_such_table").empty());
}

TEST_F(SqliteTableStorageTest, KeysOfAScanAreOrdered) {
  auto s = Open();
  for (const char* k : {"b", "c", "a"}) ASSERT_TRUE(s->Put("t", k, k).ok());
  EXPECT_THAT(s->Scan("t"),
              ElementsAre(Pair("a", "a"), Pair("b", "b"), Pair("c", "c")));
}

TEST_F(SqliteTableStorageTest, ACommittedWriteSurvivesAProcessThatDies) {
  // A child writes and is killed at once after Put returned: the row is in
  // the write-ahead log (handed to the kernel with synchronous=NORMAL,
  // fsynced too with FULL), not in a buffer of the process.
  for (StorageSync sync : {StorageSync::kNormal, StorageSync::kFull}) {
    const std::string key = StorageSyncName(sync);
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      auto s = OpenSqliteTableStorage(path_, sync);
      if (!s.ok() || !(*s)->Put("kv", key, "v").ok()) _exit(1);
      kill(getpid(), SIGKILL);
    }
    int status = 0;
    waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << key;
    auto s = Open();
    EXPECT_THAT(s->Get("kv", key), Optional(std::string("v"))) << key;
  }
}

TEST_F(SqliteTableStorageTest, TheLogReachesTheFileWhileTheHeadRuns) {
  // The head's own connection never checkpoints (its fsyncs would stall
  // the event loop); a thread of the storage copies the log into the file
  // about once a second, with the head still running.
  auto s = Open();
  const std::string row(1024, 'x');
  for (int i = 0; i < 2000; ++i) {
    ASSERT_TRUE(s->Put("kv", std::to_string(i), row).ok());
  }
  auto file_size = [&] {
    struct stat st {};
    return stat(path_.c_str(), &st) == 0 ? st.st_size : 0;
  };
  for (int i = 0; i < 100 && file_size() < 2000 * 1024; ++i) usleep(50000);
  EXPECT_GE(file_size(), 2000 * 1024);
  EXPECT_THAT(s->Get("kv", "1999"), Optional(row));
}

TEST(StorageSyncTest, ParsesItsTwoNamesAndExplainsOthers) {
  StorageSync sync = StorageSync::kFull;
  ASSERT_TRUE(ParseStorageSync("normal", &sync).ok());
  EXPECT_EQ(sync, StorageSync::kNormal);
  ASSERT_TRUE(ParseStorageSync("full", &sync).ok());
  EXPECT_EQ(sync, StorageSync::kFull);
  absl::Status bad = ParseStorageSync("always", &sync);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("`normal`"));
  EXPECT_THAT(bad.message(), HasSubstr("`full`"));
}

TEST_F(SqliteTableStorageTest, ADamagedFileIsAClearErrorAtOpen) {
  std::ofstream(path_) << "this is not a database, it is a text file that "
                          "happens to be where the head keeps its state\n";
  auto s = OpenSqliteTableStorage(path_);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr(path_));
  EXPECT_THAT(s.status().message(), HasSubstr("Move the file away"));
}

// The write-ahead log of a head (a child process) that wrote `rows` rows
// and was killed: with kFull nothing checkpoints while the head runs, so
// every row is in the log only.
std::string LogOfAKilledHead(const std::string& path, int rows) {
  pid_t child = fork();
  if (child == 0) {
    auto s = OpenSqliteTableStorage(path, StorageSync::kFull);
    if (!s.ok()) _exit(1);
    for (int i = 0; i < rows; ++i) {
      if (!(*s)->Put("jobs", std::to_string(i), std::string(300, 'j')).ok()) {
        _exit(1);
      }
    }
    kill(getpid(), SIGKILL);
  }
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status));
  std::ifstream in(path + "-wal", std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Each file of `dir` with its contents.
std::map<std::string, std::string> Files(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    files[entry.path().filename()] =
        std::string(std::istreambuf_iterator<char>(in), {});
  }
  return files;
}

TEST_F(SqliteTableStorageTest, ADamagedLogIsRefusedAndLeftAsItWas) {
  std::string wal = LogOfAKilledHead(path_, 30);
  const size_t frame = 24 + 4096;
  ASSERT_GT(wal.size(), 32 + 20 * frame);
  wal[32 + 10 * frame + 24 + 100] ^= 0x20;  // in frame 11's page
  std::ofstream(path_ + "-wal", std::ios::binary | std::ios::trunc) << wal;
  const auto before = Files(dir_);

  auto refused = OpenSqliteTableStorage(path_);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(refused.status().message(),
              HasSubstr(path_ + "-wal: frame 11 of "));
  EXPECT_THAT(refused.status().message(), HasSubstr("fails its checksum"));
  EXPECT_THAT(refused.status().message(),
              HasSubstr("committed transactions from it on would be lost"));
  EXPECT_THAT(refused.status().message(), HasSubstr("--discard-wal"));
  EXPECT_EQ(Files(dir_), before);

  // Set aside, the file alone opens, with what it held before the log.
  ASSERT_TRUE(SetWalAside(path_).ok());
  auto s = Open();
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->Scan("jobs").empty());
}

TEST_F(SqliteTableStorageTest, ALogCutShortByACrashIsTakenUp) {
  std::string wal = LogOfAKilledHead(path_, 30);
  const size_t frame = 24 + 4096;
  wal.resize(wal.size() - frame / 2);  // half of the last row's frame
  std::ofstream(path_ + "-wal", std::ios::binary | std::ios::trunc) << wal;
  auto s = Open();
  ASSERT_NE(s, nullptr);
  EXPECT_THAT(s->Scan("jobs"), SizeIs(29));
}

TEST_F(SqliteTableStorageTest, AFolderThatCannotBeWrittenIsAClearError) {
  auto s = OpenSqliteTableStorage(dir_ + "/no/such/folder/head.db");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("no/such/folder"));
}

}  // namespace
}  // namespace shoal
