// Where the object store puts primary copies it must move out of memory:
// an interface, so that tests can inject a full disk, and a folder
// implementation with one file per object.
//
// Threading: implementations are called only from the object store's
// thread; they need not be thread-safe.
#ifndef SHOAL_OBJECT_STORE_SPILL_STORAGE_H_
#define SHOAL_OBJECT_STORE_SPILL_STORAGE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shoal::object_store {

class SpillStorage {
 public:
  virtual ~SpillStorage() = default;

  // Stores a copy of object `id`'s `size` bytes at `data`. Returns an opaque
  // location for Read and Remove. On failure nothing is left behind;
  // ResourceExhausted when the disk is full.
  virtual absl::StatusOr<std::string> Write(absl::string_view id,
                                            const uint8_t* data,
                                            uint64_t size) = 0;
  // Reads exactly `size` bytes from `location` into `dest`.
  virtual absl::Status Read(const std::string& location, uint8_t* dest,
                            uint64_t size) = 0;
  virtual absl::Status Remove(const std::string& location) = 0;
  // Where the copies go, for messages ("/var/tmp/shoal-spill").
  virtual std::string Describe() const = 0;
};

// One file per spilled object in a directory, named from the object id.
class FolderSpillStorage : public SpillStorage {
 public:
  // Creates `dir` (and its parents) when missing.
  static absl::StatusOr<std::unique_ptr<FolderSpillStorage>> Create(
      const std::string& dir);

  absl::StatusOr<std::string> Write(absl::string_view id, const uint8_t* data,
                                    uint64_t size) override;
  absl::Status Read(const std::string& location, uint8_t* dest,
                    uint64_t size) override;
  absl::Status Remove(const std::string& location) override;
  std::string Describe() const override { return dir_; }

 private:
  explicit FolderSpillStorage(std::string dir) : dir_(std::move(dir)) {}

  const std::string dir_;
  uint64_t next_file_ = 0;  // Keeps names unique when an id comes back.
};

}  // namespace shoal::object_store

#endif  // SHOAL_OBJECT_STORE_SPILL_STORAGE_H_
