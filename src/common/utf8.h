// Text that must be UTF-8 (proto `string` fields, JSON) made from bytes that
// need not be: a program's error messages, names and output. Program output
// itself travels as bytes; these are for the places where it becomes text.
#ifndef SHOAL_COMMON_UTF8_H_
#define SHOAL_COMMON_UTF8_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace shoal {

// True when `bytes` is well-formed UTF-8 (no overlong forms, surrogates or
// code points past U+10FFFF), as protobuf and JSON require.
bool IsValidUtf8(std::string_view bytes);

// `bytes` as well-formed UTF-8: each maximal ill-formed subsequence becomes
// U+FFFD (as the Unicode standard recommends), and the result is cut at a
// character boundary to at most `max_bytes`.
std::string ToValidUtf8(std::string_view bytes,
                        size_t max_bytes = std::string::npos);

// How many bytes of `bytes` come before a character cut off at its end
// (all of them when none is), so that reading a growing file on from there
// never splits a character between two reads.
size_t WholeUtf8Prefix(std::string_view bytes);
// How many bytes at the start of `bytes` are the rest of a character cut
// off before it (at most 3).
size_t CutUtf8Head(std::string_view bytes);

}  // namespace shoal

#endif  // SHOAL_COMMON_UTF8_H_
