// Comparing secrets (the cluster token) without leaking, through the time a
// comparison takes, how much of a guess was right.
#ifndef SHOAL_COMMON_CONSTANT_TIME_H_
#define SHOAL_COMMON_CONSTANT_TIME_H_

#include <cstddef>
#include <string_view>

namespace shoal {

// Whether `a` and `b` are equal, in a time that depends on their lengths
// only (a length that differs is no secret: it is answered at once).
inline bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

}  // namespace shoal

#endif  // SHOAL_COMMON_CONSTANT_TIME_H_
