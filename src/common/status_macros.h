// Propagation helpers for absl::Status / absl::StatusOr.
#ifndef SHOAL_COMMON_STATUS_MACROS_H_
#define SHOAL_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace shoal {

// Returns `status` with `context` prepended to its message ("while X: ...").
inline absl::Status Annotate(const absl::Status& status,
                             absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(context, ": ", status.message()));
}

}  // namespace shoal

#define SHOAL_CONCAT_INNER(a, b) a##b
#define SHOAL_CONCAT(a, b) SHOAL_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                      \
  do {                                             \
    ::absl::Status shoal_status_ = (expr);         \
    if (!shoal_status_.ok()) return shoal_status_; \
  } while (0)

#define ASSIGN_OR_RETURN_IMPL(var, lhs, expr) \
  auto var = (expr);                          \
  if (!var.ok()) return var.status();         \
  lhs = std::move(*var)

#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(SHOAL_CONCAT(shoal_statusor_, __LINE__), lhs, expr)

#endif  // SHOAL_COMMON_STATUS_MACROS_H_
