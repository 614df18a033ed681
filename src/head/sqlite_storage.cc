#include "head/sqlite_storage.h"

#include <sqlite3.h>

#include <atomic>
#include <memory>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "head/wal_check.h"

namespace shoal {
namespace {

constexpr int kSchemaVersion = 1;

// A prepared statement, reset for its next use when it goes out of scope.
class Statement {
 public:
  Statement() = default;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement() { sqlite3_finalize(stmt_); }
  sqlite3_stmt** out() { return &stmt_; }
  sqlite3_stmt* get() const { return stmt_; }

 private:
  sqlite3_stmt* stmt_ = nullptr;
};

class Use {
 public:
  explicit Use(const Statement& s) : stmt_(s.get()) {}
  ~Use() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  sqlite3_stmt* operator*() const { return stmt_; }

 private:
  sqlite3_stmt* stmt_;
};

// Copies the write-ahead log into the database file on a thread of its
// own, through a connection of its own, about once a second while there
// are writes. A checkpoint fsyncs the log and the file (0.4 s each on a
// slow disk); made by the head's connection, it would stall the head's
// event loop in the middle of a write. A passive checkpoint never blocks
// the writer, and the log restarts from its beginning once one has
// caught up with it.
class Checkpointer {
 public:
  Checkpointer(sqlite3* db, const std::atomic<uint64_t>* writes)
      : db_(db), writes_(writes), thread_([this] { Run(); }) {}
  ~Checkpointer() {
    {
      shoal::MutexLock lock(&mu_);
      stop_ = true;
    }
    cv_.Signal();
    thread_.join();
    // Not the last connection to the file: closing it checkpoints nothing.
    sqlite3_close_v2(db_);
  }

 private:
  void Run() {
    uint64_t done = 0;
    mu_.Lock();
    while (!StopWithin(absl::Seconds(1))) {
      uint64_t writes = writes_->load(std::memory_order_relaxed);
      if (writes == done) continue;
      mu_.Unlock();
      int rc = sqlite3_wal_checkpoint_v2(
          db_, nullptr, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
      mu_.Lock();
      if (rc == SQLITE_OK) done = writes;
    }
    mu_.Unlock();
  }

  // Waits up to `timeout` for the destructor's stop; returns whether it
  // came.
  bool StopWithin(absl::Duration timeout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const absl::Time deadline = absl::Now() + timeout;
    while (!stop_) {
      if (cv_.WaitWithDeadline(&mu_, deadline)) return stop_;
    }
    return true;
  }

  sqlite3* const db_;
  const std::atomic<uint64_t>* const writes_;
  shoal::Mutex mu_;
  shoal::CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: it starts once the rest is set
};

class SqliteTableStorage : public TableStorage {
 public:
  SqliteTableStorage(std::string path, StorageSync sync)
      : path_(std::move(path)), sync_(sync) {}
  // close_v2: the connection closes once the statements (members, which
  // go after this body) are finalized; the checkpointer's goes first.
  ~SqliteTableStorage() override {
    checkpointer_.reset();
    sqlite3_close_v2(db_);
  }

  absl::Status Open() {
    // Before SQLite reads the log: it would drop what follows damage in it
    // without a word (head/wal_check.h).
    const std::string wal_path = path_ + "-wal";
    absl::StatusOr<WalCheck> wal = CheckWal(wal_path);
    if (!wal.ok()) {
      return absl::UnavailableError(absl::StrCat("the head's state in ", path_,
                                                 ": ", wal.status().message()));
    }
    if (wal->damaged()) return DamagedLog(wal_path, wal->damage);
    absl::Status st = OpenAndCheck();
    if (st.ok()) st = MakeSchema();
    if (st.ok() && sync_ != StorageSync::kFull) st = StartCheckpointer();
    if (st.ok()) st = PrepareStatements();
    if (!st.ok()) return st;
    // With kNormal no checkpoint at close either: what a crash of the host
    // may lose anyway are the fsyncs of making the file (a dozen, seconds
    // on a slow disk, at every start of a new cluster) and of the
    // checkpoint at close (the next head replays the write-ahead log
    // instead).
    if (sync_ == StorageSync::kFull) {
      sqlite3_db_config(db_, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 0, nullptr);
    }
    return absl::OkStatus();
  }

  // Opens the file and runs SQLite's integrity check: a damaged file must
  // not be half-loaded.
  absl::Status OpenAndCheck() {
    int rc = sqlite3_open_v2(
        path_.c_str(), &db_,
        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
        nullptr);
    if (rc != SQLITE_OK) return Fail("cannot open it");
    sqlite3_busy_timeout(db_, 5000);
    // Until the file has passed its checks, closing the connection must not
    // checkpoint: a refused file and its log stay as they were found.
    sqlite3_db_config(db_, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
    std::string check;
    RETURN_IF_ERROR(Query("PRAGMA quick_check", &check));
    if (check != "ok") {
      return Corrupt(absl::StrCat("SQLite's integrity check says: ", check));
    }
    return absl::OkStatus();
  }

  // The tables, and the schema version a new file gets and an old one must
  // have.
  absl::Status MakeSchema() {
    const bool full = sync_ == StorageSync::kFull;
    for (const char* sql : {
             full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=OFF",
             "PRAGMA journal_mode=WAL",
             "CREATE TABLE IF NOT EXISTS shoal_meta (key TEXT PRIMARY KEY, "
             "value TEXT NOT NULL)",
             "CREATE TABLE IF NOT EXISTS shoal_rows (tbl TEXT NOT NULL, "
             "key BLOB NOT NULL, value BLOB NOT NULL, PRIMARY KEY (tbl, key)) "
             "WITHOUT ROWID",
         }) {
      if (sqlite3_exec(db_, sql, nullptr, nullptr, nullptr) != SQLITE_OK) {
        return Fail(absl::StrCat("cannot run \"", sql, "\""));
      }
    }
    std::string version;
    RETURN_IF_ERROR(Query(
        "SELECT value FROM shoal_meta WHERE key = 'schema_version'", &version));
    if (version.empty()) {
      std::string sql =
          absl::StrCat("INSERT INTO shoal_meta VALUES ('schema_version', '",
                       kSchemaVersion, "')");
      if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr) !=
          SQLITE_OK) {
        return Fail("cannot write its schema version");
      }
    } else if (version != absl::StrCat(kSchemaVersion)) {
      return Corrupt(absl::StrCat("it has schema version ", version,
                                  ", and this head reads version ",
                                  kSchemaVersion));
    }
    return absl::OkStatus();
  }

  // kNormal: checkpoints are made on a thread of their own (Checkpointer).
  absl::Status StartCheckpointer() {
    if (sqlite3_exec(db_, "PRAGMA synchronous=NORMAL", nullptr, nullptr,
                     nullptr) != SQLITE_OK) {
      return Fail("cannot set synchronous=NORMAL");
    }
    sqlite3* ckpt = nullptr;
    if (sqlite3_open_v2(path_.c_str(), &ckpt,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                        nullptr) != SQLITE_OK ||
        sqlite3_exec(ckpt, "PRAGMA synchronous=NORMAL", nullptr, nullptr,
                     nullptr) != SQLITE_OK ||
        sqlite3_exec(db_, "PRAGMA wal_autocheckpoint=0", nullptr, nullptr,
                     nullptr) != SQLITE_OK) {
      sqlite3_close_v2(ckpt);
      return Fail("cannot open its checkpointing connection");
    }
    sqlite3_busy_timeout(ckpt, 5000);
    checkpointer_ = std::make_unique<Checkpointer>(ckpt, &writes_);
    return absl::OkStatus();
  }

  absl::Status PrepareStatements() {
    for (auto [stmt, sql] : {
             std::pair{&put_,
                       "INSERT OR REPLACE INTO shoal_rows VALUES (?1, ?2, ?3)"},
             std::pair{&get_,
                       "SELECT value FROM shoal_rows WHERE tbl = ?1 AND key = "
                       "?2"},
             std::pair{&del_,
                       "DELETE FROM shoal_rows WHERE tbl = ?1 AND key = ?2"},
             std::pair{&scan_,
                       "SELECT key, value FROM shoal_rows WHERE tbl = ?1 "
                       "ORDER BY key"},
         }) {
      if (sqlite3_prepare_v2(db_, sql, -1, stmt->out(), nullptr) != SQLITE_OK) {
        return Fail("cannot prepare its statements");
      }
    }
    return absl::OkStatus();
  }

  absl::Status Put(const std::string& table, const std::string& key,
                   const std::string& value) override {
    Use s(put_);
    Bind(*s, 1, table);
    Bind(*s, 2, key);
    Bind(*s, 3, value);
    if (sqlite3_step(*s) != SQLITE_DONE) return Fail("cannot write a row");
    writes_.fetch_add(1, std::memory_order_relaxed);
    return absl::OkStatus();
  }

  std::optional<std::string> Get(const std::string& table,
                                 const std::string& key) const override {
    Use s(get_);
    Bind(*s, 1, table);
    Bind(*s, 2, key);
    if (sqlite3_step(*s) != SQLITE_ROW) return std::nullopt;
    return Column(*s, 0);
  }

  absl::Status Delete(const std::string& table,
                      const std::string& key) override {
    Use s(del_);
    Bind(*s, 1, table);
    Bind(*s, 2, key);
    if (sqlite3_step(*s) != SQLITE_DONE) return Fail("cannot delete a row");
    writes_.fetch_add(1, std::memory_order_relaxed);
    return absl::OkStatus();
  }

  std::map<std::string, std::string> Scan(
      const std::string& table) const override {
    std::map<std::string, std::string> out;
    Use s(scan_);
    Bind(*s, 1, table);
    while (sqlite3_step(*s) == SQLITE_ROW) {
      out.emplace(Column(*s, 0), Column(*s, 1));
    }
    return out;
  }

 private:
  static void Bind(sqlite3_stmt* s, int index, const std::string& v) {
    sqlite3_bind_blob(s, index, v.data(), static_cast<int>(v.size()),
                      SQLITE_STATIC);
  }
  static std::string Column(sqlite3_stmt* s, int index) {
    const void* data = sqlite3_column_blob(s, index);
    int size = sqlite3_column_bytes(s, index);
    return data == nullptr ? std::string()
                           : std::string(static_cast<const char*>(data), size);
  }

  // The first column of the first row of `sql` ("" when no row).
  absl::Status Query(const char* sql, std::string* value) {
    Statement s;
    if (sqlite3_prepare_v2(db_, sql, -1, s.out(), nullptr) != SQLITE_OK) {
      int code = sqlite3_errcode(db_);
      if (code == SQLITE_NOTADB || code == SQLITE_CORRUPT) {
        return Corrupt(sqlite3_errmsg(db_));
      }
      return Fail(absl::StrCat("cannot read it (", sql, ")"));
    }
    int rc = sqlite3_step(s.get());
    if (rc == SQLITE_ROW) {
      const unsigned char* text = sqlite3_column_text(s.get(), 0);
      *value = text == nullptr ? "" : reinterpret_cast<const char*>(text);
    } else if (rc != SQLITE_DONE) {
      if (rc == SQLITE_NOTADB || rc == SQLITE_CORRUPT) {
        return Corrupt(sqlite3_errmsg(db_));
      }
      return Fail(absl::StrCat("cannot read it (", sql, ")"));
    }
    return absl::OkStatus();
  }

  absl::Status Fail(const std::string& what) const {
    return absl::UnavailableError(
        absl::StrCat("the head's state in ", path_, ": ", what, ": ",
                     db_ != nullptr ? sqlite3_errmsg(db_) : "out of memory",
                     " (check that its folder exists and is writable)"));
  }
  absl::Status Corrupt(const std::string& what) const {
    return absl::DataLossError(
        absl::StrCat("the head's state in ", path_,
                     " is damaged or not a Shoal head "
                     "database: ",
                     what,
                     ". Move the file away to start this head afresh "
                     "(the cluster's state in it is then lost)"));
  }

  absl::Status DamagedLog(const std::string& wal_path,
                          const std::string& damage) const {
    return absl::DataLossError(absl::StrCat(
        "the head's state in ", path_, " is damaged: its write-ahead log ",
        wal_path, ": ", damage,
        ". The head does not start on it (SQLite would silently start from "
        "an older state). Keep a copy of both files, then either restore "
        "them from a backup, or start from what ",
        path_,
        " alone holds: run `shoal start --head` again with --discard-wal (it "
        "sets the log aside as ",
        wal_path, ".discarded-<UTC time>; what only the log holds is lost)"));
  }

  const std::string path_;
  const StorageSync sync_;
  sqlite3* db_ = nullptr;
  Statement put_, get_, del_, scan_;
  std::atomic<uint64_t> writes_{0};
  std::unique_ptr<Checkpointer> checkpointer_;  // kNormal only
};

}  // namespace

absl::StatusOr<std::unique_ptr<TableStorage>> OpenSqliteTableStorage(
    const std::string& path, StorageSync sync) {
  auto storage = std::make_unique<SqliteTableStorage>(path, sync);
  absl::Status opened = storage->Open();
  if (!opened.ok()) return opened;
  return storage;
}

}  // namespace shoal
