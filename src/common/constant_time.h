// Comparing secrets (the cluster token) without leaking, through the time a
// comparison takes, how much of a guess was right.
#ifndef SHOAL_COMMON_CONSTANT_TIME_H_
#define SHOAL_COMMON_CONSTANT_TIME_H_

#include <string_view>

namespace shoal {

// Whether `a` and `b` hold the same bytes, in a time that depends on their
// lengths only (a length that differs is no secret: it is answered at once).
// Out of line, so that no caller's optimizer turns it into an early exit.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace shoal

#endif  // SHOAL_COMMON_CONSTANT_TIME_H_
