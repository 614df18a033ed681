// How many devices of a kind a node advertises, given what detection found,
// a --num-* override and a visible-device list the node agent inherited
// (CUDA_VISIBLE_DEVICES, TPU_VISIBLE_CHIPS). Internal to shoal_accel.
//
// Thread-safe (stateless).
#ifndef SHOAL_ACCEL_DEVICE_COUNT_H_
#define SHOAL_ACCEL_DEVICE_COUNT_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shoal::accel::internal {

// The device names of a visible-device variable, in order: "0,1,3" ->
// {"0", "1", "3"}. Stops at the first empty or negative entry, as CUDA does;
// "NoDevFiles" (set by some container runtimes) means none.
std::vector<std::string> ParseVisibleDeviceList(absl::string_view value);

// The visible-device list in `env[variable]`, or nullopt when the variable
// is absent (no restriction).
std::optional<std::vector<std::string>> VisibleDeviceList(
    const std::map<std::string, std::string>& env, const std::string& variable);

struct DeviceCount {
  int count = 0;
  // Names of devices 0 .. count-1 for the child's visible-device variable;
  // empty when they are the ids themselves.
  std::vector<std::string> names;
};

// `detected` devices, limited to `visible` when set, or `override_count`
// (which must be a whole number >= 0, and no more than `visible` lists).
// `flag` ("--num-gpus") and `variable` ("CUDA_VISIBLE_DEVICES") name the
// inputs in errors.
absl::StatusOr<DeviceCount> ResolveDeviceCount(
    absl::string_view flag, std::optional<double> override_count, int detected,
    const std::optional<std::vector<std::string>>& visible,
    absl::string_view variable);

}  // namespace shoal::accel::internal

#endif  // SHOAL_ACCEL_DEVICE_COUNT_H_
