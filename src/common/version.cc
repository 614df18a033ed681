#include "common/version.h"

#include "absl/strings/str_cat.h"

#ifndef SHOAL_VERSION
#error "the build defines this macro: CMake's project version"
#endif

namespace shoal {

const char* ShoalVersion() { return SHOAL_VERSION; }

absl::Status CheckSameVersion(std::string_view cluster, std::string_view mine,
                              std::string_view who) {
  if (cluster == mine) return absl::OkStatus();
  const std::string started = cluster.empty()
                                  ? "older than 0.29.0 (it records no version)"
                                  : std::string(cluster);
  return absl::FailedPreconditionError(absl::StrCat(
      "Version mismatch: the cluster was started with Shoal ", started,
      ", and ", std::string(who), " is Shoal ", std::string(mine),
      ". Run one version on every node and driver: restart the cluster "
      "with this version, or use the version the cluster runs."));
}

}  // namespace shoal
