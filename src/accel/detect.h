// Node detection: everything a node agent advertises about its hardware (CPU,
// memory, object store, TPU chips and slice, NVIDIA GPUs), computed once at
// start-up.
//
// Detection reads files under a device root and a snapshot of environment
// variables, both given in DetectOptions, so tests and the demo build fake
// hosts. It never touches the network (no metadata server) and never blocks:
// file reads are bounded and device nodes are never opened; only NVML, when
// present and the root is "/", talks to a driver.
#ifndef SHOAL_ACCEL_DETECT_H_
#define SHOAL_ACCEL_DETECT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "accel/accelerator_manager.h"
#include "accel/cpu.h"

namespace shoal::accel {

struct DetectOptions {
  std::string device_root = "/";                       // SHOAL_DEVICE_ROOT
  std::map<std::string, std::string> env;              // snapshot of TPU_* etc.
  std::optional<double> num_cpus, num_gpus, num_tpus;  // --num-cpus ...
  std::optional<int64_t> memory_bytes, object_store_memory_bytes;
};

struct NodeAccelerators {
  // "CPU", "memory", "object_store_memory", "TPU", "GPU", the slice name,
  // "TPU-<type>-head", "accelerator_type:<model>"; kinds without devices are
  // left out.
  std::map<std::string, double> resources;
  std::map<std::string, std::string> labels;
  std::string summary;  // one line for logs and `shoal status --verbose`
};

// CPU, memory and object store (from the real machine: simulated hosts run
// their compute on it) plus every accelerator kind found under
// options.device_root. Fails (InvalidArgument) only on bad overrides or on
// TPU_* variables that a TPU host cannot make sense of.
absl::StatusOr<NodeAccelerators> DetectNode(const DetectOptions& options);

// TPU_* variables and CUDA_VISIBLE_DEVICES from this process's environment,
// for DetectOptions::env.
std::map<std::string, std::string> EnvironmentSnapshot();

// The pieces DetectNode is made of, for a node agent that keeps the managers
// (to validate requests and build each worker's device environment) and
// also needs NodeAccelerators.
//
// One manager per accelerator kind that has devices, TPU before GPU.
absl::StatusOr<std::vector<std::unique_ptr<AcceleratorManager>>>
DetectAccelerators(const DetectOptions& options);
absl::StatusOr<CpuResources> DetectCpu(const DetectOptions& options);
NodeAccelerators DescribeNode(
    const CpuResources& cpu,
    const std::vector<std::unique_ptr<AcceleratorManager>>& managers);

// The manager whose ResourceName() is `resource` ("TPU", "GPU"), or null.
const AcceleratorManager* FindManager(
    const std::vector<std::unique_ptr<AcceleratorManager>>& managers,
    const std::string& resource);

}  // namespace shoal::accel

#endif  // SHOAL_ACCEL_DETECT_H_
