#include "common/version.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal {
namespace {

using ::testing::HasSubstr;

TEST(VersionTest, TheBuildsVersionIsThreeNumbers) {
  EXPECT_THAT(ShoalVersion(),
              ::testing::MatchesRegex("[0-9]+\\.[0-9]+\\.[0-9]+"));
}

TEST(VersionTest, OneVersionPassesAndAnotherNamesBothAndTheRemedy) {
  EXPECT_TRUE(CheckSameVersion("0.29.0", "0.29.0", "this driver").ok());
  absl::Status other = CheckSameVersion("0.28.1", "0.29.0", "this driver");
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.message(),
              HasSubstr("cluster was started with Shoal 0.28.1"));
  EXPECT_THAT(other.message(), HasSubstr("this driver is Shoal 0.29.0"));
  EXPECT_THAT(other.message(), HasSubstr("restart the cluster"));
}

TEST(VersionTest, AHeadThatRecordedNoVersionIsAnOlderOne) {
  absl::Status none = CheckSameVersion("", "0.29.0", "this node");
  EXPECT_FALSE(none.ok());
  EXPECT_THAT(none.message(), HasSubstr("records no version"));
}

}  // namespace
}  // namespace shoal
