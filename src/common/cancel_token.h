// The number that names a task in a cancel request sent to its worker as a
// signal's value (sigqueue carries an int, not an id): the agent that
// signals and the worker that checks it against its running task compute
// it alike.
#ifndef SHOAL_COMMON_CANCEL_TOKEN_H_
#define SHOAL_COMMON_CANCEL_TOKEN_H_

#include <cstdint>
#include <string_view>

namespace shoal {

// FNV-1a of the task id, in 31 bits and never 0 (0: no task).
inline int32_t CancelToken(std::string_view task_id) {
  uint32_t h = 2166136261u;
  for (char c : task_id) {
    h ^= static_cast<uint8_t>(c);
    h *= 16777619u;
  }
  h &= 0x7fffffffu;
  return static_cast<int32_t>(h == 0 ? 1 : h);
}

}  // namespace shoal

#endif  // SHOAL_COMMON_CANCEL_TOKEN_H_
