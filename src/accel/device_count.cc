#include "accel/device_count.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace shoal::accel::internal {

std::vector<std::string> ParseVisibleDeviceList(absl::string_view value) {
  std::vector<std::string> names;
  absl::string_view trimmed = absl::StripAsciiWhitespace(value);
  if (trimmed == "NoDevFiles") return names;
  for (absl::string_view part : absl::StrSplit(trimmed, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty() || part.front() == '-') break;
    names.emplace_back(part);
  }
  return names;
}

std::optional<std::vector<std::string>> VisibleDeviceList(
    const std::map<std::string, std::string>& env,
    const std::string& variable) {
  auto it = env.find(variable);
  if (it == env.end()) return std::nullopt;
  return ParseVisibleDeviceList(it->second);
}

absl::StatusOr<DeviceCount> ResolveDeviceCount(
    absl::string_view flag, std::optional<double> override_count, int detected,
    const std::optional<std::vector<std::string>>& visible,
    absl::string_view variable) {
  DeviceCount result;
  if (override_count.has_value()) {
    double value = *override_count;
    if (!std::isfinite(value) || value < 0 || value != std::floor(value) ||
        value > 1 << 20) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, "=", value,
                       " is not a device count; give a whole number >= 0"));
    }
    result.count = static_cast<int>(value);
    if (visible.has_value() &&
        result.count > static_cast<int>(visible->size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, "=", result.count, " but ", variable, " lists only ",
          visible->size(), " device(s); lower ", flag, " or unset ", variable));
    }
  } else {
    result.count = detected;
    if (visible.has_value()) {
      result.count = std::min(result.count, static_cast<int>(visible->size()));
    }
  }
  if (visible.has_value()) {
    result.names.assign(visible->begin(), visible->begin() + result.count);
  }
  return result;
}

}  // namespace shoal::accel::internal
