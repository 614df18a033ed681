// The runner: one per host of a gang, a task in the host's bundle of the
// gang's placement group. It meets the other hosts on a rendezvous port,
// starts this host's ranks with their environments, streams their output
// and exits to the launcher, and stops them all when the launcher says so,
// when one fails, or when the launcher is lost.
#ifndef SHOAL_LAUNCH_HOST_RUNNER_H_
#define SHOAL_LAUNCH_HOST_RUNNER_H_

#include <string>

namespace shoal::launch {

// The remote function (registered as "RunLaunchHost"): takes a serialized
// proto::LaunchHostSpec, returns a serialized proto::LaunchHostResult.
std::string RunLaunchHost(std::string spec_bytes);

}  // namespace shoal::launch

#endif  // SHOAL_LAUNCH_HOST_RUNNER_H_
