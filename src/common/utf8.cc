#include "common/utf8.h"

#include <cstdint>

namespace shoal {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// The length of the well-formed character at the start of `s`, or 0 when it
// starts with an ill-formed sequence; `*bad` is then how many bytes that
// sequence spans (its maximal subpart, at least 1). Table 3-7 of the
// Unicode standard.
size_t CharLength(std::string_view s, size_t* bad) {
  const auto b = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t lead = b(0);
  *bad = 1;
  if (lead < 0x80) return 1;
  size_t length;
  uint8_t lo = 0x80, hi = 0xBF;  // the second byte's range
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;  // at most U+10FFFF
  } else {
    return 0;
  }
  for (size_t i = 1; i < length; ++i) {
    if (i >= s.size()) {
      *bad = i;
      return 0;
    }
    const uint8_t low = i == 1 ? lo : 0x80, high = i == 1 ? hi : 0xBF;
    if (b(i) < low || b(i) > high) {
      *bad = i;
      return 0;
    }
  }
  return length;
}

}  // namespace

bool IsValidUtf8(std::string_view bytes) {
  size_t bad;
  while (!bytes.empty()) {
    size_t n = CharLength(bytes, &bad);
    if (n == 0) return false;
    bytes.remove_prefix(n);
  }
  return true;
}

std::string ToValidUtf8(std::string_view bytes, size_t max_bytes) {
  std::string out;
  out.reserve(bytes.size() < max_bytes ? bytes.size() : max_bytes);
  size_t bad;
  while (!bytes.empty()) {
    size_t n = CharLength(bytes, &bad);
    std::string_view piece = n > 0 ? bytes.substr(0, n) : kReplacement;
    if (out.size() + piece.size() > max_bytes) break;
    out.append(piece);
    bytes.remove_prefix(n > 0 ? n : bad);
  }
  return out;
}

size_t WholeUtf8Prefix(std::string_view bytes) {
  // A character is at most 4 bytes: look back for the lead byte of the
  // last one.
  for (size_t back = 1; back <= 4 && back <= bytes.size(); ++back) {
    unsigned char c = static_cast<unsigned char>(bytes[bytes.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte
    size_t length = (c & 0xE0) == 0xC0   ? 2
                    : (c & 0xF0) == 0xE0 ? 3
                    : (c & 0xF8) == 0xF0 ? 4
                                         : 1;
    return back < length ? bytes.size() - back : bytes.size();
  }
  return bytes.size();
}

size_t CutUtf8Head(std::string_view bytes) {
  size_t n = 0;
  while (n < 3 && n < bytes.size() &&
         (static_cast<unsigned char>(bytes[n]) & 0xC0) == 0x80) {
    ++n;
  }
  return n;
}

}  // namespace shoal
