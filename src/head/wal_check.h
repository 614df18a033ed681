// The head's SQLite write-ahead log (`head.db-wal`), checked before SQLite
// opens it.
//
// When SQLite opens a database after a crash it replays the log up to the
// first frame that fails its checksum and drops the rest without a word,
// committed transactions included. That is right for the torn end of a log
// that a crash left half-written, and wrong for a byte damaged in its
// middle: the head would start from an older state (jobs, actors, groups
// it had acknowledged gone) and no one would know. CheckWal tells the two
// apart, so that the head refuses damage instead of rolling back.
//
// Format: https://www.sqlite.org/fileformat2.html#walformat. A 32-byte
// header (magic, format version, page size, checkpoint sequence, two salts,
// a checksum of the first 24 bytes), then frames of a 24-byte header (page
// number, the database size after a commit or 0, the two salts, a
// cumulative checksum) and one page. A frame counts when its salts are the
// header's and its checksum, chained from the previous frame's (the
// header's for the first), is right; SQLite replays the counting frames up
// to the last commit among them. When SQLite restarts the log it writes a
// new header with new salts and overwrites it from the start, so frames of
// an older generation (other salts) may follow the current ones.
//
// Thread-safe (no state).
#ifndef SHOAL_HEAD_WAL_CHECK_H_
#define SHOAL_HEAD_WAL_CHECK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace shoal {

// What CheckWal found in a write-ahead log.
struct WalCheck {
  // Whole frames in the file (a partial last frame is not counted).
  int64_t frames = 0;
  // Committed transactions SQLite replays from it.
  int64_t transactions = 0;
  // Committed transactions of the log's current generation that SQLite
  // would drop because of damage before them.
  int64_t lost_transactions = 0;
  // "" when SQLite replays every committed transaction the log holds: what
  // it leaves out is a torn end (a partial last frame, a last transaction
  // that a crash cut short) or frames of an older generation. Otherwise
  // what is wrong, in words: "frame 12 of 40 fails its checksum; 3
  // committed transactions from it on would be lost".
  std::string damage;

  bool damaged() const { return !damage.empty(); }
};

// Reads the write-ahead log at `wal_path` (a database's path + "-wal"). A
// missing or empty file is a log that holds nothing. Fails only when the
// file cannot be read.
absl::StatusOr<WalCheck> CheckWal(const std::string& wal_path);

// Renames `db_path`-wal, and `db_path`-shm if present, to
// <name>.discarded-<UTC time, e.g. 20261130T142501Z>, never over an
// existing file, so that SQLite opens `db_path` alone. Returns the new
// paths. Fails, naming the file, when a rename fails; a missing log is not
// an error (nothing is renamed).
absl::StatusOr<std::vector<std::string>> SetWalAside(
    const std::string& db_path);

}  // namespace shoal

#endif  // SHOAL_HEAD_WAL_CHECK_H_
