#include "collective/hierarchical_transport.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collective/shm_transport.h"

namespace shoal::collective::internal {
namespace {

class HierarchicalTransport final : public Transport {
 public:
  HierarchicalTransport(int rank, std::vector<int> host_of_rank,
                        std::vector<std::vector<int>> host_ranks,
                        std::unique_ptr<SharedMemoryTransport> local,
                        std::unique_ptr<Transport> leaders)
      : rank_(rank),
        host_of_rank_(std::move(host_of_rank)),
        host_ranks_(std::move(host_ranks)),
        host_(host_of_rank_[rank]),
        local_(std::move(local)),
        leaders_(std::move(leaders)) {
    for (const auto& ranks : host_ranks_) {
      leader_ranks_.push_back(ranks.front());
      max_local_ = std::max(max_local_, ranks.size());
    }
  }

  absl::Status AllReduce(void* data, size_t count, DataType type, ReduceOp op,
                         uint32_t tag) override {
    if (absl::Status s = local_->Reduce(data, count, type, op, 0, tag);
        !s.ok()) {
      return s;
    }
    if (leaders_ != nullptr) {
      absl::Status s = leaders_->AllReduce(data, count, type, op, tag);
      if (!s.ok()) return AbortLocal(s);
    }
    return local_->Broadcast(data, count, type, 0, tag);
  }

  absl::Status AllGather(const void* input, void* output, size_t count,
                         DataType type, uint32_t tag) override {
    const size_t elem = SizeOf(type);
    const size_t local_size = host_ranks_[host_].size();
    const int world = static_cast<int>(host_of_rank_.size());
    // Every host's block is padded to the largest host so that the leaders
    // exchange equal counts.
    std::vector<char> host_block(max_local_ * count * elem);
    if (absl::Status s =
            local_->AllGather(input, host_block.data(), count, type, tag);
        !s.ok()) {
      return s;
    }
    char* out = static_cast<char*>(output);
    if (count == 0) {
      // Nothing to move, but every rank still takes part, as the others do.
    } else if (leaders_ != nullptr) {
      const size_t block = max_local_ * count;
      std::vector<char> all(host_ranks_.size() * block * elem);
      absl::Status s =
          leaders_->AllGather(host_block.data(), all.data(), block, type, tag);
      if (!s.ok()) return AbortLocal(s);
      for (size_t h = 0; h < host_ranks_.size(); ++h) {
        for (size_t i = 0; i < host_ranks_[h].size(); ++i) {
          std::memcpy(out + host_ranks_[h][i] * count * elem,
                      all.data() + (h * block + i * count) * elem,
                      count * elem);
        }
      }
    } else if (IsLeader()) {  // one host
      for (size_t i = 0; i < local_size; ++i) {
        std::memcpy(out + host_ranks_[host_][i] * count * elem,
                    host_block.data() + i * count * elem, count * elem);
      }
    }
    return local_->Broadcast(output, world * count, type, 0, tag);
  }

  absl::Status ReduceScatter(const void* input, void* output, size_t count,
                             DataType type, ReduceOp op,
                             uint32_t tag) override {
    const size_t elem = SizeOf(type);
    const size_t total = host_of_rank_.size() * count;
    std::vector<char> all(total * elem);
    if (total > 0) std::memcpy(all.data(), input, total * elem);
    if (absl::Status s = AllReduce(all.data(), total, type, op, tag); !s.ok()) {
      return s;
    }
    if (count > 0) {
      std::memcpy(output, all.data() + rank_ * count * elem, count * elem);
    }
    return absl::OkStatus();
  }

  absl::Status Broadcast(void* data, size_t count, DataType type, int root,
                         uint32_t tag) override {
    if (root < 0 || root >= static_cast<int>(host_of_rank_.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("root ", root, " is out of range"));
    }
    const int root_host = host_of_rank_[root];
    const auto& root_ranks = host_ranks_[root_host];
    const int root_local =
        static_cast<int>(std::find(root_ranks.begin(), root_ranks.end(), root) -
                         root_ranks.begin());
    if (host_ == root_host) {
      if (absl::Status s =
              local_->Broadcast(data, count, type, root_local, tag);
          !s.ok()) {
        return s;
      }
    }
    if (leaders_ != nullptr) {
      absl::Status s = leaders_->Broadcast(data, count, type, root_host, tag);
      if (!s.ok()) return AbortLocal(s);
    }
    if (host_ != root_host) {
      return local_->Broadcast(data, count, type, 0, tag);
    }
    return absl::OkStatus();
  }

  absl::Status Barrier(uint32_t tag) override {
    if (absl::Status s = local_->Barrier(tag); !s.ok()) return s;
    if (leaders_ != nullptr) {
      absl::Status s = leaders_->Barrier(tag);
      if (!s.ok()) return AbortLocal(s);
    }
    return local_->Barrier(tag);
  }

 private:
  bool IsLeader() const { return host_ranks_[host_].front() == rank_; }

  // A leader's network failure, in group ranks, shared with its host.
  absl::Status AbortLocal(const absl::Status& status) {
    absl::Status lifted =
        GroupRankFailure(status.code(), std::string(status.message()),
                         FailedGroupRanks(status, leader_ranks_));
    local_->Abort(lifted);
    return lifted;
  }

  const int rank_;
  const std::vector<int> host_of_rank_;
  const std::vector<std::vector<int>> host_ranks_;
  const int host_;
  std::vector<int> leader_ranks_;
  size_t max_local_ = 0;
  std::unique_ptr<SharedMemoryTransport> local_;
  std::unique_ptr<Transport> leaders_;  // on leaders of multi-host groups
};

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> CreateHierarchicalTransport(
    const TransportOptions& options, const std::vector<int>& host_of_rank) {
  const int world = options.size;
  if (static_cast<int>(host_of_rank.size()) != world) {
    return absl::InternalError("host_of_rank does not cover the group");
  }
  int num_hosts = 0;
  for (int h : host_of_rank) num_hosts = std::max(num_hosts, h + 1);
  std::vector<std::vector<int>> host_ranks(num_hosts);
  for (int r = 0; r < world; ++r) host_ranks[host_of_rank[r]].push_back(r);
  const int host = host_of_rank[options.rank];
  const std::vector<int>& mine = host_ranks[host];
  auto describe = [&](const std::vector<int>& ranks) {
    std::vector<std::string> out;
    for (int r : ranks) {
      out.push_back(r < static_cast<int>(options.rank_descriptions.size())
                        ? options.rank_descriptions[r]
                        : absl::StrCat("rank ", r));
    }
    return out;
  };

  TransportOptions local = options;
  local.key_prefix = absl::StrCat(options.key_prefix, "host", host, "/");
  local.size = static_cast<int>(mine.size());
  local.rank = static_cast<int>(
      std::find(mine.begin(), mine.end(), options.rank) - mine.begin());
  local.group_ranks = mine;
  local.rank_descriptions = describe(mine);
  auto local_transport = SharedMemoryTransport::Create(local);
  if (!local_transport.ok()) return local_transport.status();

  std::unique_ptr<Transport> leaders;
  if (num_hosts > 1 && local.rank == 0) {
    TransportOptions across = options;
    across.key_prefix = absl::StrCat(options.key_prefix, "leaders/");
    across.size = num_hosts;
    across.rank = host;
    for (const auto& ranks : host_ranks) {
      across.group_ranks.push_back(ranks.front());
    }
    across.rank_descriptions = describe(across.group_ranks);
    auto created = CreateGlooTransport(across);
    if (!created.ok()) {
      absl::Status lifted = GroupRankFailure(
          created.status().code(),
          absl::StrCat("connecting the host leaders over Gloo: ",
                       created.status().message()),
          FailedGroupRanks(created.status(), across.group_ranks));
      (*local_transport)->Abort(lifted);
      return lifted;
    }
    leaders = std::move(*created);
    // No leader may tear its connections down while another is still
    // completing its own (a group used for nothing and destroyed at once).
    if (absl::Status s = leaders->Barrier(0); !s.ok()) {
      absl::Status lifted =
          GroupRankFailure(s.code(), std::string(s.message()),
                           FailedGroupRanks(s, across.group_ranks));
      (*local_transport)->Abort(lifted);
      return lifted;
    }
  }
  // The host's ranks learn here whether their leader connected.
  if (absl::Status s = (*local_transport)->Barrier(0); !s.ok()) return s;
  return std::unique_ptr<Transport>(new HierarchicalTransport(
      options.rank, host_of_rank, std::move(host_ranks),
      std::move(*local_transport), std::move(leaders)));
}

}  // namespace shoal::collective::internal
