#include "cli/common.h"

#include <algorithm>
#include <cstdio>
#include <ostream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"

namespace shoal::cli {

const char* JobStateName(proto::JobInfo::State state) {
  return proto::JobInfo::State_Name(state).c_str();
}

std::string Duration(int64_t start_ms, int64_t end_ms) {
  if (start_ms <= 0) return "";
  int64_t end = end_ms > 0 ? end_ms : NowMs();
  char text[32];
  snprintf(text, sizeof(text), "%.1fs",
           std::max<int64_t>(0, end - start_ms) / 1000.0);
  return text;
}

std::string JobDuration(const proto::JobInfo& info) {
  std::string d = Duration(info.start_time_ms(), info.end_time_ms());
  return d.empty() ? "0.0s" : d;
}

void PrintTable(const std::vector<Row>& rows, std::ostream& out) {
  if (rows.empty()) return;
  constexpr size_t kMaxCell = 60;
  std::vector<size_t> width(rows.front().size(), 0);
  for (size_t c = 0; c < width.size(); ++c) {
    width[c] = rows.front()[c].first.size();
    for (const Row& row : rows) {
      width[c] = std::max(width[c], std::min(row[c].second.size(), kMaxCell));
    }
  }
  auto print = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t c = 0; c < cells.size(); ++c) {
      std::string cell = cells[c].substr(0, kMaxCell);
      absl::StrAppend(
          &line, c ? "  " : "", cell,
          c + 1 < cells.size() ? std::string(width[c] - cell.size(), ' ') : "");
    }
    out << line << "\n";
  };
  std::vector<std::string> header;
  for (const auto& c : rows.front()) {
    header.push_back(absl::AsciiStrToUpper(c.first));
  }
  print(header);
  for (const Row& row : rows) {
    std::vector<std::string> cells;
    for (const auto& c : row) cells.push_back(c.second);
    print(cells);
  }
}

}  // namespace shoal::cli
