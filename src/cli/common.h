// What the `shoal` subcommands share: how they print jobs and tables.
#ifndef SHOAL_CLI_COMMON_H_
#define SHOAL_CLI_COMMON_H_

#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "common/shell_quote.h"  // commands printed for the user
#include "shoal/shoal.pb.h"

namespace shoal::cli {

const char* JobStateName(proto::JobInfo::State state);
// "12.3s": how long the job ran, or has run so far.
std::string JobDuration(const proto::JobInfo& info);
// Seconds from `start_ms` to `end_ms` (now when 0), "12.3s"; "" without a
// start.
std::string Duration(int64_t start_ms, int64_t end_ms);

// A row of a listing: (column, value), the same columns in every row.
using Row = std::vector<std::pair<std::string, std::string>>;
// Prints rows as a table under upper-cased column names, cells cut at 60
// characters.
void PrintTable(const std::vector<Row>& rows, std::ostream& out);

}  // namespace shoal::cli

#endif  // SHOAL_CLI_COMMON_H_
