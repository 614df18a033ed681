#include "accel/nvidia.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "accel/device_count.h"
#include "accel/fs_util.h"

namespace shoal::accel {
namespace {

// The few NVML entry points used, with their C signatures (nvml.h is not
// needed at build time). Every one returns nvmlReturn_t, 0 on success.
using NvmlInitFn = int (*)();
using NvmlShutdownFn = int (*)();
using NvmlDeviceGetCountFn = int (*)(unsigned int*);
using NvmlDeviceGetHandleByIndexFn = int (*)(unsigned int, void**);
using NvmlDeviceGetNameFn = int (*)(void*, char*, unsigned int);
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
using NvmlDeviceGetMemoryInfoFn = int (*)(void*, NvmlMemory*);

constexpr int kNvmlSuccess = 0;
constexpr unsigned int kNvmlNameBufferSize = 96;
constexpr char kProcfsSource[] = "/proc/driver/nvidia";

bool HasDigit(absl::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c));
  });
}

std::string AlphaNumericPrefix(absl::string_view token) {
  std::string out;
  for (char c : token) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c))) break;
    out.push_back(c);
  }
  return out;
}

}  // namespace

std::optional<GpuScan> ScanGpusWithNvml() {
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return std::nullopt;
  auto init = reinterpret_cast<NvmlInitFn>(::dlsym(lib, "nvmlInit_v2"));
  auto shutdown =
      reinterpret_cast<NvmlShutdownFn>(::dlsym(lib, "nvmlShutdown"));
  auto get_count = reinterpret_cast<NvmlDeviceGetCountFn>(
      ::dlsym(lib, "nvmlDeviceGetCount_v2"));
  auto get_handle = reinterpret_cast<NvmlDeviceGetHandleByIndexFn>(
      ::dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
  auto get_name =
      reinterpret_cast<NvmlDeviceGetNameFn>(::dlsym(lib, "nvmlDeviceGetName"));
  auto get_memory = reinterpret_cast<NvmlDeviceGetMemoryInfoFn>(
      ::dlsym(lib, "nvmlDeviceGetMemoryInfo"));
  if (init == nullptr || shutdown == nullptr || get_count == nullptr ||
      get_handle == nullptr || init() != kNvmlSuccess) {
    ::dlclose(lib);
    return std::nullopt;
  }
  std::optional<GpuScan> scan;
  unsigned int count = 0;
  if (get_count(&count) == kNvmlSuccess) {
    scan.emplace();
    scan->source = "nvml";
    for (unsigned int i = 0; i < count; ++i) {
      void* device = nullptr;
      if (get_handle(i, &device) != kNvmlSuccess) continue;
      GpuDevice gpu;
      char name[kNvmlNameBufferSize] = {};
      if (get_name != nullptr &&
          get_name(device, name, kNvmlNameBufferSize) == kNvmlSuccess) {
        gpu.model = std::string(name);
      }
      NvmlMemory memory = {};
      if (get_memory != nullptr &&
          get_memory(device, &memory) == kNvmlSuccess) {
        gpu.memory_bytes = static_cast<int64_t>(memory.total);
      }
      scan->devices.push_back(std::move(gpu));
    }
  }
  shutdown();
  ::dlclose(lib);
  return scan;
}

std::string ParseProcfsGpuModel(absl::string_view information) {
  for (absl::string_view line : absl::StrSplit(information, '\n')) {
    if (absl::ConsumePrefix(&line, "Model:")) {
      return std::string(absl::StripAsciiWhitespace(line));
    }
  }
  return "";
}

GpuScan ScanGpusFromProcfs(const std::string& device_root) {
  GpuScan scan;
  std::string gpus = internal::JoinPath(device_root, "proc/driver/nvidia/gpus");
  for (const std::string& bus : internal::ListDirectory(gpus)) {
    absl::StatusOr<std::string> information = internal::ReadSmallFile(
        internal::JoinPath(gpus, bus + "/information"), 16 * 1024);
    if (!information.ok()) continue;
    scan.devices.push_back(GpuDevice{ParseProcfsGpuModel(*information), {}});
  }
  if (!scan.devices.empty()) scan.source = kProcfsSource;
  return scan;
}

GpuScan ScanNvidiaGpus(const std::string& device_root) {
  if (device_root.empty() || device_root == "/") {
    std::optional<GpuScan> nvml = ScanGpusWithNvml();
    if (nvml.has_value() && !nvml->devices.empty()) return *std::move(nvml);
  }
  return ScanGpusFromProcfs(device_root);
}

std::string GpuModelShortName(absl::string_view model) {
  std::vector<absl::string_view> tokens =
      absl::StrSplit(model, ' ', absl::SkipWhitespace());
  size_t first = 0;
  while (first < tokens.size() &&
         (absl::EqualsIgnoreCase(tokens[first], "NVIDIA") ||
          absl::EqualsIgnoreCase(tokens[first], "Tesla") ||
          absl::EqualsIgnoreCase(tokens[first], "GeForce") ||
          absl::EqualsIgnoreCase(tokens[first], "Quadro"))) {
    ++first;
  }
  if (first == tokens.size()) return "";
  std::string name = AlphaNumericPrefix(tokens[first]);
  // "RTX 4090", "RTX A6000": a family word followed by the model number.
  if (!HasDigit(name) && first + 1 < tokens.size()) {
    name += AlphaNumericPrefix(tokens[first + 1]);
  }
  return name;
}

absl::StatusOr<DeviceEnvironment> CudaVisibleDevicesEnvironment(
    const std::vector<int>& gpu_ids, int num_gpus,
    const std::vector<std::string>& gpu_names) {
  std::vector<int> sorted = gpu_ids;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::string> names;
  for (size_t i = 0; i < sorted.size(); ++i) {
    int id = sorted[i];
    if (id < 0 || id >= num_gpus) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GPU ", id, " is not on this node, which has ", num_gpus, " GPU(s)"));
    }
    if (i > 0 && id == sorted[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("GPU ", id, " given twice"));
    }
    names.push_back(static_cast<size_t>(id) < gpu_names.size()
                        ? gpu_names[id]
                        : absl::StrCat(id));
  }
  DeviceEnvironment env;
  env.set[kCudaVisibleDevicesEnv] = absl::StrJoin(names, ",");
  return env;
}

absl::Status ValidateGpuRequest(double quantity, int num_gpus) {
  if (quantity == 0) return absl::OkStatus();
  if (!std::isfinite(quantity) || quantity < 0 ||
      (quantity > 1 && quantity != std::floor(quantity))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a task may ask for a fraction of one GPU or a whole number of GPUs "
        "(asked for ",
        quantity, ")"));
  }
  if (num_gpus <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("this node has no GPU (asked for ", quantity,
                     "); run the task on a GPU node"));
  }
  if (quantity > num_gpus) {
    return absl::InvalidArgumentError(
        absl::StrCat("a task may hold at most ", num_gpus,
                     " GPU(s) on this node (asked for ", quantity,
                     "); use a gang (placement group) for more than one node"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<NvidiaGpuManager>> NvidiaGpuManager::Create(
    const std::string& device_root,
    const std::map<std::string, std::string>& env,
    std::optional<double> num_gpus) {
  GpuScan scan = ScanNvidiaGpus(device_root);
  absl::StatusOr<internal::DeviceCount> count = internal::ResolveDeviceCount(
      "--num-gpus", num_gpus, static_cast<int>(scan.devices.size()),
      internal::VisibleDeviceList(env, kCudaVisibleDevicesEnv),
      kCudaVisibleDevicesEnv);
  if (!count.ok()) return count.status();
  return std::make_unique<NvidiaGpuManager>(count->count, std::move(scan),
                                            std::move(count->names));
}

NvidiaGpuManager::NvidiaGpuManager(int num_gpus, GpuScan scan,
                                   std::vector<std::string> gpu_names)
    : num_gpus_(num_gpus),
      scan_(std::move(scan)),
      gpu_names_(std::move(gpu_names)) {}

std::string NvidiaGpuManager::AcceleratorType() const {
  if (num_gpus_ == 0 || scan_.devices.empty()) return "";
  return GpuModelShortName(scan_.devices.front().model);
}

std::map<std::string, double> NvidiaGpuManager::ExtraResources() const {
  std::map<std::string, double> resources;
  std::string type = AcceleratorType();
  if (!type.empty()) {
    resources[absl::StrCat(kAcceleratorTypeResourcePrefix, type)] = 1;
  }
  return resources;
}

std::map<std::string, std::string> NvidiaGpuManager::Labels() const {
  std::map<std::string, std::string> labels;
  if (num_gpus_ == 0 || scan_.devices.empty()) return labels;
  std::string type = AcceleratorType();
  if (!type.empty()) labels[kLabelAcceleratorType] = type;
  if (!scan_.devices.front().model.empty()) {
    labels[kLabelGpuModel] = scan_.devices.front().model;
  }
  std::optional<int64_t> smallest;
  for (const GpuDevice& gpu : scan_.devices) {
    if (gpu.memory_bytes.has_value() &&
        (!smallest.has_value() || *gpu.memory_bytes < *smallest)) {
      smallest = gpu.memory_bytes;
    }
  }
  if (smallest.has_value()) {
    labels[kLabelGpuMemoryMib] = absl::StrCat(*smallest / (1024 * 1024));
  }
  return labels;
}

absl::Status NvidiaGpuManager::ValidateRequest(double quantity) const {
  return ValidateGpuRequest(quantity, num_gpus_);
}

absl::StatusOr<DeviceEnvironment> NvidiaGpuManager::VisibleDevicesEnvironment(
    const std::vector<int>& device_ids) const {
  return CudaVisibleDevicesEnvironment(device_ids, num_gpus_, gpu_names_);
}

std::string NvidiaGpuManager::Summary() const {
  if (num_gpus_ == 0) return "GPU none";
  std::string summary = absl::StrCat("GPU ", num_gpus_);
  std::string type = AcceleratorType();
  if (!type.empty()) absl::StrAppend(&summary, " x ", type);
  absl::StrAppend(&summary, " (",
                  scan_.source.empty() ? "--num-gpus" : scan_.source);
  auto labels = Labels();
  if (auto it = labels.find(kLabelGpuMemoryMib); it != labels.end()) {
    absl::StrAppend(&summary, ", ", it->second, " MiB each");
  }
  absl::StrAppend(&summary, ")");
  return summary;
}

}  // namespace shoal::accel
