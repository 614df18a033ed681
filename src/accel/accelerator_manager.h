// One interface per accelerator kind (TPU, NVIDIA GPU): what a node
// advertises for that kind and what a process must find in its environment to
// see exactly the devices it holds.
//
// A manager is a snapshot taken at detection time (see detect.h); it never
// probes hardware again. Thread-compatible: const methods may be called from
// any thread.
#ifndef SHOAL_ACCEL_ACCELERATOR_MANAGER_H_
#define SHOAL_ACCEL_ACCELERATOR_MANAGER_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shoal::accel {

// Node label keys, with Ray's meanings (a selector on "ray.io/<key>" reads
// "shoal.io/<key>"). Values are plain strings.
inline constexpr char kLabelAcceleratorType[] =
    "shoal.io/accelerator-type";  // "TPU-V5P" (TPU generation) or "H200"
inline constexpr char kLabelTpuPodType[] =
    "shoal.io/tpu-pod-type";  // "v5p-16" (the slice's type)
inline constexpr char kLabelTpuSliceName[] =
    "shoal.io/tpu-slice-name";  // TPU_NAME
inline constexpr char kLabelTpuWorkerId[] = "shoal.io/tpu-worker-id";  // "1"
inline constexpr char kLabelTpuNumWorkers[] =
    "shoal.io/tpu-num-workers";  // hosts in the slice, "2"
inline constexpr char kLabelTpuTopology[] = "shoal.io/tpu-topology";  // 2x2x2
inline constexpr char kLabelGpuModel[] = "shoal.io/gpu-model";  // NVIDIA H200
inline constexpr char kLabelGpuMemoryMib[] =
    "shoal.io/gpu-memory-mib";  // smallest device's total memory

// Prefix of the resource that names a node's accelerator model, as Ray
// advertises it: "accelerator_type:H200": 1, "accelerator_type:TPU-V5P": 1.
inline constexpr char kAcceleratorTypeResourcePrefix[] = "accelerator_type:";

// Changes to apply to a child process's environment: variables to set, and
// variables to remove if the parent (the node agent) had them.
struct DeviceEnvironment {
  std::map<std::string, std::string> set;
  std::vector<std::string> unset;

  bool operator==(const DeviceEnvironment& other) const = default;
};

class AcceleratorManager {
 public:
  virtual ~AcceleratorManager() = default;

  // The scheduler resource that counts this kind's devices: "TPU" or "GPU".
  virtual std::string ResourceName() const = 0;

  // Devices of this kind on the node (after --num-* overrides). Device ids
  // given to VisibleDevicesEnvironment are 0 .. NumDevices()-1.
  virtual int NumDevices() const = 0;

  // The model or generation this node holds, in the form used for the
  // "accelerator_type:<...>" resource ("TPU-V5P", "H200"); empty if unknown.
  virtual std::string AcceleratorType() const = 0;

  // Resources advertised besides ResourceName(): slice name, slice head,
  // accelerator_type:<...>.
  virtual std::map<std::string, double> ExtraResources() const = 0;

  virtual std::map<std::string, std::string> Labels() const = 0;

  // OK when a single task or actor may ask for `quantity` of ResourceName()
  // on this node; otherwise InvalidArgument with a message that names the fix.
  // A quantity of 0 (nothing asked) is always OK.
  virtual absl::Status ValidateRequest(double quantity) const = 0;

  // The environment that makes a process see exactly `device_ids` (each in
  // 0 .. NumDevices()-1, no duplicates). InvalidArgument otherwise.
  virtual absl::StatusOr<DeviceEnvironment> VisibleDevicesEnvironment(
      const std::vector<int>& device_ids) const = 0;

  // One human-readable fragment for the node summary: "TPU 4 chips ...".
  virtual std::string Summary() const = 0;
};

}  // namespace shoal::accel

#endif  // SHOAL_ACCEL_ACCELERATOR_MANAGER_H_
