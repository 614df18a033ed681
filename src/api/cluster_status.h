// The head's view of the cluster, for code inside the runtime that explains
// itself with it (the launcher's "busy" errors). Needs shoal::Init().
#ifndef SHOAL_API_CLUSTER_STATUS_H_
#define SHOAL_API_CLUSTER_STATUS_H_

#include "absl/status/statusor.h"
#include "shoal/shoal.pb.h"

namespace shoal::internal {

absl::StatusOr<proto::ClusterStatus> FetchClusterStatus();

}  // namespace shoal::internal

#endif  // SHOAL_API_CLUSTER_STATUS_H_
