// Files: whole reads, atomic writes, folders, hashes, the running
// executable; and faulting memory in before a copy.
#ifndef SHOAL_COMMON_FILES_H_
#define SHOAL_COMMON_FILES_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shoal {

// Faults in the whole pages inside [p, p + size) for writing, in one call
// (MADV_POPULATE_WRITE): about twice as fast on fresh shared memory as a
// fault per page while copying. Does nothing where the kernel lacks it.
void PrefaultForWrite(void* p, uint64_t size);

absl::StatusOr<std::string> ReadFile(const std::string& path);

// Writes atomically (temp file + rename) with the given mode.
absl::Status WriteFile(const std::string& path, const std::string& contents,
                       int mode = 0644);

absl::Status MakeDirs(const std::string& path, int mode = 0755);

bool PathExists(const std::string& path);

// Hex SHA-256 of a file's contents.
absl::StatusOr<std::string> Sha256File(const std::string& path);

// The SHA-256 of `bytes`, in hex.
std::string Sha256Hex(std::string_view bytes);

// Absolute path of the running executable.
std::string SelfExecutable();

}  // namespace shoal

#endif  // SHOAL_COMMON_FILES_H_
