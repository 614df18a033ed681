// output_bytes: what programs print, on its two ways out. A rank's output
// through `shoal launch` (launch/output_lines.h: cut into lines and pieces,
// sent in a LaunchReport's bytes fields, printed by the launcher), and a
// job's log on its way to the REST API and the dashboard (proto bytes, then
// JSON with what is not UTF-8 replaced, common/utf8.h).
//
// Input: byte 0 picks the number of ranks (1-4), byte 1 the piece size
// (1-64 bytes, so that pieces happen at fuzzing sizes) and the seed of the
// read sizes; the rest is the output, read in chunks of 1-16 bytes, chunk i
// from rank i % ranks.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/utf8.h"
#include "fuzz/fuzz_targets.h"
#include "launch/output_lines.h"
#include "shoal/shoal.pb.h"

namespace shoal::fuzz {
namespace {

// `out` as one rank printed it, through the printer: each line after the
// prefix, a last line without a newline given one.
std::string PrintedAlone(std::string_view out, const std::string& prefix) {
  std::string printed;
  while (!out.empty()) {
    size_t nl = out.find('\n');
    std::string_view line = out.substr(0, nl);
    printed.append(prefix).append(" ").append(line).append("\n");
    if (nl == std::string_view::npos) break;
    out.remove_prefix(nl + 1);
  }
  return printed;
}

void CheckLogs(std::string_view out) {
  std::string valid = ToValidUtf8(out);
  SHOAL_FUZZ_CHECK(IsValidUtf8(valid));
  if (IsValidUtf8(out)) SHOAL_FUZZ_CHECK(valid == out);
  proto::JobLogs logs;
  logs.set_data(out.data(), out.size());
  proto::JobLogs received;
  SHOAL_FUZZ_CHECK(received.ParseFromString(logs.SerializeAsString()));
  SHOAL_FUZZ_CHECK(received.data() == out);
  // As the REST API serves it: JSON, never an exception.
  std::string json = nlohmann::json{{"logs", received.data()}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
  nlohmann::json back = nlohmann::json::parse(json, nullptr, false);
  SHOAL_FUZZ_CHECK(!back.is_discarded());
  SHOAL_FUZZ_CHECK(back["logs"].get<std::string>() == valid);
}

}  // namespace

int FuzzOutputBytes(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int ranks = 1 + data[0] % 4;
  const size_t piece = 1 + data[1] % 64;
  uint32_t seed = data[1];
  std::string_view out(reinterpret_cast<const char*>(data) + 2, size - 2);

  std::vector<launch::LineSplitter> splitters;
  std::vector<std::string> printed_by(ranks);
  for (int r = 0; r < ranks; ++r) {
    splitters.emplace_back(r, "[rank " + std::to_string(r) + "]", piece);
  }
  proto::LaunchReport report;
  size_t at = 0;
  for (int chunk = 0; at < out.size(); ++chunk) {
    seed = seed * 1103515245u + 12345u;
    size_t n = std::min<size_t>(1 + (seed >> 16) % 16, out.size() - at);
    splitters[chunk % ranks].Add(out.substr(at, n), &report);
    printed_by[chunk % ranks].append(out.substr(at, n));
    at += n;
  }
  for (auto& s : splitters) s.Finish(&report);

  // Bytes fields take any bytes: the launcher always reads the report.
  proto::LaunchReport received;
  SHOAL_FUZZ_CHECK(received.ParseFromString(report.SerializeAsString()));
  SHOAL_FUZZ_CHECK(received.lines_size() == report.lines_size());

  // Each rank's lines, joined, are what it printed (a last line ended).
  std::vector<std::string> joined(ranks);
  for (const proto::LaunchLine& line : received.lines()) {
    SHOAL_FUZZ_CHECK(line.rank() >= 0 && line.rank() < ranks);
    SHOAL_FUZZ_CHECK(line.text().size() <= piece);
    SHOAL_FUZZ_CHECK(!line.continues() || line.text().size() == piece);
    joined[line.rank()] += line.text();
    if (!line.continues()) joined[line.rank()] += '\n';
  }
  for (int r = 0; r < ranks; ++r) {
    std::string want = printed_by[r];
    if (!want.empty() && want.back() != '\n') want += '\n';
    SHOAL_FUZZ_CHECK(joined[r] == want);
  }
  std::string printed = launch::LinePrinter().Format(received);
  if (ranks == 1) {
    SHOAL_FUZZ_CHECK(printed == PrintedAlone(out, "[rank 0]"));
  }
  CheckLogs(out);
  return 0;
}

std::vector<Seed> OutputBytesSeeds() {
  using namespace std::string_literals;
  return {
      {"latin1",
       "\x01\x05"
       "caf\xE9 ok\nafter\n"s},
      {"nul_bytes",
       "\x00\x07"
       "nul\0byte\n\0\0\n"s},
      {"long_line", "\x00\x03"s + std::string(300, 'x') + "\n"},
      {"no_final_newline",
       "\x02\x10"
       "one\ntwo\nthree"s},
      {"partial_utf8",
       "\x03\x20"
       "\xE2\x82\n\xF0\x9F\x98\x80\n\xC3"s},
      {"binary",
       "\x01\x3F"
       "\x7F"
       "ELF\x02\x01\x01\0\0\0\n\xFF\xFE\r\n"s},
  };
}

}  // namespace shoal::fuzz
