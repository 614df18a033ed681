#include "common/random.h"

#include <sys/random.h>

#include <algorithm>
#include <random>

namespace shoal {

std::string RandomHex(int bytes) {
  std::string raw(bytes, '\0');
  size_t got = 0;
  while (got < raw.size()) {
    ssize_t n = getrandom(raw.data() + got, raw.size() - got, 0);
    if (n > 0) got += n;
  }
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes * 2);
  for (unsigned char c : raw) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

uint64_t RandomU64() {
  uint64_t v = 0;
  while (v == 0) {
    if (getrandom(&v, sizeof(v), 0) != sizeof(v)) v = 0;
  }
  return v;
}

int64_t JitteredMs(int64_t ms) {
  thread_local std::mt19937_64 rng(RandomU64());
  int64_t spread = std::max<int64_t>(1, ms / 10);
  std::uniform_int_distribution<int64_t> d(-spread, spread);
  return std::max<int64_t>(1, ms + d(rng));
}

}  // namespace shoal
