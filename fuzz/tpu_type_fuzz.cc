// tpu_type: the TPU_* environment a node agent reads on a TPU VM (accelerator
// type such as "v5p-16", topology such as "2x2x4", worker id and hostnames,
// slice name, visible chips) and --num-tpus, as src/accel/tpu.cc parses them
// and the agent then uses them.
//
// Input: lines, in this order: TPU_ACCELERATOR_TYPE, TPU_TOPOLOGY,
// TPU_WORKER_ID, TPU_WORKER_HOSTNAMES, TPU_NAME, TPU_VISIBLE_CHIPS,
// --num-tpus (a number), chips found on the host (a number). A missing line
// leaves the variable unset (the flag not given); an empty one sets it to "".
#include <algorithm>
#include <array>
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "accel/cpu.h"
#include "accel/detect.h"
#include "accel/device_count.h"
#include "accel/tpu.h"
#include "fuzz/fuzz_targets.h"
#include "scheduling/resource_set.h"

namespace shoal::fuzz {
namespace {

// -1 past 2^31 - 1.
int64_t Product(const std::vector<int>& dims) {
  int64_t product = 1;
  for (int d : dims) {
    product *= d;
    if (product > std::numeric_limits<int>::max()) return -1;
  }
  return product;
}

int64_t Product(const std::array<int, 3>& dims) {
  return Product(std::vector<int>(dims.begin(), dims.end()));
}

// A parsed type is a consistent slice, and parses again from its own
// strings into itself.
void CheckType(const accel::TpuAcceleratorType& type) {
  SHOAL_FUZZ_CHECK(type.chips > 0 && type.hosts > 0);
  SHOAL_FUZZ_CHECK(type.topology.size() == 2 || type.topology.size() == 3);
  SHOAL_FUZZ_CHECK(Product(type.topology) == type.chips);
  SHOAL_FUZZ_CHECK(type.hosts * type.chips_per_host == type.chips);
  SHOAL_FUZZ_CHECK(Product(type.chips_per_host_bounds) == type.chips_per_host);
  SHOAL_FUZZ_CHECK(Product(type.host_bounds) == type.hosts);
  absl::StatusOr<accel::TpuAcceleratorType> again =
      accel::ParseTpuAcceleratorType(type.name, type.TopologyString());
  SHOAL_FUZZ_CHECK(again.ok() && *again == type);
  SHOAL_FUZZ_CHECK(!type.GenerationLabel().empty());
  type.HeadResourceName();
  type.ChipsPerHostBoundsString();
  type.HostBoundsString();
}

// What the agent does with the chips it advertises: check requests and
// give workers some of them.
void UseManager(const accel::TpuAcceleratorManager& tpu) {
  for (double quantity : {0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 8.0, 16.0}) {
    tpu.ValidateRequest(quantity).IgnoreError();
  }
  const int chips = std::min(tpu.NumDevices(), 64);
  std::vector<int> ids;
  for (int id = 0; id < chips; ++id) {
    ids.push_back(id);
    if (ids.size() == 1 || ids.size() == 2 || ids.size() == 4 ||
        id + 1 == chips) {
      tpu.VisibleDevicesEnvironment(ids).IgnoreError();
    }
  }
  tpu.VisibleDevicesEnvironment({chips}).IgnoreError();
  tpu.VisibleDevicesEnvironment({0, 0}).IgnoreError();

  // The node's resources, as the agent validates them before it starts.
  accel::CpuResources cpu;
  cpu.num_cpus = 4;
  cpu.memory_bytes = int64_t{16} << 30;
  cpu.object_store_memory_bytes = int64_t{4} << 30;
  std::vector<std::unique_ptr<accel::AcceleratorManager>> managers;
  managers.push_back(std::make_unique<accel::TpuAcceleratorManager>(
      tpu.NumDevices(), tpu.NumDevices(), tpu.slice(),
      std::vector<std::string>(), "fuzz"));
  accel::NodeAccelerators node = accel::DescribeNode(cpu, managers);
  SHOAL_FUZZ_CHECK(ResourceSet::FromDoubles(node.resources).ok());
}

}  // namespace

int FuzzTpuType(const uint8_t* data, size_t size) {
  std::vector<std::string> lines = absl::StrSplit(
      absl::string_view(reinterpret_cast<const char*>(data), size), '\n');
  auto line = [&lines](size_t i) -> std::optional<std::string> {
    if (i < lines.size()) return lines[i];
    return std::nullopt;
  };
  const char* const kVariables[] = {accel::kTpuAcceleratorTypeEnv,
                                    accel::kTpuTopologyEnv,
                                    accel::kTpuWorkerIdEnv,
                                    accel::kTpuWorkerHostnamesEnv,
                                    accel::kTpuNameEnv,
                                    accel::kTpuVisibleChipsEnv};
  std::map<std::string, std::string> env;
  for (size_t i = 0; i < std::size(kVariables); ++i) {
    if (auto value = line(i)) env[kVariables[i]] = *value;
  }
  std::optional<double> num_tpus;
  if (auto text = line(6)) {
    double value = 0;
    if (absl::SimpleAtod(*text, &value)) num_tpus = value;
  }
  int detected = 0;
  if (auto text = line(7)) {
    if (!absl::SimpleAtoi(*text, &detected)) detected = 0;
    detected = std::clamp(detected, 0, 256);
  }

  absl::StatusOr<accel::TpuAcceleratorType> type =
      accel::ParseTpuAcceleratorType(line(0).value_or(""),
                                     line(1).value_or(""));
  if (type.ok()) CheckType(*type);

  absl::StatusOr<std::optional<accel::TpuSliceFacts>> facts =
      accel::ParseTpuSliceFacts(env);
  if (facts.ok() && facts->has_value()) {
    const accel::TpuSliceFacts& slice = **facts;
    CheckType(slice.type);
    if (slice.worker_id.has_value()) {
      SHOAL_FUZZ_CHECK(*slice.worker_id >= 0 &&
                       *slice.worker_id < slice.type.hosts);
    }
    SHOAL_FUZZ_CHECK(slice.worker_hostnames.empty() ||
                     static_cast<int>(slice.worker_hostnames.size()) ==
                         slice.type.hosts);
  }

  accel::internal::ParseVisibleDeviceList(line(5).value_or(""));
  absl::StatusOr<accel::internal::DeviceCount> count =
      accel::internal::ResolveDeviceCount(
          "--num-tpus", num_tpus, detected,
          accel::internal::VisibleDeviceList(env, accel::kTpuVisibleChipsEnv),
          accel::kTpuVisibleChipsEnv);
  if (count.ok()) {
    SHOAL_FUZZ_CHECK(count->count >= 0);
    SHOAL_FUZZ_CHECK(count->names.empty() ||
                     static_cast<int>(count->names.size()) == count->count);
  }

  // The manager as the agent makes it: no chips under this root, so the
  // chips are those --num-tpus asks for.
  absl::StatusOr<std::unique_ptr<accel::TpuAcceleratorManager>> tpu =
      accel::TpuAcceleratorManager::Create("/nonexistent-shoal-fuzz-root", env,
                                           num_tpus);
  if (tpu.ok()) {
    (*tpu)->AcceleratorType();
    (*tpu)->ExtraResources();
    (*tpu)->Labels();
    (*tpu)->Summary();
    UseManager(**tpu);
  }
  return 0;
}

std::vector<Seed> TpuTypeSeeds() {
  return {
      {"v4_8", "v4-8\n\n0\n\nmy-tpu"},
      {"v5p_16", "v5p-16\n2x2x2\n1\n10.0.0.1,10.0.0.2\nmy-slice\n0,1,2,3"},
      {"v5litepod_16", "v5litepod-16\n4x4\n2\nh0,h1,h2,h3\npod\n\n4\n4"},
      {"v6e_8_visible", "v6e-8\n\n\n\n\n0,1\n2\n8"},
      {"v2_32", "V2-32\n4x4\n3"},
      {"v3_topology_mismatch", "v3-8\n2x4"},
      {"bad_worker", "v4-16\n\n7\na,b"},
      {"reserved_name", "v4-8\n\n\n\nCPU"},
      {"unknown_generation", "v5e-4"},
      {"odd_chips", "v5p-24\n\n\n\n\n\n3"},
      {"not_a_count", "v4-8\n\n\n\n\n\n2.5"},
  };
}

}  // namespace shoal::fuzz
