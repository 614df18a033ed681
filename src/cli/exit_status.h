// How a `shoal` command ends: one place turns what a command returns into
// the message the user reads and the process's exit status.
//
//   0            the command did what it was asked (or its child's status,
//                for the commands that run a program: launch, job submit)
//   1            it failed: "shoal: <message>" on stderr
//   kUsageError  the command line was wrong: "shoal: <message>" likewise
#ifndef SHOAL_CLI_EXIT_STATUS_H_
#define SHOAL_CLI_EXIT_STATUS_H_

#include <iosfwd>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shoal::cli {

// Exit status of a command line that is wrong (a misspelled command, a bad
// flag value), as for most Unix tools; 1 is for a command that failed.
inline constexpr int kUsageError = 2;

// A wrong command line: ends the command with kUsageError. (Any other error
// Status ends it with 1, whatever its code.)
absl::Status UsageError(absl::string_view message);
bool IsUsageError(const absl::Status& status);

// The exit status for `result`: its value when OK; else 1, or kUsageError
// for a UsageError, after writing "shoal: <message>" to `err`.
int ExitCode(const absl::StatusOr<int>& result, std::ostream& err);

}  // namespace shoal::cli

#endif  // SHOAL_CLI_EXIT_STATUS_H_
