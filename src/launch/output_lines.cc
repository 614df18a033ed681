#include "launch/output_lines.h"

#include "absl/strings/str_cat.h"

namespace shoal::launch {

void LineSplitter::Emit(std::string_view text, bool continues,
                        proto::LaunchReport* report) {
  open_ = continues;
  proto::LaunchLine* line = report->add_lines();
  line->set_rank(rank_);
  line->set_prefix(prefix_);
  line->set_text(text.data(), text.size());
  line->set_continues(continues);
}

void LineSplitter::Add(std::string_view bytes, proto::LaunchReport* report) {
  partial_.append(bytes);
  std::string_view rest = partial_;
  while (true) {
    size_t nl = rest.find('\n');
    if (nl != std::string_view::npos && nl <= piece_bytes_) {
      Emit(rest.substr(0, nl), /*continues=*/false, report);
      rest.remove_prefix(nl + 1);
    } else if (rest.size() >= piece_bytes_) {
      // No line is longer than a piece, however much came in one read.
      Emit(rest.substr(0, piece_bytes_), /*continues=*/true, report);
      rest.remove_prefix(piece_bytes_);
    } else {
      break;
    }
  }
  partial_.erase(0, partial_.size() - rest.size());
}

void LineSplitter::Finish(proto::LaunchReport* report) {
  // A last line sent whole in pieces still gets its end.
  if (partial_.empty() && !open_) return;
  Emit(partial_, /*continues=*/false, report);
  partial_.clear();
}

std::string LinePrinter::Format(const proto::LaunchReport& report) {
  std::string out;
  for (const proto::LaunchLine& line : report.lines()) {
    if (open_rank_ != line.rank()) {
      if (open_rank_ >= 0) out += '\n';
      absl::StrAppend(&out, line.prefix(), " ");
    }
    out += line.text();
    if (line.continues()) {
      open_rank_ = line.rank();
    } else {
      out += '\n';
      open_rank_ = -1;
    }
  }
  return out;
}

}  // namespace shoal::launch
