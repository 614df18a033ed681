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

// Reading a growing log in pieces never splits a character.
TEST(Utf8Test, CharactersAreNeverSplitBetweenReads) {
  EXPECT_EQ(WholeUtf8Prefix("abc"), 3u);
  EXPECT_EQ(WholeUtf8Prefix(""), 0u);
  EXPECT_EQ(WholeUtf8Prefix("caf\xc3"), 3u);           // é cut after 1 of 2
  EXPECT_EQ(WholeUtf8Prefix("caf\xc3\xa9"), 5u);       // whole
  EXPECT_EQ(WholeUtf8Prefix("x\xe2\x82"), 1u);         // € cut after 2 of 3
  EXPECT_EQ(WholeUtf8Prefix("\xf0\x9f\x98"), 0u);      // 4-byte cut after 3
  EXPECT_EQ(WholeUtf8Prefix("\xf0\x9f\x98\x80"), 4u);  // whole
  // Latin-1 é: a lead byte at the end might be a cut character (held back
  // while the job runs); inside the text it is not.
  EXPECT_EQ(WholeUtf8Prefix("caf\xe9"), 3u);
  EXPECT_EQ(WholeUtf8Prefix("caf\xe9 ok"), 7u);
  EXPECT_EQ(CutUtf8Head("\xa9 ok"), 1u);
  EXPECT_EQ(CutUtf8Head("\x82\xac!"), 2u);
  EXPECT_EQ(CutUtf8Head("ok"), 0u);
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
