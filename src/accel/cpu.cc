#include "accel/cpu.h"

#include <sched.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "accel/fs_util.h"

namespace shoal::accel {
namespace {

// cgroup v1 reports "no limit" as a page-rounded LONG_MAX.
constexpr int64_t kUnlimitedThreshold = int64_t{1} << 60;

int AffinityCpus() {
  long configured = ::sysconf(_SC_NPROCESSORS_CONF);
  int max_cpus = static_cast<int>(std::max(configured, 1024L));
  cpu_set_t* set = CPU_ALLOC(max_cpus);
  if (set != nullptr) {
    size_t size = CPU_ALLOC_SIZE(max_cpus);
    CPU_ZERO_S(size, set);
    int count = 0;
    if (::sched_getaffinity(0, size, set) == 0) count = CPU_COUNT_S(size, set);
    CPU_FREE(set);
    if (count > 0) return count;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

std::optional<std::string> ReadUnder(const std::string& root,
                                     absl::string_view relative) {
  absl::StatusOr<std::string> contents =
      internal::ReadSmallFile(internal::JoinPath(root, relative));
  if (!contents.ok()) return std::nullopt;
  return *std::move(contents);
}

std::optional<int64_t> ParseInt(absl::string_view text) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &value)) {
    return std::nullopt;
  }
  return value;
}

std::optional<double> CgroupCpus(const std::string& root) {
  if (auto cpu_max = ReadUnder(root, "sys/fs/cgroup/cpu.max")) {
    return ParseCgroupCpuMax(*cpu_max);
  }
  for (absl::string_view dir :
       {"sys/fs/cgroup/cpu/", "sys/fs/cgroup/cpu,cpuacct/"}) {
    auto quota = ReadUnder(root, absl::StrCat(dir, "cpu.cfs_quota_us"));
    auto period = ReadUnder(root, absl::StrCat(dir, "cpu.cfs_period_us"));
    if (!quota || !period) continue;
    std::optional<int64_t> q = ParseInt(*quota);
    std::optional<int64_t> p = ParseInt(*period);
    if (q && p && *q > 0 && *p > 0) return static_cast<double>(*q) / *p;
    return std::nullopt;
  }
  return std::nullopt;
}

std::optional<int64_t> CgroupAvailable(const std::string& root) {
  struct Layout {
    absl::string_view limit, usage, stat, inactive_key;
  };
  constexpr Layout kLayouts[] = {
      {"sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory.current",
       "sys/fs/cgroup/memory.stat", "inactive_file"},
      {"sys/fs/cgroup/memory/memory.limit_in_bytes",
       "sys/fs/cgroup/memory/memory.usage_in_bytes",
       "sys/fs/cgroup/memory/memory.stat", "total_inactive_file"},
  };
  for (const Layout& layout : kLayouts) {
    std::optional<std::string> limit_text = ReadUnder(root, layout.limit);
    if (!limit_text) continue;
    std::optional<int64_t> limit = ParseCgroupMemoryLimit(*limit_text);
    if (!limit) return std::nullopt;
    int64_t used = 0;
    if (auto usage = ReadUnder(root, layout.usage)) {
      used = ParseInt(*usage).value_or(0);
    }
    if (auto stat = ReadUnder(root, layout.stat)) {
      // Page cache that can be dropped is not "used" (as Ray counts it).
      used -= ParseMemoryStat(*stat, layout.inactive_key).value_or(0);
    }
    return std::max<int64_t>(0, *limit - std::max<int64_t>(0, used));
  }
  return std::nullopt;
}

}  // namespace

std::optional<int64_t> ParseMemInfoAvailable(absl::string_view meminfo) {
  for (absl::string_view line : absl::StrSplit(meminfo, '\n')) {
    if (!absl::ConsumePrefix(&line, "MemAvailable:")) continue;
    line = absl::StripAsciiWhitespace(line);
    int64_t multiplier = 1;
    if (absl::ConsumeSuffix(&line, "kB")) multiplier = 1024;
    std::optional<int64_t> value = ParseInt(line);
    if (!value) return std::nullopt;
    return *value * multiplier;
  }
  return std::nullopt;
}

std::optional<double> ParseCgroupCpuMax(absl::string_view cpu_max) {
  std::vector<absl::string_view> parts = absl::StrSplit(
      absl::StripAsciiWhitespace(cpu_max), ' ', absl::SkipWhitespace());
  if (parts.empty() || parts[0] == "max") return std::nullopt;
  std::optional<int64_t> quota = ParseInt(parts[0]);
  std::optional<int64_t> period =
      parts.size() > 1 ? ParseInt(parts[1]) : std::optional<int64_t>(100000);
  if (!quota || !period || *quota <= 0 || *period <= 0) return std::nullopt;
  return static_cast<double>(*quota) / *period;
}

std::optional<int64_t> ParseCgroupMemoryLimit(absl::string_view limit) {
  limit = absl::StripAsciiWhitespace(limit);
  if (limit == "max") return std::nullopt;
  std::optional<int64_t> value = ParseInt(limit);
  if (!value || *value <= 0 || *value >= kUnlimitedThreshold) {
    return std::nullopt;
  }
  return value;
}

std::optional<int64_t> ParseMemoryStat(absl::string_view stat,
                                       absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(stat, '\n')) {
    std::vector<absl::string_view> parts =
        absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (parts.size() == 2 && parts[0] == key) return ParseInt(parts[1]);
  }
  return std::nullopt;
}

SystemProbe ProbeSystem(const std::string& root) {
  SystemProbe probe;
  probe.affinity_cpus = AffinityCpus();
  probe.cgroup_cpus = CgroupCpus(root);
  if (auto meminfo = ReadUnder(root, "proc/meminfo")) {
    probe.meminfo_available_bytes = ParseMemInfoAvailable(*meminfo).value_or(0);
  }
  probe.cgroup_available_bytes = CgroupAvailable(root);
  struct statvfs shm;
  if (::statvfs(internal::JoinPath(root, "dev/shm").c_str(), &shm) == 0) {
    probe.shm_free_bytes =
        static_cast<int64_t>(shm.f_bavail) * static_cast<int64_t>(shm.f_frsize);
  }
  return probe;
}

absl::StatusOr<CpuResources> ResolveCpuResources(
    const SystemProbe& probe, const CpuOverrides& overrides) {
  if (overrides.num_cpus.has_value() &&
      (!std::isfinite(*overrides.num_cpus) || *overrides.num_cpus < 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--num-cpus=", *overrides.num_cpus, " must be a number >= 0"));
  }
  if (overrides.memory_bytes.value_or(0) < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--memory=", *overrides.memory_bytes, " must be a byte count >= 0"));
  }
  if (overrides.object_store_memory_bytes.value_or(0) < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--object-store-memory=", *overrides.object_store_memory_bytes,
        " must be a byte count >= 0"));
  }

  CpuResources result;
  double cpus = std::max(1, probe.affinity_cpus);
  if (probe.cgroup_cpus.has_value()) {
    cpus = std::min(cpus, std::max(1.0, std::ceil(*probe.cgroup_cpus)));
  }
  result.num_cpus = overrides.num_cpus.value_or(cpus);

  int64_t available = probe.meminfo_available_bytes;
  if (probe.cgroup_available_bytes.has_value()) {
    available = available > 0
                    ? std::min(available, *probe.cgroup_available_bytes)
                    : *probe.cgroup_available_bytes;
  }
  result.available_memory_bytes = available;

  int64_t object_store =
      std::min<int64_t>(static_cast<int64_t>(static_cast<double>(available) *
                                             kObjectStoreMemoryFraction),
                        kObjectStoreMaxDefaultBytes);
  if (probe.shm_free_bytes.has_value()) {
    object_store = std::min(object_store, *probe.shm_free_bytes);
  }
  result.object_store_memory_bytes =
      overrides.object_store_memory_bytes.value_or(object_store);
  result.memory_bytes = overrides.memory_bytes.value_or(
      std::max<int64_t>(0, available - result.object_store_memory_bytes));
  return result;
}

}  // namespace shoal::accel
