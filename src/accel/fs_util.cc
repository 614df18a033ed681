#include "accel/fs_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace shoal::accel::internal {
namespace {

absl::Status ErrnoStatus(int err, absl::string_view what) {
  std::string message = absl::StrCat(what, ": ", std::strerror(err));
  if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(message);
  if (err == EACCES || err == EPERM) {
    return absl::PermissionDeniedError(message);
  }
  return absl::UnavailableError(message);
}

}  // namespace

std::string JoinPath(absl::string_view root, absl::string_view relative) {
  while (!relative.empty() && relative.front() == '/') {
    relative.remove_prefix(1);
  }
  std::string path = root.empty() ? std::string("/") : std::string(root);
  if (path.back() != '/') path.push_back('/');
  path.append(relative.data(), relative.size());
  return path;
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& path,
                                          size_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open ", path));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus(err, absl::StrCat("stat ", path));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is not a regular file"));
  }
  std::string contents;
  char buffer[4096];
  while (contents.size() < max_bytes) {
    size_t want = std::min(sizeof(buffer), max_bytes - contents.size());
    ssize_t n = ::read(fd, buffer, want);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return ErrnoStatus(err, absl::StrCat("read ", path));
    }
    if (n == 0) break;
    contents.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return contents;
}

std::vector<std::string> ListDirectory(const std::string& path,
                                       size_t max_entries) {
  std::vector<std::string> names;
  std::error_code ec;
  std::filesystem::directory_iterator it(path, ec);
  if (ec) return names;
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (ec || names.size() >= max_entries) break;
    names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

EntryKind GetEntryKind(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return EntryKind::kMissing;
  return S_ISDIR(st.st_mode) ? EntryKind::kDirectory : EntryKind::kOther;
}

absl::Status MakeDirectories(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot create directory ", path, ": ", ec.message()));
  }
  return absl::OkStatus();
}

absl::Status WriteFile(const std::string& path, absl::string_view contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  out.close();
  if (!out) {
    return absl::UnavailableError(
        absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace shoal::accel::internal
