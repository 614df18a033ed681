// This build's version, and how a cluster's processes check that they are
// of one version: the head records its own in the cluster's key-value store
// when it starts, and a driver or node agent that joins compares it with its
// own before it registers, as Ray's drivers do.
#ifndef SHOAL_COMMON_VERSION_H_
#define SHOAL_COMMON_VERSION_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace shoal {

// The project's version (CMake's), e.g. "0.29.0".
const char* ShoalVersion();

// Where the head records ShoalVersion() (Shoal's own key-value space).
inline constexpr char kClusterVersionKey[] = "cluster/version";

// OK when `cluster` (the recorded version; empty when the head recorded
// none, as a head older than the check) is `mine`; else FailedPrecondition
// saying which is which and what to do. `who` names the joining process
// ("this driver", "this node agent").
absl::Status CheckSameVersion(std::string_view cluster, std::string_view mine,
                              std::string_view who);

}  // namespace shoal

#endif  // SHOAL_COMMON_VERSION_H_
