#include "agent/head_watch.h"

#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace shoal::agent {
namespace {

constexpr int64_t kStart = 1'000'000'000;
constexpr int64_t kSecond = 1'000'000;

TEST(HeadWatchTest, ANodeStopsOnlyAfterTheWholeTimeout) {
  HeadWatch watch("10.0.0.1:6379", /*timeout_ms=*/60000, kStart);
  EXPECT_FALSE(watch.Check(kStart + 59 * kSecond).has_value());
  std::optional<std::string> why = watch.Check(kStart + 60 * kSecond);
  ASSERT_TRUE(why.has_value());
  EXPECT_TRUE(absl::StrContains(*why,
                                "the head at 10.0.0.1:6379 has been "
                                "unreachable for 60 s"))
      << *why;
  EXPECT_TRUE(absl::StrContains(*why, "shoal start --address=10.0.0.1:6379"))
      << *why;
  EXPECT_FALSE(absl::StrContains(*why, "Last error")) << *why;
}

TEST(HeadWatchTest, AnAnswerStartsTheTimeoutAgain) {
  HeadWatch watch("h:1", 10000, kStart);
  watch.Failed(absl::UnavailableError("connection refused"));
  watch.Answered(kStart + 9 * kSecond);
  EXPECT_FALSE(watch.Check(kStart + 18 * kSecond).has_value());
  std::optional<std::string> why = watch.Check(kStart + 19 * kSecond);
  ASSERT_TRUE(why.has_value());
  // The answer cleared the error.
  EXPECT_FALSE(absl::StrContains(*why, "connection refused")) << *why;
}

TEST(HeadWatchTest, SaysWhatTheHeadLastAnswered) {
  struct Case {
    absl::Status error;
    std::string want;
  };
  for (const Case& c : std::vector<Case>{
           {absl::UnavailableError("connection refused"),
            "Last error: UNAVAILABLE: connection refused"},
           {absl::PermissionDeniedError("wrong token"),
            "It refuses this node (PERMISSION_DENIED: wrong token): another "
            "cluster answers there"},
           {absl::UnauthenticatedError("bad token"),
            "It refuses this node (UNAUTHENTICATED: bad token)"},
       }) {
    HeadWatch watch("h:1", 1000, kStart);
    watch.Failed(c.error);
    std::optional<std::string> why = watch.Check(kStart + 2 * kSecond);
    ASSERT_TRUE(why.has_value());
    EXPECT_TRUE(absl::StrContains(*why, c.want)) << *why;
  }
}

TEST(HeadWatchTest, ChecksATenthOfTheTimeoutWithinBounds) {
  EXPECT_EQ(HeadWatch("h:1", 60000, 0).period_ms(), 1000);
  EXPECT_EQ(HeadWatch("h:1", 5000, 0).period_ms(), 500);
  EXPECT_EQ(HeadWatch("h:1", 200, 0).period_ms(), 100);
}

}  // namespace
}  // namespace shoal::agent
