// The environment of every process of a launch: what PyTorch, PyTorch/XLA,
// JAX and Shoal's own helpers read to find their rank, peers and devices.
//
// Two modes (issue 4):
//   - per-device (device-centric, what torch_xla.launch and torchrun do): one
//     process per device on every host of the gang;
//   - per-host (host-centric, multi-controller JAX): one process per host
//     holding all the host's devices.
// Values follow docs/launch_contracts.md exactly; tests assert them.
//
// Pure: no I/O, no process environment is read. The caller (the launcher)
// applies each process's `unset` and then its `set` on top of the node
// agent's environment; where a user's own value should win (XLA_FLAGS,
// OMP_NUM_THREADS), merging is the launcher's choice.
#ifndef SHOAL_LAUNCH_FRAMEWORK_ENV_H_
#define SHOAL_LAUNCH_FRAMEWORK_ENV_H_

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace shoal::launch {

enum class DeviceKind { kCpu, kGpu, kTpu };
enum class LaunchMode { kPerDevice, kPerHost };

// "CPU", "GPU", "TPU": the value of SHOAL_DEVICE_KIND.
std::string DeviceKindName(DeviceKind kind);
// "per-device", "per-host": the value of SHOAL_LAUNCH_MODE.
std::string LaunchModeName(LaunchMode mode);

inline constexpr int kDefaultMasterPort = 29500;  // PyTorch's default
inline constexpr int kTpuBasePort = 8476;         // TPU_PROCESS_PORT of r=0
inline constexpr int kTpuCoordinatorPort = 8482;  // JAX's TPU convention

// Shoal's own variables, for the programs (and Shoal helpers such as
// CurrentDevice() or spmd::Initialize()) that read them.
inline constexpr char kShoalRankEnv[] = "SHOAL_RANK";
inline constexpr char kShoalLocalRankEnv[] = "SHOAL_LOCAL_RANK";
inline constexpr char kShoalWorldSizeEnv[] = "SHOAL_WORLD_SIZE";
inline constexpr char kShoalLocalWorldSizeEnv[] = "SHOAL_LOCAL_WORLD_SIZE";
inline constexpr char kShoalNodeRankEnv[] = "SHOAL_NODE_RANK";
inline constexpr char kShoalNumNodesEnv[] = "SHOAL_NUM_NODES";
inline constexpr char kShoalLaunchModeEnv[] = "SHOAL_LAUNCH_MODE";
inline constexpr char kShoalDeviceKindEnv[] = "SHOAL_DEVICE_KIND";
inline constexpr char kShoalDeviceIdsEnv[] = "SHOAL_DEVICE_IDS";
inline constexpr char kShoalRestartCountEnv[] = "SHOAL_RESTART_COUNT";
// Per-host mode only.
inline constexpr char kShoalProcessIdEnv[] = "SHOAL_PROCESS_ID";
inline constexpr char kShoalNumProcessesEnv[] = "SHOAL_NUM_PROCESSES";
inline constexpr char kShoalCoordinatorAddressEnv[] =
    "SHOAL_COORDINATOR_ADDRESS";
inline constexpr char kShoalLocalDeviceIdsEnv[] = "SHOAL_LOCAL_DEVICE_IDS";
inline constexpr char kShoalLocalDeviceCountEnv[] = "SHOAL_LOCAL_DEVICE_COUNT";
inline constexpr char kShoalGlobalDeviceCountEnv[] =
    "SHOAL_GLOBAL_DEVICE_COUNT";

// One host of the gang.
struct GangHost {
  // How peers reach the host: an IPv4 or IPv6 address or a host name.
  // Several hosts may share one (node agents on loopback).
  std::string address;
  DeviceKind kind = DeviceKind::kCpu;
  // Devices on the host; node-local ids are 0 .. num_devices-1. For kCpu the
  // number of stand-in devices.
  int num_devices = 0;
  // The node-local ids the gang holds on this host, in local-rank order
  // (per-device mode: local rank r holds device_ids[r]). Empty: all of them.
  std::vector<int> device_ids;
  // TPU only: the slice's type ("v5p-16"), its topology ("2x2x2"; empty for
  // the default) and this host's worker id (TPU_WORKER_ID).
  std::string tpu_accelerator_type;
  std::string tpu_topology;
  int tpu_worker_id = 0;
  // TPU only: which slice of a multi-slice gang the host is in (0..N-1).
  // The hosts of a slice are consecutive in rank order.
  int tpu_slice_index = 0;
};

// Where the processes of a gang meet.
struct Rendezvous {
  std::string master_addr;  // MASTER_ADDR; empty: the host of rank 0
  int master_port = kDefaultMasterPort;
  // The JAX coordinator (per-host mode); empty host: the host of process 0.
  std::string coordinator_host;
  int coordinator_port = kTpuCoordinatorPort;
  int tpu_base_port = kTpuBasePort;  // per-device TPU_PROCESS_PORT base
  // Multi-slice TPU gangs: where the slices meet (MEGASCALE_*); empty host:
  // worker 0 of slice 0.
  std::string megascale_coordinator_host;
  int megascale_port = 8081;  // Ray's MEGASCALE_PORT (tpu::kMegascalePort)
};

struct LaunchSpec {
  // In rank order: TPU hosts in worker-id order (see OrderHostsStably).
  std::vector<GangHost> hosts;
  LaunchMode mode = LaunchMode::kPerDevice;
  Rendezvous rendezvous;
  int restart_count = 0;  // 0 on the first attempt
};

// One process of the launch and the changes to make to its environment.
struct ProcessEnvironment {
  int rank = 0;        // global; per-host mode: the process id
  int local_rank = 0;  // on its host; 0 in per-host mode
  int node_rank = 0;   // index of its host in LaunchSpec::hosts
  int world_size = 0;
  int local_world_size = 0;
  std::vector<int> device_ids;  // node-local ids the process holds
  std::map<std::string, std::string> set;
  std::vector<std::string> unset;  // sorted; never also in `set`

  bool operator==(const ProcessEnvironment& other) const = default;
};

// The processes of `spec` in global rank order, with their environments.
// A TPU gang of several slices (hosts with tpu_slice_index 0..N-1) gives
// each process its own slice's TPU variables (TPU_WORKER_ID,
// TPU_WORKER_HOSTNAMES, process bounds and addresses), the MEGASCALE_*
// variables that join the slices, and ranks and JAX process ids numbered
// across all slices.
// InvalidArgument, saying what to change, when the gang is empty, mixes
// device kinds, a host holds no devices or ids out of range or twice, TPU
// hosts differ in chip count or type, are not in worker-id order or do not
// make up the slices their type names, or a port is out of range.
absl::StatusOr<std::vector<ProcessEnvironment>> ComputeLaunchEnvironments(
    const LaunchSpec& spec);

// The documented, restart-stable rank order of hosts: TPU hosts first, by
// slice index, then worker id; then the others by address (IPv4 addresses
// numerically, before any other address, which compare as strings). Ties keep
// input order.
bool HostRanksBefore(const GangHost& a, const GangHost& b);
// Indices into `hosts` in that order.
std::vector<size_t> StableHostOrder(const std::vector<GangHost>& hosts);
std::vector<GangHost> OrderHostsStably(std::vector<GangHost> hosts);

}  // namespace shoal::launch

#endif  // SHOAL_LAUNCH_FRAMEWORK_ENV_H_
