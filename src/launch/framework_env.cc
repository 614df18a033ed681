#include "launch/framework_env.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <numeric>
#include <optional>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "accel/tpu.h"
#include "shoal/tpu.h"

namespace shoal::launch {
namespace {

constexpr int kMaxPort = 65535;

// Per-process TPU variables (torch_xla's one process per chip).
constexpr char kPjrtDevice[] = "PJRT_DEVICE";
constexpr char kTpuChipsPerProcessBounds[] = "TPU_CHIPS_PER_PROCESS_BOUNDS";
constexpr char kTpuProcessBounds[] = "TPU_PROCESS_BOUNDS";
constexpr char kTpuProcessAddresses[] = "TPU_PROCESS_ADDRESSES";
constexpr char kTpuProcessPort[] = "TPU_PROCESS_PORT";
constexpr char kCloudTpuTaskId[] = "CLOUD_TPU_TASK_ID";
constexpr char kPjrtLocalProcessRank[] = "PJRT_LOCAL_PROCESS_RANK";
constexpr char kPjrtLocalProcessCount[] = "PJRT_LOCAL_PROCESS_COUNT";
constexpr char kTpuSkipMdsQuery[] = "TPU_SKIP_MDS_QUERY";

// What validation learned about the gang.
struct Gang {
  DeviceKind kind = DeviceKind::kCpu;
  std::vector<std::vector<int>> held;  // per host, in local-rank order
  std::optional<accel::TpuAcceleratorType> tpu;
  int num_slices = 1;  // TPU gangs: slice s is hosts [s * n, (s + 1) * n)
  int HostsPerSlice(size_t hosts) const {
    return static_cast<int>(hosts) / num_slices;
  }
};

std::string HostName(const LaunchSpec& spec, size_t i) {
  return absl::StrCat("host ", i, " (", spec.hosts[i].address, ")");
}

// "addr:port", with an IPv6 address in brackets.
std::string HostPort(const std::string& address, int port) {
  if (address.find(':') != std::string::npos && address.front() != '[') {
    return absl::StrCat("[", address, "]:", port);
  }
  return absl::StrCat(address, ":", port);
}

std::string JoinInts(const std::vector<int>& values) {
  return absl::StrJoin(values, ",");
}

std::optional<uint32_t> ParseIpv4(absl::string_view address) {
  std::vector<absl::string_view> parts = absl::StrSplit(address, '.');
  if (parts.size() != 4) return std::nullopt;
  uint32_t value = 0;
  for (absl::string_view part : parts) {
    if (part.empty() || part.size() > 3 ||
        !std::all_of(part.begin(), part.end(), [](char c) {
          return absl::ascii_isdigit(static_cast<unsigned char>(c));
        })) {
      return std::nullopt;
    }
    uint32_t octet = 0;
    if (!absl::SimpleAtoi(part, &octet) || octet > 255) return std::nullopt;
    value = (value << 8) | octet;
  }
  return value;
}

absl::Status CheckPort(const char* what, int port, int count = 1) {
  if (port < 1 || port + count - 1 > kMaxPort) {
    return absl::InvalidArgumentError(
        count == 1 ? absl::StrCat(what, " ", port,
                                  " is not a TCP port; use 1..", kMaxPort)
                   : absl::StrCat(what, " ", port, " leaves no room for ",
                                  count, " consecutive ports; use 1..",
                                  kMaxPort - count + 1));
  }
  return absl::OkStatus();
}

absl::Status ValidateTpu(const LaunchSpec& spec, Gang& gang) {
  const GangHost& first = spec.hosts[0];
  absl::StatusOr<accel::TpuAcceleratorType> type =
      accel::ParseTpuAcceleratorType(first.tpu_accelerator_type,
                                     first.tpu_topology);
  if (!type.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(HostName(spec, 0), ": ", type.status().message()));
  }
  const int chips = first.num_devices;
  for (size_t i = 1; i < spec.hosts.size(); ++i) {
    const GangHost& host = spec.hosts[i];
    absl::StatusOr<accel::TpuAcceleratorType> other =
        accel::ParseTpuAcceleratorType(host.tpu_accelerator_type,
                                       host.tpu_topology);
    if (!other.ok() || *other != *type) {
      return absl::InvalidArgumentError(absl::StrCat(
          HostName(spec, i), " is in a TPU slice of type \"",
          host.tpu_accelerator_type, "\" (topology \"", host.tpu_topology,
          "\") but ", HostName(spec, 0), " in one of type \"",
          first.tpu_accelerator_type, "\" (topology \"", first.tpu_topology,
          "\"); the slices of a gang are of one type: launch on each type "
          "separately"));
    }
    if (host.num_devices != chips) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the hosts of a TPU slice have the same number of chips, but ",
          HostName(spec, i), " has ", host.num_devices, " and ",
          HostName(spec, 0), " has ", chips,
          "; check --num-tpus and TPU_VISIBLE_CHIPS on the node agents"));
    }
  }
  const int hosts = static_cast<int>(spec.hosts.size());
  gang.num_slices = spec.hosts.back().tpu_slice_index + 1;
  const int per_slice = type->hosts;
  if (gang.num_slices < 1 || hosts != per_slice * gang.num_slices ||
      chips != type->chips_per_host) {
    return absl::InvalidArgumentError(absl::StrCat(
        type->name, " is ", type->hosts, " host(s) x ", type->chips_per_host,
        " chips, but the gang has ", hosts, " host(s) x ", chips, " chips",
        gang.num_slices > 1 ? absl::StrCat(" in ", gang.num_slices, " slices")
                            : "",
        "; include every host of each slice with all its chips, or fix "
        "the accelerator type (TPU_ACCELERATOR_TYPE) the hosts report"));
  }
  for (size_t i = 0; i < spec.hosts.size(); ++i) {
    const int slice = static_cast<int>(i) / per_slice;
    const int worker = static_cast<int>(i) % per_slice;
    if (spec.hosts[i].tpu_slice_index != slice) {
      return absl::InvalidArgumentError(
          absl::StrCat("TPU ", HostName(spec, i), " is in slice ",
                       spec.hosts[i].tpu_slice_index, ", but host ", i,
                       " must be in slice ", slice, ": each slice's ",
                       per_slice, " hosts come together, slice 0 first"));
    }
    if (spec.hosts[i].tpu_worker_id != worker) {
      return absl::InvalidArgumentError(
          absl::StrCat("TPU ", HostName(spec, i), " has worker id ",
                       spec.hosts[i].tpu_worker_id, ", but host ", i,
                       " of a slice must be worker ", worker,
                       "; give each worker id 0..", per_slice - 1,
                       " once per slice and order the hosts with "
                       "OrderHostsStably"));
    }
    if (static_cast<int>(gang.held[i].size()) != chips) {
      return absl::InvalidArgumentError(absl::StrCat(
          HostName(spec, i), " holds ", gang.held[i].size(), " of its ", chips,
          " TPU chips; a slice launch needs every chip of every host (the "
          "slice's process bounds count them all): hold the whole host"));
    }
  }
  gang.tpu = *std::move(type);
  if (gang.num_slices > 1) {
    if (absl::Status s =
            CheckPort("MEGASCALE_PORT", spec.rendezvous.megascale_port);
        !s.ok()) {
      return s;
    }
  }
  return CheckPort("TPU base port", spec.rendezvous.tpu_base_port, chips);
}

absl::StatusOr<Gang> Validate(const LaunchSpec& spec) {
  if (spec.hosts.empty()) {
    return absl::InvalidArgumentError(
        "the gang has no hosts; give it at least one host (e.g. --local or "
        "--nodes N)");
  }
  if (spec.restart_count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("restart count ", spec.restart_count,
                     " is negative; count restarts from 0"));
  }
  if (absl::Status s = CheckPort("MASTER_PORT", spec.rendezvous.master_port);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CheckPort("coordinator port", spec.rendezvous.coordinator_port);
      !s.ok()) {
    return s;
  }

  Gang gang;
  gang.kind = spec.hosts[0].kind;
  for (size_t i = 0; i < spec.hosts.size(); ++i) {
    const GangHost& host = spec.hosts[i];
    if (absl::StripAsciiWhitespace(host.address).empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("host ", i,
                       " has no address; give every host the address its "
                       "peers reach it at"));
    }
    if (host.tpu_slice_index != 0 && host.kind != DeviceKind::kTpu) {
      return absl::InvalidArgumentError(
          absl::StrCat(HostName(spec, i), " is in slice ", host.tpu_slice_index,
                       ", but only TPU hosts come in slices"));
    }
    if (host.kind != gang.kind) {
      return absl::InvalidArgumentError(absl::StrCat(
          HostName(spec, i), " has ", DeviceKindName(host.kind),
          " devices but ", HostName(spec, 0), " has ",
          DeviceKindName(gang.kind),
          "; a gang uses one device kind: launch each kind separately"));
    }
    if (host.num_devices < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          HostName(spec, i), " has no ", DeviceKindName(host.kind),
          " devices; drop it from the gang or give it at least one device"));
    }
    std::vector<int> held = host.device_ids;
    if (held.empty()) {
      held.resize(host.num_devices);
      std::iota(held.begin(), held.end(), 0);
    }
    std::set<int> seen;
    for (int id : held) {
      if (id < 0 || id >= host.num_devices) {
        return absl::InvalidArgumentError(absl::StrCat(
            "device id ", id, " of ", HostName(spec, i),
            " is out of range: the host has ", host.num_devices, " ",
            DeviceKindName(host.kind), " device(s), ids 0..",
            host.num_devices - 1, "; use ids the node agent assigned"));
      }
      if (!seen.insert(id).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("device id ", id, " of ", HostName(spec, i),
                         " is held twice; give each process distinct devices"));
      }
    }
    gang.held.push_back(std::move(held));
  }
  if (gang.kind == DeviceKind::kTpu) {
    if (absl::Status s = ValidateTpu(spec, gang); !s.ok()) return s;
  }
  return gang;
}

// Replaces `env.unset` with its sorted, distinct names that are not set.
void FinishUnset(ProcessEnvironment& env, const std::set<std::string>& unset) {
  env.unset.clear();
  for (const std::string& name : unset) {
    if (!env.set.contains(name)) env.unset.push_back(name);
  }
}

// Variables every process gets: torch distributed and Shoal's own.
void SetCommon(const LaunchSpec& spec, const Gang& gang,
               ProcessEnvironment& env) {
  const std::string master_addr = spec.rendezvous.master_addr.empty()
                                      ? spec.hosts[0].address
                                      : spec.rendezvous.master_addr;
  const int num_nodes = static_cast<int>(spec.hosts.size());
  auto& set = env.set;
  set["RANK"] = absl::StrCat(env.rank);
  set["LOCAL_RANK"] = absl::StrCat(env.local_rank);
  set["WORLD_SIZE"] = absl::StrCat(env.world_size);
  set["LOCAL_WORLD_SIZE"] = absl::StrCat(env.local_world_size);
  set["GROUP_RANK"] = absl::StrCat(env.node_rank);
  set["GROUP_WORLD_SIZE"] = absl::StrCat(num_nodes);
  set["MASTER_ADDR"] = master_addr;
  set["MASTER_PORT"] = absl::StrCat(spec.rendezvous.master_port);
  set["TORCHELASTIC_RESTART_COUNT"] = absl::StrCat(spec.restart_count);

  set[kShoalRankEnv] = absl::StrCat(env.rank);
  set[kShoalLocalRankEnv] = absl::StrCat(env.local_rank);
  set[kShoalWorldSizeEnv] = absl::StrCat(env.world_size);
  set[kShoalLocalWorldSizeEnv] = absl::StrCat(env.local_world_size);
  set[kShoalNodeRankEnv] = absl::StrCat(env.node_rank);
  set[kShoalNumNodesEnv] = absl::StrCat(num_nodes);
  set[kShoalLaunchModeEnv] = LaunchModeName(spec.mode);
  set[kShoalDeviceKindEnv] = DeviceKindName(gang.kind);
  set[kShoalDeviceIdsEnv] = JoinInts(env.device_ids);
  set[kShoalRestartCountEnv] = absl::StrCat(spec.restart_count);
}

// The slice variables of a process on host `h` of a TPU gang: MEGASCALE_*
// for a multi-slice gang (removed from a one-slice gang's processes, which
// might inherit them).
void SetSlices(const LaunchSpec& spec, const Gang& gang, size_t h,
               std::set<std::string>& unset, ProcessEnvironment& env) {
  // Ray's get_tpu_coordinator_env_vars (shoal/tpu.h).
  std::map<std::string, std::string> vars =
      tpu::CoordinatorEnvVars(spec.rendezvous.megascale_coordinator_host.empty()
                                  ? spec.hosts[0].address
                                  : spec.rendezvous.megascale_coordinator_host,
                              gang.num_slices, spec.hosts[h].tpu_slice_index,
                              spec.rendezvous.megascale_port);
  for (auto& [name, value] : vars) {
    if (gang.num_slices > 1) {
      env.set[name] = std::move(value);
    } else {
      unset.insert(name);
    }
  }
}

// The hosts of the slice host `h` is in: [first, first + count).
std::pair<size_t, size_t> SliceOf(const LaunchSpec& spec, const Gang& gang,
                                  size_t h) {
  const size_t per_slice = gang.HostsPerSlice(spec.hosts.size());
  return {h / per_slice * per_slice, per_slice};
}

// "host0,host1": the addresses of the hosts of host `h`'s slice.
std::string SliceHostnames(const LaunchSpec& spec, const Gang& gang, size_t h) {
  auto [first, count] = SliceOf(spec, gang, h);
  std::vector<std::string> hostnames;
  for (size_t k = first; k < first + count; ++k) {
    hostnames.push_back(spec.hosts[k].address);
  }
  return absl::StrJoin(hostnames, ",");
}

std::string CpuDeviceCountFlag(size_t count) {
  return absl::StrCat("--xla_force_host_platform_device_count=", count);
}

// One process per device (LAUNCH_CONTRACTS "One process per chip").
std::vector<ProcessEnvironment> PerDevice(const LaunchSpec& spec,
                                          const Gang& gang) {
  int world_size = 0;
  for (const std::vector<int>& held : gang.held) {
    world_size += static_cast<int>(held.size());
  }

  // TPU: each slice's process addresses (a slice's processes see only
  // their own slice's; MEGASCALE_* join the slices).
  std::string tpu_process_bounds;
  std::vector<std::string> tpu_process_addresses(spec.hosts.size());
  if (gang.tpu.has_value()) {
    std::array<int, 3> bounds;
    for (int i = 0; i < 3; ++i) {
      bounds[i] = gang.tpu->host_bounds[i] * gang.tpu->chips_per_host_bounds[i];
    }
    tpu_process_bounds = absl::StrJoin(bounds, ",");
    for (size_t h = 0; h < spec.hosts.size(); ++h) {
      auto [first, count] = SliceOf(spec, gang, h);
      std::vector<std::string> addresses;
      for (size_t k = first; k < first + count; ++k) {
        for (size_t r = 0; r < gang.held[k].size(); ++r) {
          addresses.push_back(
              HostPort(spec.hosts[k].address,
                       spec.rendezvous.tpu_base_port + static_cast<int>(r)));
        }
      }
      tpu_process_addresses[h] = absl::StrJoin(addresses, ",");
    }
  }

  std::vector<ProcessEnvironment> result;
  result.reserve(world_size);
  for (size_t h = 0; h < spec.hosts.size(); ++h) {
    const std::vector<int>& held = gang.held[h];
    const int local_world_size = static_cast<int>(held.size());
    for (int r = 0; r < local_world_size; ++r) {
      ProcessEnvironment env;
      env.rank = static_cast<int>(result.size());
      env.local_rank = r;
      env.node_rank = static_cast<int>(h);
      env.world_size = world_size;
      env.local_world_size = local_world_size;
      env.device_ids = {held[r]};
      SetCommon(spec, gang, env);
      const std::string device = absl::StrCat(held[r]);
      std::set<std::string> unset;
      auto& set = env.set;
      switch (gang.kind) {
        case DeviceKind::kTpu:
          set[kPjrtDevice] = "TPU";
          set[accel::kTpuVisibleChipsEnv] = device;
          set[kTpuChipsPerProcessBounds] = "1,1,1";
          set[kTpuProcessBounds] = tpu_process_bounds;
          set[kTpuProcessAddresses] = tpu_process_addresses[h];
          set[kTpuProcessPort] =
              absl::StrCat(spec.rendezvous.tpu_base_port + r);
          // Hosts are in worker-id order and hold all their chips, so this
          // is the rank within the slice (the global rank in one slice).
          set[kCloudTpuTaskId] =
              absl::StrCat(spec.hosts[h].tpu_worker_id * local_world_size + r);
          set[kPjrtLocalProcessRank] = absl::StrCat(r);
          set[kPjrtLocalProcessCount] = absl::StrCat(local_world_size);
          set[kTpuSkipMdsQuery] = "1";
          set[accel::kTpuAcceleratorTypeEnv] = gang.tpu->name;
          set[accel::kTpuWorkerIdEnv] =
              absl::StrCat(spec.hosts[h].tpu_worker_id);
          set[accel::kTpuWorkerHostnamesEnv] = SliceHostnames(spec, gang, h);
          // The per-process bounds replace the per-host ones, which would
          // contradict the one chip the process holds.
          unset = {accel::kTpuHostBoundsEnv, accel::kTpuChipsPerHostBoundsEnv};
          SetSlices(spec, gang, h, unset, env);
          break;
        case DeviceKind::kGpu:
          set["CUDA_VISIBLE_DEVICES"] = device;
          set["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1";
          if (local_world_size > 1) set["OMP_NUM_THREADS"] = "1";
          break;
        case DeviceKind::kCpu:
          set["JAX_NUM_CPU_DEVICES"] = "1";
          set["XLA_FLAGS"] = CpuDeviceCountFlag(1);
          if (local_world_size > 1) set["OMP_NUM_THREADS"] = "1";
          break;
      }
      FinishUnset(env, unset);
      result.push_back(std::move(env));
    }
  }
  return result;
}

// One process per host (LAUNCH_CONTRACTS "One process per host").
std::vector<ProcessEnvironment> PerHost(const LaunchSpec& spec,
                                        const Gang& gang) {
  const int num_processes = static_cast<int>(spec.hosts.size());
  int global_devices = 0;
  for (const std::vector<int>& held : gang.held) {
    global_devices += static_cast<int>(held.size());
  }
  const std::string coordinator =
      HostPort(spec.rendezvous.coordinator_host.empty()
                   ? spec.hosts[0].address
                   : spec.rendezvous.coordinator_host,
               spec.rendezvous.coordinator_port);

  std::vector<ProcessEnvironment> result;
  result.reserve(num_processes);
  for (int p = 0; p < num_processes; ++p) {
    const std::vector<int>& held = gang.held[p];
    ProcessEnvironment env;
    env.rank = p;
    env.local_rank = 0;
    env.node_rank = p;
    env.world_size = num_processes;
    env.local_world_size = 1;
    env.device_ids = held;
    SetCommon(spec, gang, env);
    const std::string ids = JoinInts(held);
    auto& set = env.set;
    set[kShoalProcessIdEnv] = absl::StrCat(p);
    set[kShoalNumProcessesEnv] = absl::StrCat(num_processes);
    set[kShoalCoordinatorAddressEnv] = coordinator;
    set["JAX_COORDINATOR_ADDRESS"] = coordinator;
    set["JAX_COORDINATOR_PORT"] =
        absl::StrCat(spec.rendezvous.coordinator_port);
    // JAX itself reads only the coordinator's address from the environment;
    // these are the names JAX launchers commonly use for the other two
    // arguments of jax.distributed.initialize().
    set["JAX_NUM_PROCESSES"] = absl::StrCat(num_processes);
    set["JAX_PROCESS_ID"] = absl::StrCat(p);
    set[kShoalLocalDeviceIdsEnv] = ids;
    set[kShoalLocalDeviceCountEnv] = absl::StrCat(held.size());
    set[kShoalGlobalDeviceCountEnv] = absl::StrCat(global_devices);
    std::set<std::string> unset;
    switch (gang.kind) {
      case DeviceKind::kTpu:
        set[kPjrtDevice] = "TPU";
        set[accel::kTpuVisibleChipsEnv] = ids;
        set[kTpuSkipMdsQuery] = "1";
        set[accel::kTpuAcceleratorTypeEnv] = gang.tpu->name;
        // Process order is worker-id order within each slice (validated),
        // so JAX's cluster detection finds the same id and peers: those of
        // its own slice, never a concatenation of every slice's.
        set[accel::kTpuWorkerIdEnv] = absl::StrCat(spec.hosts[p].tpu_worker_id);
        set[accel::kTpuWorkerHostnamesEnv] = SliceHostnames(spec, gang, p);
        // The process holds its whole host: no bounds, and nothing of the
        // per-chip mode an agent's environment might carry.
        unset = {accel::kTpuHostBoundsEnv,  accel::kTpuChipsPerHostBoundsEnv,
                 kTpuChipsPerProcessBounds, kTpuProcessBounds,
                 kTpuProcessAddresses,      kTpuProcessPort,
                 kCloudTpuTaskId,           kPjrtLocalProcessRank,
                 kPjrtLocalProcessCount};
        SetSlices(spec, gang, p, unset, env);
        break;
      case DeviceKind::kGpu:
        set["CUDA_VISIBLE_DEVICES"] = ids;
        set["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1";
        break;
      case DeviceKind::kCpu:
        set["JAX_NUM_CPU_DEVICES"] = absl::StrCat(held.size());
        set["XLA_FLAGS"] = CpuDeviceCountFlag(held.size());
        break;
    }
    FinishUnset(env, unset);
    result.push_back(std::move(env));
  }
  return result;
}

}  // namespace

std::string DeviceKindName(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kCpu:
      return "CPU";
    case DeviceKind::kGpu:
      return "GPU";
    case DeviceKind::kTpu:
      return "TPU";
  }
  return "CPU";
}

std::string LaunchModeName(LaunchMode mode) {
  return mode == LaunchMode::kPerHost ? "per-host" : "per-device";
}

absl::StatusOr<std::vector<ProcessEnvironment>> ComputeLaunchEnvironments(
    const LaunchSpec& spec) {
  absl::StatusOr<Gang> gang = Validate(spec);
  if (!gang.ok()) return gang.status();
  return spec.mode == LaunchMode::kPerHost ? PerHost(spec, *gang)
                                           : PerDevice(spec, *gang);
}

bool HostRanksBefore(const GangHost& a, const GangHost& b) {
  const bool a_tpu = a.kind == DeviceKind::kTpu;
  const bool b_tpu = b.kind == DeviceKind::kTpu;
  if (a_tpu != b_tpu) return a_tpu;
  if (a_tpu && a.tpu_slice_index != b.tpu_slice_index) {
    return a.tpu_slice_index < b.tpu_slice_index;
  }
  if (a_tpu && a.tpu_worker_id != b.tpu_worker_id) {
    return a.tpu_worker_id < b.tpu_worker_id;
  }
  const std::optional<uint32_t> a_ip = ParseIpv4(a.address);
  const std::optional<uint32_t> b_ip = ParseIpv4(b.address);
  if (a_ip.has_value() != b_ip.has_value()) return a_ip.has_value();
  if (a_ip.has_value() && *a_ip != *b_ip) return *a_ip < *b_ip;
  return a.address < b.address;
}

std::vector<size_t> StableHostOrder(const std::vector<GangHost>& hosts) {
  std::vector<size_t> order(hosts.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&hosts](size_t a, size_t b) {
    return HostRanksBefore(hosts[a], hosts[b]);
  });
  return order;
}

std::vector<GangHost> OrderHostsStably(std::vector<GangHost> hosts) {
  std::vector<GangHost> ordered;
  ordered.reserve(hosts.size());
  for (size_t i : StableHostOrder(hosts)) {
    ordered.push_back(std::move(hosts[i]));
  }
  return ordered;
}

}  // namespace shoal::launch
