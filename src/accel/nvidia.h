// NVIDIA GPUs: how many, which model, how much memory, and the environment
// that gives a process some of them (CUDA_VISIBLE_DEVICES).
//
// NVML is loaded at run time with dlopen("libnvidia-ml.so.1"), so Shoal has
// no link-time dependency on the driver and starts on machines without one;
// /proc/driver/nvidia/gpus/*/information is the fallback, and the only
// source under a device root other than "/" (so that a fake tree wins over
// the real machine).
#ifndef SHOAL_ACCEL_NVIDIA_H_
#define SHOAL_ACCEL_NVIDIA_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "accel/accelerator_manager.h"

namespace shoal::accel {

inline constexpr char kCudaVisibleDevicesEnv[] = "CUDA_VISIBLE_DEVICES";

struct GpuDevice {
  std::string model;                    // "NVIDIA H200"
  std::optional<int64_t> memory_bytes;  // total; unknown from /proc
};

struct GpuScan {
  std::vector<GpuDevice> devices;  // in NVML index / PCI bus order
  std::string source;              // "nvml", "/proc/driver/nvidia" or ""
};

// NVML's view of this machine; nullopt when the library is absent or fails
// to initialise (no driver), which it reports at once.
std::optional<GpuScan> ScanGpusWithNvml();

// `<root>/proc/driver/nvidia/gpus/<bus id>/information` files (their
// "Model:" line), in bus order.
GpuScan ScanGpusFromProcfs(const std::string& device_root);

// NVML when `device_root` is "/" and NVML works, else the /proc files.
GpuScan ScanNvidiaGpus(const std::string& device_root);

// The "Model:" value of an information file; empty when there is none.
std::string ParseProcfsGpuModel(absl::string_view information);

// The short model name used in "accelerator_type:<name>", as Ray does:
// "NVIDIA H200" -> "H200", "Tesla V100-SXM2-16GB" -> "V100",
// "NVIDIA A100-SXM4-80GB" -> "A100", "NVIDIA GeForce RTX 4090" -> "RTX4090".
// Empty when nothing model-like is left.
std::string GpuModelShortName(absl::string_view model);

// CUDA_VISIBLE_DEVICES for a process that holds `gpu_ids` (distinct, each
// in 0 .. num_gpus-1), mapped through `gpu_names` when not empty. No ids
// gives CUDA_VISIBLE_DEVICES="" (the process sees no GPU).
absl::StatusOr<DeviceEnvironment> CudaVisibleDevicesEnvironment(
    const std::vector<int>& gpu_ids, int num_gpus,
    const std::vector<std::string>& gpu_names = {});

// OK when one task may ask for `quantity` GPUs of a node with `num_gpus`:
// a fraction below 1 (sharing one GPU) or a whole number up to num_gpus.
absl::Status ValidateGpuRequest(double quantity, int num_gpus);

class NvidiaGpuManager final : public AcceleratorManager {
 public:
  // Scans (see ScanNvidiaGpus). `num_gpus` (--num-gpus) replaces the count;
  // CUDA_VISIBLE_DEVICES in `env` limits it to the devices listed.
  static absl::StatusOr<std::unique_ptr<NvidiaGpuManager>> Create(
      const std::string& device_root,
      const std::map<std::string, std::string>& env,
      std::optional<double> num_gpus);

  // From known facts (tests). `devices` describes the GPUs detected (their
  // model and memory), `num_gpus` how many are advertised.
  NvidiaGpuManager(int num_gpus, GpuScan scan,
                   std::vector<std::string> gpu_names);

  const GpuScan& scan() const { return scan_; }

  std::string ResourceName() const override { return "GPU"; }
  int NumDevices() const override { return num_gpus_; }
  std::string AcceleratorType() const override;
  std::map<std::string, double> ExtraResources() const override;
  std::map<std::string, std::string> Labels() const override;
  absl::Status ValidateRequest(double quantity) const override;
  absl::StatusOr<DeviceEnvironment> VisibleDevicesEnvironment(
      const std::vector<int>& device_ids) const override;
  std::string Summary() const override;

 private:
  int num_gpus_;
  GpuScan scan_;
  std::vector<std::string> gpu_names_;
};

}  // namespace shoal::accel

#endif  // SHOAL_ACCEL_NVIDIA_H_
