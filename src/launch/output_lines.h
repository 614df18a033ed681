// A rank's output on its way from the per-host runner to the launcher's
// terminal. Output is bytes, not text (Latin-1, NUL bytes, progress bars,
// a binary file cat'ed to stdout): it travels in proto `bytes` fields and
// is printed as it came. It goes in lines, each after its rank's prefix;
// a line longer than kMaxLinePieceBytes goes in pieces, so that no line is
// held without bound on the way.
//
// Threading: each object belongs to one thread.
#ifndef SHOAL_LAUNCH_OUTPUT_LINES_H_
#define SHOAL_LAUNCH_OUTPUT_LINES_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "shoal/shoal.pb.h"

namespace shoal::launch {

inline constexpr size_t kMaxLinePieceBytes = 64 << 10;

// Cuts one rank's output into LaunchLines: each line it completes, and each
// `piece_bytes` (> 0) of a longer one (with `continues` set).
class LineSplitter {
 public:
  LineSplitter(int rank, std::string prefix,
               size_t piece_bytes = kMaxLinePieceBytes)
      : rank_(rank), prefix_(std::move(prefix)), piece_bytes_(piece_bytes) {}

  // Adds to `report` the lines and pieces that `bytes` completes.
  void Add(std::string_view bytes, proto::LaunchReport* report);
  // The output ended: what followed its last newline is its last line.
  void Finish(proto::LaunchReport* report);

  const std::string& prefix() const { return prefix_; }

 private:
  void Emit(std::string_view text, bool continues, proto::LaunchReport* report);

  const int rank_;
  const std::string prefix_;
  const size_t piece_bytes_;
  std::string partial_;  // after the last newline, under a piece's size
  bool open_ = false;    // the last line emitted was a piece: not ended
};

// What the launcher prints for reports' lines, in order: each line after its
// rank's prefix, a line sent in pieces after one prefix. A line of another
// rank that comes between the pieces of an open line starts on a line of
// its own, and the rest of the open line gets its prefix again.
class LinePrinter {
 public:
  std::string Format(const proto::LaunchReport& report);

 private:
  int open_rank_ = -1;  // whose line printed last has not ended; -1: none
};

}  // namespace shoal::launch

#endif  // SHOAL_LAUNCH_OUTPUT_LINES_H_
