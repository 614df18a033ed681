// For the RPC layer's tests: checks that run the same over plain TCP and
// TLS.
#ifndef SHOAL_RPC_RPC_TESTING_H_
#define SHOAL_RPC_RPC_TESTING_H_

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "rpc/event_loop.h"
#include "rpc/rpc.h"

namespace shoal::rpc {

// Makes `calls` calls of `echo` (a method that replies with its request) on
// `channel`, all from one closure on `loop` (so that they pipeline), and
// waits for every reply. Returns what went wrong: failed calls and replies
// that are not their own request's; empty when all came back right.
inline std::vector<std::string> PipelinedEchoes(EventLoop* loop,
                                                Channel* channel, int echo,
                                                int calls,
                                                const std::string& tag) {
  struct State {
    int answered = 0;
    std::vector<std::string> wrong;
    std::promise<std::vector<std::string>> done;
  };
  auto state = std::make_shared<State>();
  auto done = state->done.get_future();
  loop->Post([=] {
    for (int i = 0; i < calls; ++i) {
      std::string payload = absl::StrCat("call ", tag, "/", i);
      channel->Call(echo, payload,
                    [state, payload, calls](absl::StatusOr<std::string> reply) {
                      if (!reply.ok()) {
                        state->wrong.push_back(reply.status().ToString());
                      } else if (*reply != payload) {
                        state->wrong.push_back(*reply + " for " + payload);
                      }
                      if (++state->answered == calls) {
                        state->done.set_value(std::move(state->wrong));
                      }
                    });
    }
  });
  if (done.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    return {"not every call was answered within 20 s"};
  }
  return done.get();
}

}  // namespace shoal::rpc

#endif  // SHOAL_RPC_RPC_TESTING_H_
