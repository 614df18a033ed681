#include "accel/detect.h"

#include <unistd.h>

#include <cmath>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "accel/nvidia.h"
#include "accel/tpu.h"

extern char** environ;

namespace shoal::accel {
namespace {

std::string Gib(int64_t bytes) {
  double gib = static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0);
  return absl::StrCat(std::round(gib * 10) / 10, "GiB");
}

}  // namespace

std::map<std::string, std::string> EnvironmentSnapshot() {
  std::map<std::string, std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    absl::string_view text(*entry);
    size_t eq = text.find('=');
    if (eq == absl::string_view::npos) continue;
    absl::string_view key = text.substr(0, eq);
    if (absl::StartsWith(key, "TPU_") || key == kCudaVisibleDevicesEnv) {
      env.emplace(key, text.substr(eq + 1));
    }
  }
  return env;
}

absl::StatusOr<std::vector<std::unique_ptr<AcceleratorManager>>>
DetectAccelerators(const DetectOptions& options) {
  std::vector<std::unique_ptr<AcceleratorManager>> managers;
  absl::StatusOr<std::unique_ptr<TpuAcceleratorManager>> tpu =
      TpuAcceleratorManager::Create(options.device_root, options.env,
                                    options.num_tpus);
  if (!tpu.ok()) return tpu.status();
  if ((*tpu)->NumDevices() > 0) managers.push_back(*std::move(tpu));

  absl::StatusOr<std::unique_ptr<NvidiaGpuManager>> gpu =
      NvidiaGpuManager::Create(options.device_root, options.env,
                               options.num_gpus);
  if (!gpu.ok()) return gpu.status();
  if ((*gpu)->NumDevices() > 0) managers.push_back(*std::move(gpu));
  return managers;
}

absl::StatusOr<CpuResources> DetectCpu(const DetectOptions& options) {
  return ResolveCpuResources(
      ProbeSystem("/"), CpuOverrides{options.num_cpus, options.memory_bytes,
                                     options.object_store_memory_bytes});
}

NodeAccelerators DescribeNode(
    const CpuResources& cpu,
    const std::vector<std::unique_ptr<AcceleratorManager>>& managers) {
  NodeAccelerators node;
  node.resources["CPU"] = cpu.num_cpus;
  node.resources["memory"] = static_cast<double>(cpu.memory_bytes);
  node.resources["object_store_memory"] =
      static_cast<double>(cpu.object_store_memory_bytes);
  std::vector<std::string> parts = {
      absl::StrCat("CPU ", cpu.num_cpus, ", memory ", Gib(cpu.memory_bytes),
                   ", object store ", Gib(cpu.object_store_memory_bytes))};
  for (const auto& manager : managers) {
    if (manager->NumDevices() == 0) continue;
    node.resources[manager->ResourceName()] = manager->NumDevices();
    for (const auto& [name, amount] : manager->ExtraResources()) {
      node.resources[name] += amount;
    }
    for (auto& [key, value] : manager->Labels()) node.labels[key] = value;
    parts.push_back(manager->Summary());
  }
  if (parts.size() == 1) parts.push_back("no accelerators");
  node.summary = absl::StrJoin(parts, "; ");
  return node;
}

absl::StatusOr<NodeAccelerators> DetectNode(const DetectOptions& options) {
  absl::StatusOr<CpuResources> cpu = DetectCpu(options);
  if (!cpu.ok()) return cpu.status();
  absl::StatusOr<std::vector<std::unique_ptr<AcceleratorManager>>> managers =
      DetectAccelerators(options);
  if (!managers.ok()) return managers.status();
  return DescribeNode(*cpu, *managers);
}

const AcceleratorManager* FindManager(
    const std::vector<std::unique_ptr<AcceleratorManager>>& managers,
    const std::string& resource) {
  for (const auto& manager : managers) {
    if (manager->ResourceName() == resource) return manager.get();
  }
  return nullptr;
}

}  // namespace shoal::accel
