// The number that names a task in a cancel request sent to its worker as a
// signal's value (sigqueue carries an int, not an id): the agent that
// signals and the worker that checks it against its running task compute
// it alike. The value also carries how to cancel (CancelSignal).
#ifndef SHOAL_COMMON_CANCEL_TOKEN_H_
#define SHOAL_COMMON_CANCEL_TOKEN_H_

#include <cstdint>
#include <string_view>

namespace shoal {

// FNV-1a of the task id, in 29 bits and never 0 (0: no task).
inline int32_t CancelToken(std::string_view task_id) {
  uint32_t h = 2166136261u;
  for (char c : task_id) {
    h ^= static_cast<uint8_t>(c);
    h *= 16777619u;
  }
  h &= 0x1fffffffu;
  return static_cast<int32_t>(h == 0 ? 1 : h);
}

// A cancel as the signal's value carries it: the task's token and two
// flags above it (the value stays positive).
struct CancelSignal {
  int32_t token = 0;
  // The tasks the task submitted are cancelled too (Ray's recursive).
  bool recursive = false;
  // Then the worker ends (a forced cancel that cancels children first).
  bool then_exit = false;

  static constexpr int32_t kRecursive = 1 << 29;
  static constexpr int32_t kThenExit = 1 << 30;

  int32_t Encode() const {
    return token | (recursive ? kRecursive : 0) | (then_exit ? kThenExit : 0);
  }
  static CancelSignal Decode(int32_t value) {
    return {.token = value & (kRecursive - 1),
            .recursive = (value & kRecursive) != 0,
            .then_exit = (value & kThenExit) != 0};
  }
};

}  // namespace shoal

#endif  // SHOAL_COMMON_CANCEL_TOKEN_H_
