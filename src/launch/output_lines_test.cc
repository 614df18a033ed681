#include "launch/output_lines.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shoal::launch {
namespace {

// Feeds `chunks` to one rank, round-trips the report through the wire
// format, and prints it.
std::string PrintedThroughTheWire(const std::vector<std::string>& chunks) {
  LineSplitter rank(3, "[rank 3]");
  proto::LaunchReport report;
  for (const std::string& chunk : chunks) rank.Add(chunk, &report);
  rank.Finish(&report);
  proto::LaunchReport received;
  EXPECT_TRUE(received.ParseFromString(report.SerializeAsString()));
  return LinePrinter().Format(received);
}

TEST(OutputLinesTest, BytesArePrintedAsTheRankPrintedThem) {
  const std::string nul("nul\0byte\n", 9);
  EXPECT_EQ(PrintedThroughTheWire({"caf\xE9 ok\n", nul, "\xFF\xFE\n"}),
            "[rank 3] caf\xE9 ok\n[rank 3] " + nul + "[rank 3] \xFF\xFE\n");
  // A line split across reads, and one without a final newline.
  EXPECT_EQ(PrintedThroughTheWire({"hel", "lo\nbye"}),
            "[rank 3] hello\n[rank 3] bye\n");
  EXPECT_EQ(PrintedThroughTheWire({}), "");
  EXPECT_EQ(PrintedThroughTheWire({"\n\n"}), "[rank 3] \n[rank 3] \n");
}

TEST(OutputLinesTest, ALongLineGoesInPiecesUnderOnePrefix) {
  const std::string long_line(3 * kMaxLinePieceBytes + 5, 'x');
  LineSplitter rank(0, "[rank 0]");
  proto::LaunchReport report;
  rank.Add(long_line, &report);
  ASSERT_EQ(report.lines_size(), 3);  // the last 5 bytes wait for more
  for (const auto& line : report.lines()) {
    EXPECT_EQ(line.text().size(), kMaxLinePieceBytes);
    EXPECT_TRUE(line.continues());
  }
  rank.Add("\n", &report);
  ASSERT_EQ(report.lines_size(), 4);
  EXPECT_EQ(report.lines(3).text(), "xxxxx");
  EXPECT_FALSE(report.lines(3).continues());
  EXPECT_EQ(LinePrinter().Format(report), "[rank 0] " + long_line + "\n");
}

TEST(OutputLinesTest, ALastLineOfWholePiecesIsEnded) {
  LineSplitter rank(0, "[rank 0]", /*piece_bytes=*/2);
  proto::LaunchReport report;
  rank.Add("abcd", &report);
  rank.Finish(&report);
  ASSERT_EQ(report.lines_size(), 3);
  EXPECT_FALSE(report.lines(2).continues());
  EXPECT_EQ(LinePrinter().Format(report), "[rank 0] abcd\n");
}

TEST(OutputLinesTest, AnotherRanksLineBetweenPiecesStartsALineOfItsOwn) {
  proto::LaunchReport report;
  auto add = [&](int rank, const std::string& text, bool continues) {
    proto::LaunchLine* l = report.add_lines();
    l->set_rank(rank);
    l->set_prefix("[rank " + std::to_string(rank) + "]");
    l->set_text(text);
    l->set_continues(continues);
  };
  add(0, "aaa", true);
  add(1, "one", false);
  add(0, "bbb", false);
  LinePrinter printer;
  EXPECT_EQ(printer.Format(report),
            "[rank 0] aaa\n[rank 1] one\n[rank 0] bbb\n");
  // The printer remembers an open line from one report to the next.
  proto::LaunchReport first, second;
  *first.add_lines() = report.lines(0);
  *second.add_lines() = report.lines(2);
  LinePrinter across;
  std::string printed = across.Format(first);
  printed += across.Format(second);
  EXPECT_EQ(printed, "[rank 0] aaabbb\n");
}

}  // namespace
}  // namespace shoal::launch
