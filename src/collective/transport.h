// The seam between a collective Group and the ways ranks exchange bytes.
//
// A Transport is one rank's endpoint in a set of ranks (the whole group, the
// ranks of one host, or one leader per host). Group composes transports:
// shared memory alone, Gloo alone, or shared memory inside hosts plus Gloo
// between host leaders (hierarchical).
//
// Errors are absl::Status values; a failure caused by other ranks carries
// their ranks (in the transport's own numbering) as a payload, so that the
// Group can name them in the CollectiveError it throws.
//
// Threading: a Transport is used by one thread at a time.
#ifndef SHOAL_COLLECTIVE_TRANSPORT_H_
#define SHOAL_COLLECTIVE_TRANSPORT_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "shoal/collective.h"

namespace shoal::collective::internal {

class Transport {
 public:
  virtual ~Transport() = default;
  virtual absl::Status AllReduce(void* data, size_t count, DataType type,
                                 ReduceOp op, uint32_t tag) = 0;
  // output holds count * size elements in rank order.
  virtual absl::Status AllGather(const void* input, void* output, size_t count,
                                 DataType type, uint32_t tag) = 0;
  // input holds count * size elements; output this rank's reduced block.
  virtual absl::Status ReduceScatter(const void* input, void* output,
                                     size_t count, DataType type, ReduceOp op,
                                     uint32_t tag) = 0;
  virtual absl::Status Broadcast(void* data, size_t count, DataType type,
                                 int root, uint32_t tag) = 0;
  virtual absl::Status Barrier(uint32_t tag) = 0;
};

struct TransportOptions {
  // Unique per group incarnation; a transport puts its keys under it.
  std::string key_prefix;
  int size = 1;
  int rank = 0;
  Store* store = nullptr;  // not owned; outlives the transport
  std::chrono::milliseconds timeout{30000};
  // Gloo: the address to listen on / be reached at.
  std::string interface_address;
  // Ranks of the transport in the group's numbering (for error messages);
  // empty means identity.
  std::vector<int> group_ranks;
  // Per transport rank, how an error message names it, e.g.
  // "rank 3 (pid 1234 on host a1)"; may be empty.
  std::vector<std::string> rank_descriptions;
};

absl::StatusOr<std::unique_ptr<Transport>> CreateSharedMemoryTransport(
    const TransportOptions& options);
absl::StatusOr<std::unique_ptr<Transport>> CreateGlooTransport(
    const TransportOptions& options);
// Fails with a clear error when Shoal was built without CUDA or no GPU is
// visible.
absl::StatusOr<std::unique_ptr<Transport>> CreateNcclTransport(
    const TransportOptions& options);
bool NcclCompiledIn();

// InvalidArgument unless `options` has a store and its rank is inside the
// group; `transport` names the transport in the message ("Gloo").
absl::Status CheckRankAndStore(const TransportOptions& options,
                               absl::string_view transport);
// InvalidArgument unless `root` is a rank of a group of `size`.
absl::Status CheckBroadcastRoot(int root, int size);

// A transport rank in the group's numbering.
int GroupRank(const TransportOptions& options, int rank);
std::vector<int> GroupRanks(const TransportOptions& options,
                            const std::vector<int>& ranks);
// How error messages name transport ranks: their rank_descriptions where
// given, else "rank <group rank>"; several are joined with ", ".
std::string DescribeRank(const TransportOptions& options, int rank);
std::string DescribeRanks(const TransportOptions& options,
                          const std::vector<int>& ranks);
// Every transport rank but options.rank, in order.
std::vector<int> OtherRanks(const TransportOptions& options);

// A status for a failure caused by `ranks` (transport numbering), and the
// ranks a status names (empty if none).
absl::Status RankFailure(absl::StatusCode code, const std::string& message,
                         const std::vector<int>& ranks);
std::vector<int> FailedRanks(const absl::Status& status);

// A failure whose ranks are already in the group's numbering: a transport
// may learn of failures outside its own ranks (the shared-memory transport
// of a host hears that a rank on another host died).
absl::Status GroupRankFailure(absl::StatusCode code, const std::string& message,
                              const std::vector<int>& group_ranks);
// The group ranks a status names: those of GroupRankFailure as they are, else
// FailedRanks mapped through `group_ranks` (the transport's ranks in the
// group's numbering; empty means identity).
std::vector<int> FailedGroupRanks(const absl::Status& status,
                                  const std::vector<int>& group_ranks);

}  // namespace shoal::collective::internal

#endif  // SHOAL_COLLECTIVE_TRANSPORT_H_
