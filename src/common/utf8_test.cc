#include "common/utf8.h"

#include <gtest/gtest.h>

#include <string>

namespace shoal {
namespace {

struct Case {
  std::string in;
  bool valid;
  std::string out;  // ToValidUtf8(in)
};

TEST(Utf8Test, ReplacesEachIllFormedSequence) {
  const std::string r = "\xEF\xBF\xBD";
  const Case cases[] = {
      {"", true, ""},
      {"plain ascii", true, "plain ascii"},
      {std::string("nul\0byte", 8), true, std::string("nul\0byte", 8)},
      {"caf\xC3\xA9", true, "caf\xC3\xA9"},
      {"\xE2\x82\xAC \xF0\x9F\x98\x80", true, "\xE2\x82\xAC \xF0\x9F\x98\x80"},
      {"caf\xE9 ok", false, "caf" + r + " ok"},    // Latin-1
      {"\xC0\xAF", false, r + r},                  // overlong
      {"\xED\xA0\x80", false, r + r + r},          // a surrogate
      {"\xF4\x90\x80\x80", false, r + r + r + r},  // past U+10FFFF
      {"\xE2\x82", false, r},                      // cut short
      {"\xE2\x82x", false, r + "x"},               // one subpart
      {"\xF0\x9F\x98", false, r},                  // cut 4-byte char
      {"\x80\xBF", false, r + r},                  // lone continuations
      {"\xFF\xFE", false, r + r},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(IsValidUtf8(c.in), c.valid) << c.in;
    EXPECT_EQ(ToValidUtf8(c.in), c.out) << c.in;
    EXPECT_TRUE(IsValidUtf8(ToValidUtf8(c.in)));
  }
}

TEST(Utf8Test, CutsAtACharacterBoundary) {
  // "é" is two bytes: a cut in its middle leaves it out whole.
  EXPECT_EQ(ToValidUtf8("ab\xC3\xA9", 3), "ab");
  EXPECT_EQ(ToValidUtf8("ab\xC3\xA9", 4), "ab\xC3\xA9");
  EXPECT_EQ(ToValidUtf8("ab\xE9", 4), "ab");  // U+FFFD takes 3 bytes
  EXPECT_EQ(ToValidUtf8("ab\xE9", 5), "ab\xEF\xBF\xBD");
}

TEST(Utf8Test, EveryByteStringComesOutValid) {
  // Every two-byte string, and every byte followed by a cut sequence.
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; ++b) {
      std::string s = {static_cast<char>(a), static_cast<char>(b)};
      std::string out = ToValidUtf8(s);
      ASSERT_TRUE(IsValidUtf8(out)) << a << " " << b;
      if (IsValidUtf8(s)) {
        ASSERT_EQ(out, s);
      }
    }
  }
}

}  // namespace
}  // namespace shoal
