// CPU and memory: the "CPU", "memory" and "object_store_memory" resources
// every node advertises, computed as Ray does.
//
// Probing (ProbeSystem) is separate from the arithmetic (ResolveCpuResources)
// so that the arithmetic is tested with made-up machines.
#ifndef SHOAL_ACCEL_CPU_H_
#define SHOAL_ACCEL_CPU_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shoal::accel {

// Share of available memory given to the object store by default, and its
// ceiling (Ray's DEFAULT_OBJECT_STORE_MEMORY_PROPORTION and
// DEFAULT_OBJECT_STORE_MAX_MEMORY_BYTES).
inline constexpr double kObjectStoreMemoryFraction = 0.3;
inline constexpr int64_t kObjectStoreMaxDefaultBytes = 200'000'000'000;

// What the machine offers this process.
struct SystemProbe {
  int affinity_cpus = 1;                          // sched_getaffinity
  std::optional<double> cgroup_cpus;              // cpu.max quota / period
  int64_t meminfo_available_bytes = 0;            // /proc/meminfo MemAvailable
  std::optional<int64_t> cgroup_available_bytes;  // limit - (usage - cache)
  std::optional<int64_t> shm_free_bytes;          // statvfs(/dev/shm)
};

// Reads `<root>/proc/meminfo`, `<root>/sys/fs/cgroup/...` (v2, then v1) and
// statvfs(`<root>/dev/shm`); the CPU affinity is always this process's.
SystemProbe ProbeSystem(const std::string& root = "/");

struct CpuResources {
  double num_cpus = 0;
  int64_t memory_bytes = 0;               // "memory"
  int64_t object_store_memory_bytes = 0;  // "object_store_memory"
  int64_t available_memory_bytes = 0;     // what both were taken from
};

struct CpuOverrides {
  std::optional<double> num_cpus;
  std::optional<int64_t> memory_bytes;
  std::optional<int64_t> object_store_memory_bytes;
};

// CPUs: the affinity count, lowered to the cgroup quota (rounded up);
// available memory: MemAvailable, lowered to what the cgroup allows; object
// store: 30% of available memory, at most 200 GB and at most the free space
// of /dev/shm; memory: available minus the object store (at least 0).
// Overrides replace the computed values; negative or non-finite overrides
// are InvalidArgument.
absl::StatusOr<CpuResources> ResolveCpuResources(const SystemProbe& probe,
                                                 const CpuOverrides& overrides);

// Parsers for the files ProbeSystem reads (exposed for tests).
// "MemAvailable:  16384 kB" -> bytes.
std::optional<int64_t> ParseMemInfoAvailable(absl::string_view meminfo);
// cgroup v2 cpu.max: "200000 100000" -> 2.0; "max 100000" -> nullopt.
std::optional<double> ParseCgroupCpuMax(absl::string_view cpu_max);
// A cgroup memory limit ("max", or a byte count; v1's unlimited value is a
// huge number) -> bytes, or nullopt when unlimited.
std::optional<int64_t> ParseCgroupMemoryLimit(absl::string_view limit);
// The value of `key` in a memory.stat file ("inactive_file 1234").
std::optional<int64_t> ParseMemoryStat(absl::string_view stat,
                                       absl::string_view key);

}  // namespace shoal::accel

#endif  // SHOAL_ACCEL_CPU_H_
