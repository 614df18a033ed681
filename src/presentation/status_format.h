// `shoal status` output: Ray-style text, or JSON.
#ifndef SHOAL_PRESENTATION_STATUS_FORMAT_H_
#define SHOAL_PRESENTATION_STATUS_FORMAT_H_

#include <string>

namespace shoal::proto {
class ClusterStatus;
}

namespace shoal::internal {

std::string FormatStatusText(const proto::ClusterStatus& status, bool verbose);
// Who holds the cluster's resources, for a "busy" error: its placement
// groups and leases, most recent last, by job ("placement group 5f0e1a
// "trainers" of job3; 2 leases of job4 on n1 ({CPU: 1.0} for 12 s)").
// Empty when nothing is held.
std::string DescribeHolders(const proto::ClusterStatus& status);

std::string FormatStatusJson(const proto::ClusterStatus& status);

}  // namespace shoal::internal

#endif  // SHOAL_PRESENTATION_STATUS_FORMAT_H_
