// How the head's parts reach node agents and time, as seams: the head wires
// them to its RPC channels and event loop; unit tests pass fakes that record
// the calls and fire timers by hand.
//
// Threading: every callback runs on the head's event loop.
#ifndef SHOAL_HEAD_AGENT_CALL_H_
#define SHOAL_HEAD_AGENT_CALL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "google/protobuf/message_lite.h"

namespace shoal {

using AgentReply = std::function<void(absl::StatusOr<std::string> payload)>;

// Calls `method` on the agent at `address` with the encoded `payload`;
// `done` gets the encoded reply or the error (a timeout after
// `timeout_ms`). The head shares one connection per agent among its parts.
using AgentCall = std::function<void(const std::string& address, int method,
                                     std::string payload, AgentReply done,
                                     int64_t timeout_ms)>;

// Runs `fn` after `delay_ms` on the head's loop.
using RunAfter = std::function<void(int64_t delay_ms, std::function<void()>)>;

// AgentCall with a typed reply: a reply that does not parse is DataLoss.
template <typename Reply>
void CallAgent(const AgentCall& call, const std::string& address, int method,
               const google::protobuf::MessageLite& request,
               std::function<void(absl::StatusOr<Reply>)> done,
               int64_t timeout_ms) {
  call(
      address, method, request.SerializeAsString(),
      [done = std::move(done), method](absl::StatusOr<std::string> payload) {
        if (!payload.ok()) return done(payload.status());
        Reply reply;
        if (!reply.ParseFromString(*payload)) {
          return done(absl::DataLossError("malformed reply to method " +
                                          std::to_string(method)));
        }
        done(std::move(reply));
      },
      timeout_ms);
}

}  // namespace shoal

#endif  // SHOAL_HEAD_AGENT_CALL_H_
