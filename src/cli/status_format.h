// `shoal status` output: Ray-style text, or JSON.
#ifndef SHOAL_CLI_STATUS_FORMAT_H_
#define SHOAL_CLI_STATUS_FORMAT_H_

#include <string>

namespace shoal::proto {
class ClusterStatus;
}

namespace shoal::cli {

std::string FormatStatusText(const proto::ClusterStatus& status, bool verbose);
std::string FormatStatusJson(const proto::ClusterStatus& status);

}  // namespace shoal::cli

#endif  // SHOAL_CLI_STATUS_FORMAT_H_
