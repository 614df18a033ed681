#include "object_store/spill_storage.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "object_store/format_util.h"

namespace shoal::object_store {
namespace {

absl::Status MakeDirs(const std::string& dir) {
  if (dir.empty()) {
    return absl::InvalidArgumentError("spill directory must not be empty");
  }
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    std::string prefix = dir.substr(0, pos);
    if (mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) {
      int err = errno;
      return absl::Status(err == EACCES || err == EPERM || err == EROFS
                              ? absl::StatusCode::kPermissionDenied
                              : absl::StatusCode::kFailedPrecondition,
                          absl::StrCat("cannot create spill directory ", prefix,
                                       ": ", std::strerror(err),
                                       "; choose a writable spill directory"));
    }
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("spill directory ", dir, " is not a directory"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<FolderSpillStorage>> FolderSpillStorage::Create(
    const std::string& dir) {
  absl::Status made = MakeDirs(dir);
  if (!made.ok()) return made;
  return std::unique_ptr<FolderSpillStorage>(new FolderSpillStorage(dir));
}

absl::StatusOr<std::string> FolderSpillStorage::Write(absl::string_view id,
                                                      const uint8_t* data,
                                                      uint64_t size) {
  std::string path =
      absl::StrCat(dir_, "/", absl::BytesToHexString(id), "-", next_file_++);
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    int err = errno;
    return absl::Status(err == ENOSPC ? absl::StatusCode::kResourceExhausted
                                      : absl::StatusCode::kUnavailable,
                        absl::StrCat("cannot create spill file ", path, ": ",
                                     std::strerror(err)));
  }
  uint64_t done = 0;
  while (done < size) {
    ssize_t n = pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? errno : ENOSPC;
      close(fd);
      unlink(path.c_str());
      if (err == ENOSPC || err == EDQUOT) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "disk full: cannot spill object ", FormatId(id), " (",
            FormatBytes(size), ") to ", dir_,
            "; free space there or use a spill directory with more room"));
      }
      return absl::UnavailableError(absl::StrCat(
          "cannot write spill file ", path, ": ", std::strerror(err)));
    }
    done += static_cast<uint64_t>(n);
  }
  if (close(fd) != 0) {
    int err = errno;
    unlink(path.c_str());
    return absl::UnavailableError(absl::StrCat("cannot write spill file ", path,
                                               ": ", std::strerror(err)));
  }
  return path;
}

absl::Status FolderSpillStorage::Read(const std::string& location,
                                      uint8_t* dest, uint64_t size) {
  int fd = open(location.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::DataLossError(absl::StrCat("cannot open spill file ", location,
                                            ": ", std::strerror(errno)));
  }
  uint64_t done = 0;
  while (done < size) {
    ssize_t n = pread(fd, dest + done, size - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string why = n < 0 ? std::strerror(errno) : "file is truncated";
      close(fd);
      return absl::DataLossError(absl::StrCat("cannot read spill file ",
                                              location, " (", done, " of ",
                                              size, " bytes read): ", why));
    }
    done += static_cast<uint64_t>(n);
  }
  close(fd);
  return absl::OkStatus();
}

absl::Status FolderSpillStorage::Remove(const std::string& location) {
  if (unlink(location.c_str()) != 0 && errno != ENOENT) {
    return absl::UnavailableError(absl::StrCat(
        "cannot remove spill file ", location, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace shoal::object_store
