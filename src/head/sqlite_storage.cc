#include "head/sqlite_storage.h"

#include <sqlite3.h>

#include <utility>

#include "absl/strings/str_cat.h"

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

class SqliteTableStorage : public TableStorage {
 public:
  explicit SqliteTableStorage(std::string path) : path_(std::move(path)) {}
  // close_v2: the connection closes once the statements (members, which
  // go after this body) are finalized.
  ~SqliteTableStorage() override { sqlite3_close_v2(db_); }

  absl::Status Open() {
    int rc = sqlite3_open_v2(
        path_.c_str(), &db_,
        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
        nullptr);
    if (rc != SQLITE_OK) return Fail("cannot open it");
    sqlite3_busy_timeout(db_, 5000);
    // The integrity check first: a damaged file must not be half-loaded.
    std::string check;
    absl::Status st = Query("PRAGMA quick_check", &check);
    if (!st.ok()) return st;
    if (check != "ok") {
      return Corrupt(absl::StrCat("SQLite's integrity check says: ", check));
    }
    for (const char* sql : {
             "PRAGMA journal_mode=WAL",
             "PRAGMA synchronous=FULL",
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
    st = Query("SELECT value FROM shoal_meta WHERE key = 'schema_version'",
               &version);
    if (!st.ok()) return st;
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

  const std::string path_;
  sqlite3* db_ = nullptr;
  Statement put_, get_, del_, scan_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TableStorage>> OpenSqliteTableStorage(
    const std::string& path) {
  auto storage = std::make_unique<SqliteTableStorage>(path);
  absl::Status opened = storage->Open();
  if (!opened.ok()) return opened;
  return storage;
}

}  // namespace shoal
