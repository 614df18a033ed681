// The clocks every process reads.
#ifndef SHOAL_COMMON_CLOCK_H_
#define SHOAL_COMMON_CLOCK_H_

#include <cstdint>

namespace shoal {

int64_t NowMs();  // wall clock, milliseconds since the epoch

int64_t MonotonicUs();  // steady clock, microseconds

}  // namespace shoal

#endif  // SHOAL_COMMON_CLOCK_H_
