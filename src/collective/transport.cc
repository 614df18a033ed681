#include "collective/transport.h"

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
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

absl::Status CheckRankAndStore(const TransportOptions& options,
                               absl::string_view transport) {
  if (options.store == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", transport, " transport needs a store"));
  }
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", options.rank, " is outside a group of ", options.size));
  }
  return absl::OkStatus();
}

absl::Status CheckBroadcastRoot(int root, int size) {
  if (root >= 0 && root < size) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("broadcast root ", root, " is outside a group of ", size));
}

int GroupRank(const TransportOptions& options, int rank) {
  return options.group_ranks.empty() ? rank : options.group_ranks[rank];
}

std::vector<int> GroupRanks(const TransportOptions& options,
                            const std::vector<int>& ranks) {
  std::vector<int> out;
  for (int rank : ranks) out.push_back(GroupRank(options, rank));
  return out;
}

std::string DescribeRank(const TransportOptions& options, int rank) {
  if (rank < static_cast<int>(options.rank_descriptions.size()) &&
      !options.rank_descriptions[rank].empty()) {
    return options.rank_descriptions[rank];
  }
  return absl::StrCat("rank ", GroupRank(options, rank));
}

std::string DescribeRanks(const TransportOptions& options,
                          const std::vector<int>& ranks) {
  std::vector<std::string> names;
  for (int rank : ranks) names.push_back(DescribeRank(options, rank));
  return absl::StrJoin(names, ", ");
}

std::vector<int> OtherRanks(const TransportOptions& options) {
  std::vector<int> others;
  for (int rank = 0; rank < options.size; ++rank) {
    if (rank != options.rank) others.push_back(rank);
  }
  return others;
}

}  // namespace shoal::collective::internal
