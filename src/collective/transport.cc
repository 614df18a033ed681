#include "collective/transport.h"

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/types/optional.h"

namespace shoal::collective::internal {
namespace {

// Status payloads: comma-separated rank lists.
constexpr absl::string_view kTransportRanksUrl =
    "type.shoal.dev/collective.failed_ranks";
constexpr absl::string_view kGroupRanksUrl =
    "type.shoal.dev/collective.failed_group_ranks";

absl::Status WithRanks(absl::StatusCode code, const std::string& message,
                       absl::string_view url, const std::vector<int>& ranks) {
  absl::Status status(code, message);
  status.SetPayload(url, absl::Cord(absl::StrJoin(ranks, ",")));
  return status;
}

bool ParseRanks(const absl::Status& status, absl::string_view url,
                std::vector<int>* ranks) {
  absl::optional<absl::Cord> payload = status.GetPayload(url);
  if (!payload.has_value()) return false;
  for (absl::string_view part :
       absl::StrSplit(std::string(*payload), ',', absl::SkipEmpty())) {
    int rank = 0;
    if (absl::SimpleAtoi(part, &rank)) ranks->push_back(rank);
  }
  return true;
}

}  // namespace

absl::Status RankFailure(absl::StatusCode code, const std::string& message,
                         const std::vector<int>& ranks) {
  return WithRanks(code, message, kTransportRanksUrl, ranks);
}

std::vector<int> FailedRanks(const absl::Status& status) {
  std::vector<int> ranks;
  ParseRanks(status, kTransportRanksUrl, &ranks);
  return ranks;
}

absl::Status GroupRankFailure(absl::StatusCode code, const std::string& message,
                              const std::vector<int>& group_ranks) {
  return WithRanks(code, message, kGroupRanksUrl, group_ranks);
}

std::vector<int> FailedGroupRanks(const absl::Status& status,
                                  const std::vector<int>& group_ranks) {
  std::vector<int> ranks;
  if (ParseRanks(status, kGroupRanksUrl, &ranks)) return ranks;
  for (int rank : FailedRanks(status)) {
    if (group_ranks.empty()) {
      ranks.push_back(rank);
    } else if (rank >= 0 && rank < static_cast<int>(group_ranks.size())) {
      ranks.push_back(group_ranks[rank]);
    }
  }
  return ranks;
}

}  // namespace shoal::collective::internal
