#include "accel/cpu.h"

#include <optional>
#include <string>

#include "accel/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::accel {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(ParseMemInfoTest, ReadsMemAvailable) {
  EXPECT_EQ(ParseMemInfoAvailable("MemTotal:       32768 kB\n"
                                  "MemFree:         1024 kB\n"
                                  "MemAvailable:   16384 kB\n"),
            int64_t{16384} * 1024);
  EXPECT_EQ(ParseMemInfoAvailable("MemTotal: 1 kB\n"), std::nullopt);
  EXPECT_EQ(ParseMemInfoAvailable("MemAvailable: lots\n"), std::nullopt);
}

struct CpuMaxCase {
  std::string text;
  std::optional<double> want;
};

class CgroupCpuMaxTest : public ::testing::TestWithParam<CpuMaxCase> {};

TEST_P(CgroupCpuMaxTest, Parses) {
  EXPECT_EQ(ParseCgroupCpuMax(GetParam().text), GetParam().want);
}

INSTANTIATE_TEST_SUITE_P(CpuMax, CgroupCpuMaxTest,
                         ::testing::Values(CpuMaxCase{"max 100000\n", {}},
                                           CpuMaxCase{"200000 100000\n", 2.0},
                                           CpuMaxCase{"50000 100000", 0.5},
                                           CpuMaxCase{"150000", 1.5},
                                           CpuMaxCase{"", {}},
                                           CpuMaxCase{"x 100000", {}}));

struct LimitCase {
  std::string text;
  std::optional<int64_t> want;
};

class CgroupMemoryLimitTest : public ::testing::TestWithParam<LimitCase> {};

TEST_P(CgroupMemoryLimitTest, Parses) {
  EXPECT_EQ(ParseCgroupMemoryLimit(GetParam().text), GetParam().want);
}

INSTANTIATE_TEST_SUITE_P(
    Limits, CgroupMemoryLimitTest,
    ::testing::Values(LimitCase{"max\n", {}},
                      LimitCase{"8589934592\n", int64_t{8} * kGiB},
                      LimitCase{"9223372036854771712\n", {}},  // v1 unlimited
                      LimitCase{"0", {}}, LimitCase{"junk", {}}));

TEST(ParseMemoryStatTest, FindsTheKey) {
  const char* stat = "anon 100\nfile 300\ninactive_file 200\nactive_file 5\n";
  EXPECT_EQ(ParseMemoryStat(stat, "inactive_file"), 200);
  EXPECT_EQ(ParseMemoryStat(stat, "total_inactive_file"), std::nullopt);
}

struct ResolveCase {
  std::string name;
  SystemProbe probe;
  CpuOverrides overrides;
  double want_cpus;
  int64_t want_available;
  int64_t want_object_store;
  int64_t want_memory;
};

class ResolveTest : public ::testing::TestWithParam<ResolveCase> {};

TEST_P(ResolveTest, ComputesAsRayDoes) {
  const ResolveCase& c = GetParam();
  absl::StatusOr<CpuResources> cpu = ResolveCpuResources(c.probe, c.overrides);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(cpu->num_cpus, c.want_cpus);
  EXPECT_EQ(cpu->available_memory_bytes, c.want_available);
  EXPECT_EQ(cpu->object_store_memory_bytes, c.want_object_store);
  EXPECT_EQ(cpu->memory_bytes, c.want_memory);
}

SystemProbe Probe(int cpus, int64_t available,
                  std::optional<int64_t> shm = std::nullopt,
                  std::optional<double> cgroup_cpus = std::nullopt,
                  std::optional<int64_t> cgroup_available = std::nullopt) {
  SystemProbe probe;
  probe.affinity_cpus = cpus;
  probe.meminfo_available_bytes = available;
  probe.shm_free_bytes = shm;
  probe.cgroup_cpus = cgroup_cpus;
  probe.cgroup_available_bytes = cgroup_available;
  return probe;
}

INSTANTIATE_TEST_SUITE_P(
    Resolve, ResolveTest,
    ::testing::Values(
        ResolveCase{"Defaults",
                    Probe(16, 10 * kGiB),
                    {},
                    16,
                    10 * kGiB,
                    3 * kGiB,
                    7 * kGiB},
        ResolveCase{"ShmCapsTheObjectStore",
                    Probe(16, 10 * kGiB, 1 * kGiB),
                    {},
                    16,
                    10 * kGiB,
                    1 * kGiB,
                    9 * kGiB},
        ResolveCase{"TwoHundredGbCap",
                    Probe(8, 1000 * kGiB),
                    {},
                    8,
                    1000 * kGiB,
                    200'000'000'000,
                    1000 * kGiB - 200'000'000'000},
        ResolveCase{"CgroupQuotaRoundsUp",
                    Probe(16, 10 * kGiB, std::nullopt, 2.5),
                    {},
                    3,
                    10 * kGiB,
                    3 * kGiB,
                    7 * kGiB},
        ResolveCase{"TinyQuotaIsOneCpu",
                    Probe(16, 10 * kGiB, std::nullopt, 0.1),
                    {},
                    1,
                    10 * kGiB,
                    3 * kGiB,
                    7 * kGiB},
        ResolveCase{"CgroupMemoryLowers",
                    Probe(4, 10 * kGiB, std::nullopt, std::nullopt, 2 * kGiB),
                    {},
                    4,
                    2 * kGiB,
                    static_cast<int64_t>(2 * kGiB * 0.3),
                    2 * kGiB - static_cast<int64_t>(2 * kGiB * 0.3)},
        ResolveCase{"Overrides",
                    Probe(16, 10 * kGiB),
                    {2.5, 4 * kGiB, 1 * kGiB},
                    2.5,
                    10 * kGiB,
                    1 * kGiB,
                    4 * kGiB},
        ResolveCase{"ObjectStoreOverrideOnly",
                    Probe(16, 10 * kGiB),
                    {std::nullopt, std::nullopt, 6 * kGiB},
                    16,
                    10 * kGiB,
                    6 * kGiB,
                    4 * kGiB},
        ResolveCase{"ObjectStoreAboveAvailableLeavesNoMemory",
                    Probe(16, 1 * kGiB),
                    {std::nullopt, std::nullopt, 2 * kGiB},
                    16,
                    1 * kGiB,
                    2 * kGiB,
                    0}),
    [](const ::testing::TestParamInfo<ResolveCase>& info) {
      return info.param.name;
    });

TEST(ResolveCpuResourcesTest, RejectsNegativeOverrides) {
  SystemProbe probe = Probe(4, kGiB);
  EXPECT_THAT(ResolveCpuResources(probe, {-1.0, {}, {}}).status().ToString(),
              HasSubstr("--num-cpus"));
  EXPECT_THAT(ResolveCpuResources(probe, {{}, -1, {}}).status().ToString(),
              HasSubstr("--memory"));
  EXPECT_THAT(ResolveCpuResources(probe, {{}, {}, -1}).status().ToString(),
              HasSubstr("--object-store-memory"));
}

TEST(ProbeSystemTest, ReadsCgroupV2UnderARoot) {
  testing::ScopedTempDir root;
  root.Write("proc/meminfo",
             "MemTotal: 67108864 kB\nMemAvailable: 33554432 kB\n");
  root.Write("sys/fs/cgroup/cpu.max", "400000 100000\n");
  root.Write("sys/fs/cgroup/memory.max", "8589934592\n");
  root.Write("sys/fs/cgroup/memory.current", "3221225472\n");
  root.Write("sys/fs/cgroup/memory.stat", "anon 1\ninactive_file 1073741824\n");
  SystemProbe probe = ProbeSystem(root.path());
  EXPECT_GE(probe.affinity_cpus, 1);
  EXPECT_EQ(probe.cgroup_cpus, 4.0);
  EXPECT_EQ(probe.meminfo_available_bytes, 32 * kGiB);
  // 8 GiB limit - (3 GiB used - 1 GiB reclaimable cache).
  EXPECT_EQ(probe.cgroup_available_bytes, 6 * kGiB);
  EXPECT_FALSE(probe.shm_free_bytes.has_value());  // no <root>/dev/shm
}

TEST(ProbeSystemTest, ReadsCgroupV1UnderARoot) {
  testing::ScopedTempDir root;
  root.Write("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "150000\n");
  root.Write("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  root.Write("sys/fs/cgroup/memory/memory.limit_in_bytes", "4294967296\n");
  root.Write("sys/fs/cgroup/memory/memory.usage_in_bytes", "1073741824\n");
  SystemProbe probe = ProbeSystem(root.path());
  EXPECT_EQ(probe.cgroup_cpus, 1.5);
  EXPECT_EQ(probe.cgroup_available_bytes, 3 * kGiB);
}

TEST(ProbeSystemTest, UnlimitedCgroupsAreIgnored) {
  testing::ScopedTempDir root;
  root.Write("sys/fs/cgroup/cpu.max", "max 100000\n");
  root.Write("sys/fs/cgroup/memory.max", "max\n");
  SystemProbe probe = ProbeSystem(root.path());
  EXPECT_FALSE(probe.cgroup_cpus.has_value());
  EXPECT_FALSE(probe.cgroup_available_bytes.has_value());
}

TEST(ProbeSystemTest, RealMachineHasCpusAndMemory) {
  SystemProbe probe = ProbeSystem("/");
  EXPECT_GE(probe.affinity_cpus, 1);
  EXPECT_GT(probe.meminfo_available_bytes, 0);
  absl::StatusOr<CpuResources> cpu = ResolveCpuResources(probe, {});
  ASSERT_TRUE(cpu.ok());
  EXPECT_GE(cpu->num_cpus, 1);
  EXPECT_GT(cpu->memory_bytes, 0);
  EXPECT_GT(cpu->object_store_memory_bytes, 0);
}

}  // namespace
}  // namespace shoal::accel
