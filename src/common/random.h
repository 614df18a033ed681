// Random numbers from the kernel, and jitter for periodic work.
#ifndef SHOAL_COMMON_RANDOM_H_
#define SHOAL_COMMON_RANDOM_H_

#include <cstdint>
#include <string>

namespace shoal {

// `bytes` random bytes from the kernel, hex encoded (2 * bytes characters).
std::string RandomHex(int bytes);

// A random non-zero 64-bit number from the kernel.
uint64_t RandomU64();

// `ms` give or take 10% (at least 1 ms), at random: periodic work of many
// processes started together (heartbeats) spreads out instead of coming in
// lockstep.
int64_t JitteredMs(int64_t ms);

}  // namespace shoal

#endif  // SHOAL_COMMON_RANDOM_H_
