#include "head/wal_check.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace shoal {
namespace {

constexpr uint32_t kMagic = 0x377f0682;  // | 1: big-endian checksums
constexpr uint32_t kFormatVersion = 3007000;
constexpr int64_t kHeaderSize = 32;
constexpr int64_t kFrameHeaderSize = 24;

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) |
         (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}
uint32_t LittleEndian32(const uint8_t* p) {
  return (uint32_t{p[3]} << 24) | (uint32_t{p[2]} << 16) |
         (uint32_t{p[1]} << 8) | uint32_t{p[0]};
}

// SQLite's checksum: over 32-bit words, in the byte order the log's magic
// number names, two at a time, carried on from `sum`. REQUIRES: size is a
// multiple of 8.
void Checksum(bool big_endian, const uint8_t* data, size_t size,
              uint32_t sum[2]) {
  uint32_t s0 = sum[0], s1 = sum[1];
  for (size_t i = 0; i < size; i += 8) {
    uint32_t x0 = big_endian ? BigEndian32(data + i) : LittleEndian32(data + i);
    uint32_t x1 =
        big_endian ? BigEndian32(data + i + 4) : LittleEndian32(data + i + 4);
    s0 += x0 + s1;
    s1 += x1 + s0;
  }
  sum[0] = s0;
  sum[1] = s1;
}

bool ValidPageSize(uint32_t size) {
  return size >= 512 && size <= 65536 && (size & (size - 1)) == 0;
}

// Reads exactly `size` bytes at `offset`; false at the end of the file.
absl::StatusOr<bool> ReadAt(int fd, const std::string& path, int64_t offset,
                            uint8_t* out, size_t size) {
  size_t done = 0;
  while (done < size) {
    ssize_t n = pread(fd, out + done, size - done, offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot read ", path, ": ", strerror(errno)));
    }
    if (n == 0) return false;
    done += n;
  }
  return true;
}

std::string Plural(int64_t n, const char* one, const char* many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  const int fd_;
};

}  // namespace

namespace {

// A log's header as CheckWal reads it.
struct WalHeader {
  uint8_t bytes[kHeaderSize];
  uint32_t version = 0;
  uint32_t page_size = 0;
  bool big_endian = false;
  // Its checksum, the seed of the first frame's.
  uint32_t sum[2] = {0, 0};
  bool sum_ok = false;
};

// Where the frames stop counting: the first bad one, if any.
struct FrameScan {
  int64_t first_bad = 0;           // 1-based; 0: every frame counts
  bool bad_frame_commits = false;  // the first bad frame ends a transaction
  const char* why = "";
};

// Reads the frames of the log at `fd` after `header`, counting into
// `check` its frames, committed transactions and those past the first
// bad frame.
absl::StatusOr<FrameScan> ScanFrames(int fd, const std::string& wal_path,
                                     const WalHeader& header, WalCheck& check) {
  const int64_t frame_size = kFrameHeaderSize + header.page_size;
  std::vector<uint8_t> frame(frame_size);
  uint32_t sum[2] = {header.sum[0], header.sum[1]};
  FrameScan scan;
  for (int64_t i = 1; i <= check.frames; ++i) {
    absl::StatusOr<bool> read =
        ReadAt(fd, wal_path, kHeaderSize + (i - 1) * frame_size, frame.data(),
               frame_size);
    if (!read.ok()) return read.status();
    if (!*read) {  // shrank while being read
      check.frames = i - 1;
      break;
    }
    const bool current = memcmp(frame.data() + 8, header.bytes + 16, 8) == 0;
    const bool commit = BigEndian32(frame.data() + 4) != 0;
    if (scan.first_bad == 0 && header.sum_ok) {
      uint32_t next[2] = {sum[0], sum[1]};
      Checksum(header.big_endian, frame.data(), 8, next);
      Checksum(header.big_endian, frame.data() + kFrameHeaderSize,
               header.page_size, next);
      const bool sum_ok = next[0] == BigEndian32(frame.data() + 16) &&
                          next[1] == BigEndian32(frame.data() + 20);
      const uint32_t page = BigEndian32(frame.data());
      if (current && page != 0 && sum_ok) {
        sum[0] = next[0];
        sum[1] = next[1];
        if (commit) ++check.transactions;
        continue;
      }
      // (Its own transaction is lost whatever its salts say: if frames of
      // this generation follow it, it was one of them.)
      scan.first_bad = i;
      scan.bad_frame_commits = commit;
      scan.why = !current    ? "carries another generation's salts"
                 : page == 0 ? "has page number 0"
                             : "fails its checksum";
      if (commit) ++check.lost_transactions;
      continue;
    }
    if (current && commit) ++check.lost_transactions;
  }
  return scan;
}

// Says in `check` whether what ScanFrames found is damage SQLite would
// silently drop committed transactions for.
void JudgeFrames(const WalHeader& header, const FrameScan& scan,
                 WalCheck& check) {
  if (!header.sum_ok) {
    if (check.frames > 0) {
      check.damage = absl::StrCat(
          "its header fails its checksum; SQLite would ignore all ",
          Plural(check.frames, "frame", "frames"), " of it",
          check.lost_transactions > 0
              ? absl::StrCat(
                    " and the ",
                    Plural(check.lost_transactions, "committed transaction",
                           "committed transactions"),
                    " in them")
              : "");
    } else {
      check.lost_transactions = 0;
    }
    return;
  }
  // A bad frame is the torn end of the log unless a transaction of the
  // same generation was committed after it: a crash cuts the last
  // transaction short, it does not reach back into committed ones.
  if (check.lost_transactions > (scan.bad_frame_commits ? 1 : 0)) {
    check.damage = absl::StrCat(
        "frame ", scan.first_bad, " of ", check.frames, " ", scan.why, "; ",
        Plural(check.lost_transactions, "committed transaction",
               "committed transactions"),
        " from it on would be lost");
  } else {
    check.lost_transactions = 0;
  }
}

}  // namespace

absl::StatusOr<WalCheck> CheckWal(const std::string& wal_path) {
  WalCheck check;
  Fd fd(open(wal_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return check;
    return absl::UnavailableError(
        absl::StrCat("cannot read ", wal_path, ": ", strerror(errno)));
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot read ", wal_path, ": ", strerror(errno)));
  }
  const int64_t size = st.st_size;
  WalHeader header;
  absl::StatusOr<bool> read =
      ReadAt(fd.get(), wal_path, 0, header.bytes, kHeaderSize);
  if (!read.ok()) return read.status();
  // Shorter than its header: SQLite writes the header before any frame,
  // so nothing in it was ever committed.
  if (!*read) return check;

  const uint32_t magic = BigEndian32(header.bytes);
  header.version = BigEndian32(header.bytes + 4);
  header.page_size = BigEndian32(header.bytes + 8);
  header.big_endian = (magic & 1) != 0;
  if ((magic & ~uint32_t{1}) != kMagic || !ValidPageSize(header.page_size)) {
    // SQLite takes such a file for an empty log.
    if (size > kHeaderSize) {
      check.damage = absl::StrCat(
          "its header is damaged (",
          (magic & ~uint32_t{1}) != kMagic
              ? absl::StrCat("no log magic number: 0x", absl::Hex(magic))
              : absl::StrCat("page size ", header.page_size),
          "); SQLite would ignore all ", size - kHeaderSize, " bytes after it");
    }
    return check;
  }
  check.frames = (size - kHeaderSize) / (kFrameHeaderSize + header.page_size);
  Checksum(header.big_endian, header.bytes, 24, header.sum);
  header.sum_ok = header.sum[0] == BigEndian32(header.bytes + 24) &&
                  header.sum[1] == BigEndian32(header.bytes + 28);
  if (header.version != kFormatVersion && check.frames > 0) {
    check.damage = absl::StrCat("its header gives format version ",
                                header.version, ", not ", kFormatVersion,
                                " (SQLite would refuse to open it)");
    return check;
  }
  absl::StatusOr<FrameScan> scan =
      ScanFrames(fd.get(), wal_path, header, check);
  if (!scan.ok()) return scan.status();
  JudgeFrames(header, *scan, check);
  return check;
}

absl::StatusOr<std::vector<std::string>> SetWalAside(
    const std::string& db_path) {
  std::vector<std::string> moved;
  const std::string wal = db_path + "-wal";
  if (access(wal.c_str(), F_OK) != 0) return moved;
  char stamp[32];
  time_t now = time(nullptr);
  struct tm utc {};
  gmtime_r(&now, &utc);
  strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &utc);
  // One suffix for both files, free for both.
  std::string suffix = absl::StrCat(".discarded-", stamp);
  for (int n = 1; access((wal + suffix).c_str(), F_OK) == 0 ||
                  access((db_path + "-shm" + suffix).c_str(), F_OK) == 0;
       ++n) {
    suffix = absl::StrCat(".discarded-", stamp, "-", n);
  }
  for (const std::string& from : {wal, db_path + "-shm"}) {
    if (from != wal && access(from.c_str(), F_OK) != 0) continue;
    const std::string to = from + suffix;
    if (rename(from.c_str(), to.c_str()) != 0) {
      return absl::UnavailableError(absl::StrCat(
          "cannot move ", from, " aside to ", to, ": ", strerror(errno),
          " (check that its folder is writable)"));
    }
    moved.push_back(to);
  }
  return moved;
}

}  // namespace shoal
