// Comparing secrets (cluster tokens) without leaking where they differ.
#ifndef SHOAL_COMMON_CONSTANT_TIME_H_
#define SHOAL_COMMON_CONSTANT_TIME_H_

#include <string>

namespace shoal {

// True when `a` and `b` hold the same bytes. The time taken depends on the
// lengths only, never on where the first difference is, so that a peer
// guessing a token learns nothing from how fast it is refused.
bool ConstantTimeEquals(const std::string& a, const std::string& b);

}  // namespace shoal

#endif  // SHOAL_COMMON_CONSTANT_TIME_H_
