// Bounded, non-blocking file-system reads for detection. Internal to
// shoal_accel: every reader here returns quickly and never follows the
// network, so that a node without accelerators starts as fast as without
// detection.
//
// Thread-safe (stateless).
#ifndef SHOAL_ACCEL_FS_UTIL_H_
#define SHOAL_ACCEL_FS_UTIL_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shoal::accel::internal {

// `root` joined with `relative` ("/" + "dev/accel0" -> "/dev/accel0").
std::string JoinPath(absl::string_view root, absl::string_view relative);

// The contents of a regular file, at most `max_bytes` of it. Opens with
// O_NONBLOCK and refuses anything that is not a regular file (device nodes,
// FIFOs), so it cannot hang. NotFound when the file does not exist.
absl::StatusOr<std::string> ReadSmallFile(const std::string& path,
                                          size_t max_bytes = 64 * 1024);

// Names in directory `path`, sorted, at most `max_entries` of them; empty
// when `path` is missing or not a directory.
std::vector<std::string> ListDirectory(const std::string& path,
                                       size_t max_entries = 4096);

enum class EntryKind { kMissing, kDirectory, kOther };
// What `path` is, following symbolic links (sysfs is made of them).
EntryKind GetEntryKind(const std::string& path);

// Creates `path` and its parents (mode 0755); OK if it already exists.
absl::Status MakeDirectories(const std::string& path);
// Writes `contents` to `path`, replacing it.
absl::Status WriteFile(const std::string& path, absl::string_view contents);

}  // namespace shoal::accel::internal

#endif  // SHOAL_ACCEL_FS_UTIL_H_
