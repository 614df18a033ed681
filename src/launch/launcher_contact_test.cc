#include "launch/launcher_contact.h"

#include <string>

#include "gtest/gtest.h"

namespace shoal::launch {
namespace {

TEST(LauncherContactTest, AnUnreachableLauncherIsLostAfterTheLimit) {
  LauncherContact contact;
  const absl::Status away = absl::UnavailableError("connection refused");
  EXPECT_FALSE(contact.LostAfter(away, 1'000'000));
  EXPECT_FALSE(contact.LostAfter(away, 1'000'000 + kLauncherLostUs - 1));
  EXPECT_TRUE(contact.LostAfter(away, 1'000'000 + kLauncherLostUs));
}

TEST(LauncherContactTest, AReportThatGetsThroughStartsTheCountAgain) {
  LauncherContact contact;
  const absl::Status away = absl::UnavailableError("timed out");
  EXPECT_FALSE(contact.LostAfter(away, 0));
  EXPECT_FALSE(contact.LostAfter(absl::OkStatus(), kLauncherLostUs - 10));
  EXPECT_FALSE(contact.LostAfter(away, kLauncherLostUs));
  EXPECT_FALSE(contact.LostAfter(away, 2 * kLauncherLostUs - 1));
  EXPECT_TRUE(contact.LostAfter(away, 2 * kLauncherLostUs));
}

TEST(LauncherContactTest, ALauncherThatRefusesTheTokenIsLostAtOnce) {
  LauncherContact contact;
  EXPECT_TRUE(contact.LostAfter(absl::PermissionDeniedError("wrong token"), 5));
}

proto::LaunchReport Lines(int n, size_t bytes_each) {
  proto::LaunchReport report;
  for (int i = 0; i < n; ++i) {
    proto::LaunchLine* line = report.add_lines();
    line->set_text(std::to_string(i) + std::string(bytes_each, 'x'));
  }
  return report;
}

TEST(TrimPendingTest, KeepsTheNewestLines) {
  proto::LaunchReport report = Lines(kMaxPendingLines + 5, 0);
  TrimPending(&report);
  ASSERT_EQ(report.lines_size(), kMaxPendingLines);
  EXPECT_EQ(report.lines(0).text(), "5");
  EXPECT_EQ(report.lines(kMaxPendingLines - 1).text(),
            std::to_string(kMaxPendingLines + 4));
}

TEST(TrimPendingTest, KeepsAtMostTheByteLimit) {
  // Four lines of 6 MiB: only the newest two fit in 16 MiB.
  proto::LaunchReport report = Lines(4, 6 << 20);
  TrimPending(&report);
  ASSERT_EQ(report.lines_size(), 2);
  EXPECT_EQ(report.lines(0).text()[0], '2');
  EXPECT_EQ(report.lines(1).text()[0], '3');
}

TEST(TrimPendingTest, LeavesWhatFitsAlone) {
  proto::LaunchReport report = Lines(3, 10);
  TrimPending(&report);
  EXPECT_EQ(report.lines_size(), 3);
}

}  // namespace
}  // namespace shoal::launch
