// What a node agent reports of itself (its leases, workers and object
// store), asked over a blocking connection of the test's own.
#ifndef SHOAL_TESTS_TESTING_AGENT_INFO_H_
#define SHOAL_TESTS_TESTING_AGENT_INFO_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "rpc/blocking_channel.h"
#include "shoal/shoal.pb.h"

namespace shoal::testing {

inline absl::StatusOr<proto::AgentInfo> FetchAgentInfo(
    const std::string& address, const std::string& token,
    int64_t timeout_ms = 5000) {
  auto channel =
      rpc::BlockingChannel::Connect(address, token, "test", timeout_ms);
  if (!channel.ok()) return channel.status();
  proto::AgentInfo info;
  absl::Status s = (*channel)->CallProto(proto::GET_AGENT_INFO, proto::Empty(),
                                         &info, timeout_ms);
  if (!s.ok()) return s;
  return info;
}

}  // namespace shoal::testing

#endif  // SHOAL_TESTS_TESTING_AGENT_INFO_H_
