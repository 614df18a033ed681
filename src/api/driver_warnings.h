// Warnings the runtime has for the program that drives it, as Ray pushes
// them to its driver (an actor with thousands of calls queued, say). Each
// is logged at once, and kept for the Python frontend's error stream,
// which hands it to its subscribers (shoal.test_utils.init_error_pubsub)
// with Ray's type name. The last kMaxKept are kept.
//
// Thread-safe.
#ifndef SHOAL_API_DRIVER_WARNINGS_H_
#define SHOAL_API_DRIVER_WARNINGS_H_

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace shoal::internal {

inline constexpr size_t kMaxKeptWarnings = 1000;

// `type`: Ray's name for it ("excess_queueing_warning").
void PublishWarning(const std::string& type, const std::string& text);
// (type, text) of the warnings published since the last call, oldest first.
std::vector<std::pair<std::string, std::string>> TakeWarnings();

}  // namespace shoal::internal

#endif  // SHOAL_API_DRIVER_WARNINGS_H_
