// The shared memory a node's objects live in: one file, mapped MAP_SHARED by
// the node agent (which creates it) and by every driver and worker on the
// node (which open it), so that a sealed object is read in place.
//
// The file lives in /dev/shm (tmpfs, so RAM) and is sized with ftruncate:
// pages are allocated when first written, never up front. When /dev/shm has
// too little free space (small Docker containers default to 64 MiB), the
// file goes to a fallback directory on disk instead and `backing_note()`
// says so, for the agent to log.
//
// Threading: an arena is immutable after construction; data() may be used
// from any thread. Synchronizing access to the bytes is the object store's
// job (an object is written only before it is sealed).
#ifndef SHOAL_OBJECT_STORE_SHM_ARENA_H_
#define SHOAL_OBJECT_STORE_SHM_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace shoal::object_store {

struct ShmArenaOptions {
  // Where the arena goes normally.
  std::string shm_dir = "/dev/shm";
  // Where it goes when `shm_dir` lacks free space for the capacity; empty:
  // no fallback, Create fails instead.
  std::string fallback_dir = "/tmp";
  // Free bytes in a directory; statvfs by default. A seam for tests.
  std::function<absl::StatusOr<uint64_t>(const std::string& dir)> free_space;
};

class ShmArena {
 public:
  // Creates the file `<dir>/shoal-<name>` of `capacity` bytes and maps it.
  // AlreadyExists when the file exists (another store uses the name, or a
  // crashed agent left it behind). The file is removed by the destructor.
  // REQUIRES: `name` is a plain file name (no '/').
  static absl::StatusOr<std::unique_ptr<ShmArena>> Create(
      const std::string& name, uint64_t capacity,
      const ShmArenaOptions& options = {});

  // Maps an arena another process created: `name_or_path` is the `name`
  // given to Create (looked up in /dev/shm) or the creator's path().
  static absl::StatusOr<std::unique_ptr<ShmArena>> Open(
      const std::string& name_or_path);

  ~ShmArena();
  ShmArena(const ShmArena&) = delete;
  ShmArena& operator=(const ShmArena&) = delete;

  uint8_t* data() const { return data_; }
  uint64_t capacity() const { return capacity_; }
  // The backing file; hand it to clients for Open.
  const std::string& path() const { return path_; }
  // True when the arena is on disk in the fallback directory.
  bool on_fallback() const { return !backing_note_.empty(); }
  // Empty, or why the arena is not in shm_dir (worth a warning in the log:
  // disk-backed objects are slower).
  const std::string& backing_note() const { return backing_note_; }

 private:
  ShmArena(std::string path, uint8_t* data, uint64_t capacity, bool owner,
           std::string backing_note);

  std::string path_;
  uint8_t* data_;
  uint64_t capacity_;
  // Unlinks the file at destruction, in the creating process only (not in
  // a child forked from it).
  bool owner_;
  int creator_pid_;
  std::string backing_note_;
};

// Free bytes in the file system holding `dir` (statvfs, bytes available to
// unprivileged users).
absl::StatusOr<uint64_t> FreeSpace(const std::string& dir);

// The object store's size when none is given: 30% of the machine's memory,
// at most 90% of /dev/shm's free space, at least 64 MiB (as Ray does).
uint64_t DefaultCapacity();
// The same rule over given figures (for tests).
uint64_t DefaultCapacity(uint64_t total_memory, uint64_t shm_free);

}  // namespace shoal::object_store

#endif  // SHOAL_OBJECT_STORE_SHM_ARENA_H_
