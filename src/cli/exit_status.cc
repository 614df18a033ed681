#include "cli/exit_status.h"

#include <ostream>
#include <string>

#include "absl/strings/cord.h"

namespace shoal::cli {
namespace {

// Marks the Status of a wrong command line.
constexpr char kUsagePayload[] = "shoal.cli/usage";

}  // namespace

absl::Status UsageError(absl::string_view message) {
  absl::Status status = absl::InvalidArgumentError(std::string(message));
  status.SetPayload(kUsagePayload, absl::Cord("1"));
  return status;
}

bool IsUsageError(const absl::Status& status) {
  return status.GetPayload(kUsagePayload).has_value();
}

int ExitCode(const absl::StatusOr<int>& result, std::ostream& err) {
  if (result.ok()) return *result;
  err << "shoal: " << result.status().message() << "\n";
  return IsUsageError(result.status()) ? kUsageError : 1;
}

}  // namespace shoal::cli
