// CheckWal on write-ahead logs that SQLite itself wrote, damaged the ways a
// disk or a person damages them and cut short the way a crash does; each
// verdict checked against what SQLite then replays from the same files.
#include "head/wal_check.h"

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using ::testing::StartsWith;

constexpr int kRows = 40;
constexpr int64_t kHeaderSize = 32;
constexpr int64_t kFrameHeaderSize = 24;

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}
uint32_t BigEndian32(const std::string& bytes, size_t at) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data() + at);
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) |
         (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

class WalCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shoal-wal-check-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    db_ = dir_ + "/head.db";
    wal_ = db_ + "-wal";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static void Exec(sqlite3* db, const std::string& sql) {
    char* error = nullptr;
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error),
              SQLITE_OK)
        << sql << ": " << (error ? error : "");
  }

  // SQLite writes `rows` rows, one transaction each, into a database of
  // its own; then `more` rows after a checkpoint that let it restart its
  // log. Its file and log, as a process killed then would leave them, are
  // copied to db_ and wal_.
  void MakeLog(int rows, int more = 0) {
    const std::string src = dir_ + "/src.db";
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(src.c_str(), &db), SQLITE_OK);
    Exec(db, "PRAGMA journal_mode=WAL");
    Exec(db, "PRAGMA wal_autocheckpoint=0");
    Exec(db, "CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)");
    for (int i = 0; i < rows + more; ++i) {
      if (i == rows && more > 0) {
        Exec(db, "PRAGMA wal_checkpoint(PASSIVE)");
      }
      Exec(db,
           "INSERT INTO t VALUES (" + std::to_string(i) + ", randomblob(300))");
    }
    WriteBytes(db_, ReadBytes(src));
    WriteBytes(wal_, ReadBytes(src + "-wal"));
    sqlite3_close(db);
    wal_bytes_ = ReadBytes(wal_);
    page_size_ = BigEndian32(wal_bytes_, 8);
    ASSERT_GE(page_size_, 512);
  }

  int64_t FrameSize() const { return kFrameHeaderSize + page_size_; }
  int64_t Frames() const {
    return (static_cast<int64_t>(wal_bytes_.size()) - kHeaderSize) /
           FrameSize();
  }
  // Offset of frame i (1-based).
  int64_t FrameAt(int64_t i) const {
    return kHeaderSize + (i - 1) * FrameSize();
  }
  // The log on disk with the byte at `at` inverted.
  void FlipByte(int64_t at) {
    wal_bytes_[at] = static_cast<char>(~wal_bytes_[at]);
    WriteBytes(wal_, wal_bytes_);
  }
  WalCheck Check() const {
    absl::StatusOr<WalCheck> check = CheckWal(wal_);
    EXPECT_TRUE(check.ok()) << check.status();
    return check.ok() ? *check : WalCheck{};
  }
  // The rows SQLite sees in copies of db_ and wal_ (-1: not even the
  // table, which was created in the log).
  int RowsSqliteSees() const {
    const std::string probe = dir_ + "/probe.db";
    std::filesystem::remove(probe + "-shm");
    WriteBytes(probe, ReadBytes(db_));
    WriteBytes(probe + "-wal", ReadBytes(wal_));
    sqlite3* db = nullptr;
    int rows = -1;
    if (sqlite3_open(probe.c_str(), &db) == SQLITE_OK) {
      sqlite3_stmt* s = nullptr;
      if (sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &s, nullptr) ==
              SQLITE_OK &&
          sqlite3_step(s) == SQLITE_ROW) {
        rows = sqlite3_column_int(s, 0);
      }
      sqlite3_finalize(s);
    }
    sqlite3_close(db);
    return rows;
  }

  std::string dir_, db_, wal_;
  std::string wal_bytes_;
  int64_t page_size_ = 0;
};

TEST_F(WalCheckTest, AnIntactLogIsReplayedWhole) {
  MakeLog(kRows);
  WalCheck check = Check();
  EXPECT_FALSE(check.damaged()) << check.damage;
  EXPECT_EQ(check.frames, Frames());
  EXPECT_GE(check.frames, kRows + 1);
  // The table's creation and each row.
  EXPECT_EQ(check.transactions, kRows + 1);
  EXPECT_EQ(RowsSqliteSees(), kRows);
}

TEST_F(WalCheckTest, AMissingOrEmptyLogHoldsNothing) {
  WalCheck missing = Check();
  EXPECT_FALSE(missing.damaged());
  EXPECT_EQ(missing.frames, 0);
  WriteBytes(wal_, "");
  WalCheck empty = Check();
  EXPECT_FALSE(empty.damaged());
  EXPECT_EQ(empty.frames, 0);
}

TEST_F(WalCheckTest, AByteDamagedInAMiddleFrameIsDamage) {
  MakeLog(kRows);
  const int64_t middle = Frames() / 2;
  FlipByte(FrameAt(middle) + kFrameHeaderSize + 100);
  WalCheck check = Check();
  ASSERT_TRUE(check.damaged());
  EXPECT_THAT(check.damage,
              StartsWith("frame " + std::to_string(middle) + " of " +
                         std::to_string(Frames()) + " fails its checksum; "));
  EXPECT_THAT(check.damage, HasSubstr(std::to_string(check.lost_transactions) +
                                      " committed transactions from it on "
                                      "would be lost"));
  EXPECT_GT(check.lost_transactions, 1);
  // What SQLite does with it: the rows after the damage are gone without
  // an error, exactly the transactions the check counts as lost.
  EXPECT_EQ(RowsSqliteSees(), kRows - check.lost_transactions);
  EXPECT_EQ(check.transactions + check.lost_transactions, kRows + 1);
}

TEST_F(WalCheckTest, AFrameOfAnotherGenerationBeforeCommittedOnesIsDamage) {
  MakeLog(kRows);
  const int64_t middle = Frames() / 2;
  FlipByte(FrameAt(middle) + 8);  // its salt-1
  WalCheck check = Check();
  ASSERT_TRUE(check.damaged());
  EXPECT_THAT(check.damage, HasSubstr("carries another generation's salts"));
  EXPECT_EQ(RowsSqliteSees(), kRows - check.lost_transactions);
}

TEST_F(WalCheckTest, ALogCutInItsLastFrameIsATornEnd) {
  MakeLog(kRows);
  // Half of the last frame, as a crash in the middle of writing it leaves.
  wal_bytes_.resize(FrameAt(Frames()) + FrameSize() / 2);
  WriteBytes(wal_, wal_bytes_);
  WalCheck check = Check();
  EXPECT_FALSE(check.damaged()) << check.damage;
  EXPECT_EQ(check.frames, Frames());
  EXPECT_EQ(check.transactions, kRows);  // the last row's was cut short
  EXPECT_EQ(RowsSqliteSees(), kRows - 1);
}

TEST_F(WalCheckTest, ADamagedLastTransactionIsATornEnd) {
  MakeLog(kRows);
  FlipByte(FrameAt(Frames()) + kFrameHeaderSize + 7);
  WalCheck check = Check();
  EXPECT_FALSE(check.damaged()) << check.damage;
  EXPECT_EQ(check.lost_transactions, 0);
  EXPECT_EQ(check.transactions, kRows);
  EXPECT_EQ(RowsSqliteSees(), kRows - 1);
}

TEST_F(WalCheckTest, ADamagedHeaderIsDamage) {
  MakeLog(kRows);
  FlipByte(20);  // salt-2
  WalCheck check = Check();
  ASSERT_TRUE(check.damaged());
  EXPECT_THAT(check.damage, StartsWith("its header fails its checksum; SQLite "
                                       "would ignore all " +
                                       std::to_string(Frames()) + " frames"));
  // SQLite takes it for an empty log: even the table is gone.
  EXPECT_EQ(RowsSqliteSees(), -1);
}

TEST_F(WalCheckTest, ALogWithoutItsMagicNumberIsDamage) {
  MakeLog(kRows);
  FlipByte(0);
  WalCheck check = Check();
  ASSERT_TRUE(check.damaged());
  EXPECT_THAT(check.damage, HasSubstr("no log magic number"));
  EXPECT_EQ(RowsSqliteSees(), -1);
}

TEST_F(WalCheckTest, FramesOfAnOlderGenerationAfterTheCurrentOnesAreNot) {
  // A checkpoint copied the first rows into the file; SQLite then started
  // the log again from its beginning, with new salts, over the old frames.
  MakeLog(kRows, /*more=*/3);
  WalCheck check = Check();
  EXPECT_FALSE(check.damaged()) << check.damage;
  EXPECT_EQ(check.transactions, 3);
  EXPECT_GT(check.frames, 3 + 10);  // the old generation's frames follow
  EXPECT_EQ(RowsSqliteSees(), kRows + 3);
  // Damage among the old frames loses nothing: they are in the file.
  FlipByte(FrameAt(check.frames - 2) + kFrameHeaderSize + 5);
  WalCheck stale = Check();
  EXPECT_FALSE(stale.damaged()) << stale.damage;
  EXPECT_EQ(RowsSqliteSees(), kRows + 3);
}

TEST_F(WalCheckTest, SetWalAsideRenamesTheLogAndItsIndex) {
  MakeLog(kRows);
  WriteBytes(db_ + "-shm", "index");
  absl::StatusOr<std::vector<std::string>> moved = SetWalAside(db_);
  ASSERT_TRUE(moved.ok()) << moved.status();
  ASSERT_THAT(*moved, SizeIs(2));
  EXPECT_THAT((*moved)[0], StartsWith(wal_ + ".discarded-"));
  EXPECT_THAT((*moved)[1], StartsWith(db_ + "-shm.discarded-"));
  EXPECT_EQ(ReadBytes((*moved)[0]), wal_bytes_);
  EXPECT_FALSE(std::filesystem::exists(wal_));
  EXPECT_FALSE(std::filesystem::exists(db_ + "-shm"));
  // Again within the same second: nothing set aside before is replaced.
  WriteBytes(wal_, "second");
  absl::StatusOr<std::vector<std::string>> again = SetWalAside(db_);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_THAT(*again, SizeIs(1));
  EXPECT_NE((*again)[0], (*moved)[0]);
  EXPECT_EQ(ReadBytes((*moved)[0]), wal_bytes_);
  EXPECT_EQ(ReadBytes((*again)[0]), "second");
  // No log: nothing to do.
  absl::StatusOr<std::vector<std::string>> none = SetWalAside(db_);
  ASSERT_TRUE(none.ok());
  EXPECT_THAT(*none, IsEmpty());
}

}  // namespace
}  // namespace shoal
