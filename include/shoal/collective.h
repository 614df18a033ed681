// Collective communication among the ranks of a gang: the processes of a
// `shoal launch`, tasks, or threads standing for the devices of a host.
//
//   auto group = shoal::collective::Group::Create("grads", world, rank);
//   shoal::collective::AllReduce(*group, {.data = grads.data(),
//                                         .count = grads.size()});
//
// Ranks meet through the head's key-value store (no extra server): every rank
// of a group calls Group::Create with the same name and world size. Ranks on
// one host talk through shared memory; ranks on different hosts through Gloo
// over TCP; with kHierarchical (the default when a group spans hosts with
// several ranks each) a host reduces inside itself first and crosses the
// network once per host. NCCL is used for GPU buffers when Shoal was built
// with CUDA.
//
// A rank that dies or stops answering makes every other rank's pending
// operation fail within GroupOptions::timeout with a CollectiveError that
// names it; operations never hang.
//
// Threading: a Group is used by one thread at a time. Different groups, and
// the groups of different ranks in one process, may be used concurrently.
#ifndef SHOAL_COLLECTIVE_H_
#define SHOAL_COLLECTIVE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shoal/errors.h"

namespace shoal::collective {

enum class DataType { kFloat32, kBFloat16, kFloat64, kInt32, kInt64 };
enum class ReduceOp { kSum, kMax, kMin, kProduct };

// Bytes per element of a type (bfloat16 is stored as uint16).
size_t SizeOf(DataType type);

enum class Backend {
  kAuto,          // shared memory on one host; hierarchical across hosts
  kSharedMemory,  // every rank on this host
  kGloo,          // TCP between every pair of ranks
  kHierarchical,  // shared memory inside a host, Gloo between hosts
  kNccl,          // GPU buffers (only when built with CUDA)
};
const char* BackendName(Backend backend);

// Where ranks meet: a small key-value store. The default is the head's KV
// store of the cluster this process belongs to (SHOAL_ADDRESS or the local
// session); tests may pass an in-memory one for ranks that are threads.
class Store {
 public:
  virtual ~Store() = default;
  virtual void Set(const std::string& key, const std::string& value) = 0;
  // Waits until the key exists; throws CollectiveError after timeout.
  virtual std::string Get(const std::string& key,
                          std::chrono::milliseconds timeout) = 0;
};
// The head's KV store (throws shoal::Error when no cluster can be reached).
std::shared_ptr<Store> ClusterStore();
// A store shared by the threads of this process only.
std::shared_ptr<Store> InProcessStore();

struct GroupOptions {
  Backend backend = Backend::kAuto;
  // How long an operation (and the rendezvous) waits for the other ranks
  // before it fails naming the ranks it is waiting for.
  std::chrono::milliseconds timeout{30000};
  // Which host a rank is on; ranks with the same host id share memory.
  // Default: this machine's boot id and network namespace, so that ranks in
  // different network namespaces count as different hosts.
  std::string host_id;
  // Told apart from earlier groups of the same name: default is the launch's
  // rendezvous (MASTER_ADDR, MASTER_PORT, SHOAL_RESTART_COUNT) when set, so a
  // restarted gang never meets its previous incarnation.
  std::string generation;
  std::shared_ptr<Store> store;  // default: ClusterStore()
  // Address other hosts reach this rank at (Gloo); default: the address of
  // the interface that routes to the head, else the primary address.
  std::string interface_address;
};

class CollectiveError : public Error {
 public:
  CollectiveError(const std::string& message, std::vector<int> ranks)
      : Error(message), ranks_(std::move(ranks)) {}
  // The ranks that died or did not answer (may be empty for local errors).
  const std::vector<int>& ranks() const { return ranks_; }

 private:
  std::vector<int> ranks_;
};

class Group {
 public:
  // Joins group `name` as `rank` of `world_size`; blocks until every rank has
  // joined (or options.timeout passes).
  static std::unique_ptr<Group> Create(const std::string& name, int world_size,
                                       int rank, GroupOptions options = {});
  virtual ~Group() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual Backend backend() const = 0;
  // Ranks sharing this rank's host, and the number of hosts.
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  virtual int num_hosts() const = 0;

  struct Impl;  // what the free functions below call
  virtual Impl& impl() = 0;
};

// Operations. `tag` tells concurrent operations of one group apart (every
// rank must use the same tag for the same operation). Buffers are host
// memory unless the group is kNccl.
struct AllReduceOptions {
  void* data = nullptr;  // in place
  size_t count = 0;      // elements
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  uint32_t tag = 0;
};
void AllReduce(Group& group, const AllReduceOptions& options);

struct AllGatherOptions {
  const void* input = nullptr;  // count elements
  void* output = nullptr;       // count * world_size, in rank order
  size_t count = 0;
  DataType type = DataType::kFloat32;
  uint32_t tag = 0;
};
void AllGather(Group& group, const AllGatherOptions& options);

struct ReduceScatterOptions {
  const void* input = nullptr;  // count * world_size elements
  void* output = nullptr;       // count elements: this rank's reduced block
  size_t count = 0;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  uint32_t tag = 0;
};
void ReduceScatter(Group& group, const ReduceScatterOptions& options);

struct BroadcastOptions {
  void* data = nullptr;
  size_t count = 0;
  DataType type = DataType::kFloat32;
  int root = 0;
  uint32_t tag = 0;
};
void Broadcast(Group& group, const BroadcastOptions& options);

void Barrier(Group& group, uint32_t tag = 0);

// Typed shorthands.
template <typename T>
constexpr DataType DataTypeOf();
template <>
constexpr DataType DataTypeOf<float>() {
  return DataType::kFloat32;
}
template <>
constexpr DataType DataTypeOf<double>() {
  return DataType::kFloat64;
}
template <>
constexpr DataType DataTypeOf<int32_t>() {
  return DataType::kInt32;
}
template <>
constexpr DataType DataTypeOf<int64_t>() {
  return DataType::kInt64;
}

template <typename T>
void AllReduce(Group& group, std::vector<T>& values,
               ReduceOp op = ReduceOp::kSum) {
  AllReduce(group, {.data = values.data(),
                    .count = values.size(),
                    .type = DataTypeOf<T>(),
                    .op = op});
}

}  // namespace shoal::collective

namespace shoal::spmd {

// In a host-centric process (`shoal launch --per-host`): one collective rank
// per device of every host, global rank = process_id * local devices + local
// index. Returns this process's ranks in local order; on simulated chips each
// device is meant to be driven by its own thread with its own buffers.
// Blocks until every rank of every host has joined.
std::vector<std::unique_ptr<collective::Group>> DeviceGroups(
    const std::string& name, collective::GroupOptions options = {});

}  // namespace shoal::spmd

#endif  // SHOAL_COLLECTIVE_H_
