// Byte counts and object ids in messages a person reads.
#ifndef SHOAL_OBJECT_STORE_FORMAT_UTIL_H_
#define SHOAL_OBJECT_STORE_FORMAT_UTIL_H_

#include <cstdint>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace shoal::object_store {

inline std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double value = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (value >= 1024 && unit + 1 < 5) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

// An object id as text: itself when printable, else hex (ids are opaque
// bytes).
inline std::string FormatId(absl::string_view id) {
  for (char c : id) {
    if (c < 0x20 || c > 0x7e)
      return absl::StrCat("0x", absl::BytesToHexString(id));
  }
  return std::string(id);
}

}  // namespace shoal::object_store

#endif  // SHOAL_OBJECT_STORE_FORMAT_UTIL_H_
