#include "object_store/shm_arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "object_store/format_util.h"

namespace shoal::object_store {
namespace {

constexpr uint64_t kMinDefaultCapacity = uint64_t{64} << 20;

std::string Errno(int err) { return std::strerror(err); }

absl::Status ErrnoStatus(int err, absl::string_view what) {
  absl::StatusCode code = absl::StatusCode::kInternal;
  switch (err) {
    case ENOENT:
      code = absl::StatusCode::kNotFound;
      break;
    case EEXIST:
      code = absl::StatusCode::kAlreadyExists;
      break;
    case EACCES:
    case EPERM:
      code = absl::StatusCode::kPermissionDenied;
      break;
    case ENOSPC:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
      code = absl::StatusCode::kResourceExhausted;
      break;
    default:
      break;
  }
  return absl::Status(code, absl::StrCat(what, ": ", Errno(err)));
}

// Maps `size` bytes of `fd` shared, read-write. Closes `fd` either way (the
// mapping keeps the file alive).
absl::StatusOr<uint8_t*> MapShared(int fd, uint64_t size,
                                   const std::string& path) {
  void* addr =
      mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, /*off=*/0);
  int err = errno;
  close(fd);
  if (addr == MAP_FAILED) {
    return ErrnoStatus(
        err, absl::StrCat("cannot map ", FormatBytes(size), " of ", path));
  }
  return static_cast<uint8_t*>(addr);
}

}  // namespace

absl::StatusOr<uint64_t> FreeSpace(const std::string& dir) {
  struct statvfs vfs;
  if (statvfs(dir.c_str(), &vfs) != 0) {
    return ErrnoStatus(errno, absl::StrCat("cannot stat file system of ", dir));
  }
  return static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
}

uint64_t DefaultCapacity(uint64_t total_memory, uint64_t shm_free) {
  uint64_t capacity = total_memory / 10 * 3;
  capacity = std::min(capacity, shm_free / 10 * 9);
  return std::max(capacity, kMinDefaultCapacity);
}

uint64_t DefaultCapacity() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page_size = sysconf(_SC_PAGESIZE);
  uint64_t total = (pages > 0 && page_size > 0)
                       ? static_cast<uint64_t>(pages) * page_size
                       : kMinDefaultCapacity;
  absl::StatusOr<uint64_t> shm_free = FreeSpace("/dev/shm");
  // Without /dev/shm the arena falls back to disk; memory is the only bound.
  return DefaultCapacity(total, shm_free.ok() ? *shm_free : total);
}

ShmArena::ShmArena(std::string path, uint8_t* data, uint64_t capacity,
                   bool owner, std::string backing_note)
    : path_(std::move(path)),
      data_(data),
      capacity_(capacity),
      owner_(owner),
      creator_pid_(getpid()),
      backing_note_(std::move(backing_note)) {}

ShmArena::~ShmArena() {
  munmap(data_, capacity_);
  if (owner_ && getpid() == creator_pid_) unlink(path_.c_str());
}

absl::StatusOr<std::unique_ptr<ShmArena>> ShmArena::Create(
    const std::string& name, uint64_t capacity,
    const ShmArenaOptions& options) {
  if (name.empty() || name.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "object store name '", name, "' must be a non-empty file name"));
  }
  if (capacity == 0) {
    return absl::InvalidArgumentError(
        "object store capacity must be positive; give "
        "--object-store-memory in bytes");
  }
  auto free_space = options.free_space ? options.free_space : FreeSpace;

  // Pick the directory: shm_dir when it has room, else the fallback.
  std::string dir = options.shm_dir;
  std::string note;
  absl::StatusOr<uint64_t> shm_free = free_space(options.shm_dir);
  if (!shm_free.ok() || *shm_free < capacity) {
    std::string why =
        shm_free.ok()
            ? absl::StrCat(options.shm_dir, " has only ",
                           FormatBytes(*shm_free), " free, less than the ",
                           FormatBytes(capacity), " asked for")
            : std::string(shm_free.status().message());
    if (options.fallback_dir.empty()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot place the object store in shared memory: ", why, "; enlarge ",
          options.shm_dir,
          " (docker run --shm-size=...), or start the node with a smaller "
          "--object-store-memory"));
    }
    absl::StatusOr<uint64_t> fallback_free = free_space(options.fallback_dir);
    if (!fallback_free.ok()) {
      return absl::Status(
          fallback_free.status().code(),
          absl::StrCat("cannot place the object store: ", why,
                       ", and the fallback directory is unusable: ",
                       fallback_free.status().message()));
    }
    if (*fallback_free < capacity) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot place the object store of ", FormatBytes(capacity), ": ", why,
          ", and the fallback directory ", options.fallback_dir, " has only ",
          FormatBytes(*fallback_free),
          " free; start the node with a smaller --object-store-memory"));
    }
    dir = options.fallback_dir;
    note = absl::StrCat(
        "object store is on disk in ", dir, " instead of shared memory: ", why,
        "; this is slower. Enlarge ", options.shm_dir,
        " (docker run --shm-size=...) or lower --object-store-memory");
  }

  std::string path = absl::StrCat(dir, "/shoal-", name);
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    int err = errno;
    if (err == EEXIST) {
      return absl::AlreadyExistsError(absl::StrCat(
          "object store file ", path,
          " already exists: another node agent uses the name '", name,
          "', or a crashed one left it behind (remove it if no agent runs)"));
    }
    return ErrnoStatus(err, absl::StrCat("cannot create ", path));
  }
  if (ftruncate(fd, static_cast<off_t>(capacity)) != 0) {
    int err = errno;
    close(fd);
    unlink(path.c_str());
    return ErrnoStatus(
        err, absl::StrCat("cannot size ", path, " to ", FormatBytes(capacity)));
  }
  absl::StatusOr<uint8_t*> data = MapShared(fd, capacity, path);
  if (!data.ok()) {
    unlink(path.c_str());
    return data.status();
  }
  return std::unique_ptr<ShmArena>(new ShmArena(
      std::move(path), *data, capacity, /*owner=*/true, std::move(note)));
}

absl::StatusOr<std::unique_ptr<ShmArena>> ShmArena::Open(
    const std::string& name_or_path) {
  std::string path = name_or_path.find('/') == std::string::npos
                         ? absl::StrCat("/dev/shm/shoal-", name_or_path)
                         : name_or_path;
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    absl::Status status =
        ErrnoStatus(err, absl::StrCat("cannot open object store ", path));
    if (err == ENOENT) {
      return absl::NotFoundError(absl::StrCat(
          status.message(),
          "; is the node agent running? Pass the path it reports"));
    }
    return status;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return ErrnoStatus(err, absl::StrCat("cannot stat ", path));
  }
  if (st.st_size <= 0) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(
        "object store file ", path, " is empty; its agent is still starting"));
  }
  uint64_t capacity = static_cast<uint64_t>(st.st_size);
  absl::StatusOr<uint8_t*> data = MapShared(fd, capacity, path);
  if (!data.ok()) return data.status();
  return std::unique_ptr<ShmArena>(new ShmArena(
      std::move(path), *data, capacity, /*owner=*/false, std::string()));
}

}  // namespace shoal::object_store
