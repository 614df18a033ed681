// Which accelerator devices each lease holds. The scheduler counts devices
// as resources ("TPU": 4); this gives a lease the ids behind the count, so
// that its worker is shown exactly those devices.
//
// Whole devices are exclusive: a lease of "GPU": 2 takes the two
// lowest-numbered free GPUs until it returns them. A fraction ("GPU": 0.5)
// shares a device with other fractions: the lowest-numbered free one (device
// 0 when none is free), and takes nothing from the free set; the resource
// count keeps fractions from over-filling a device.
//
// Threading: lives on the agent's event loop; not thread-safe.
#ifndef SHOAL_AGENT_DEVICE_ALLOCATOR_H_
#define SHOAL_AGENT_DEVICE_ALLOCATOR_H_

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "accel/accelerator_manager.h"
#include "common/process.h"
#include "scheduling/resource_set.h"

namespace shoal::agent {

// Device ids per resource name ("TPU" -> {0, 1}).
using DeviceIds = std::map<std::string, std::vector<int>>;

// A stable text form of `devices`: a worker sees the devices it was started
// with for its whole life, so it is reused only by leases with the same key.
std::string DeviceKey(const DeviceIds& devices);

class DeviceAllocator {
 public:
  // `devices`: how many devices of each kind the node has ("TPU" -> 4),
  // numbered 0 .. n-1. Resources of other names hold no devices.
  explicit DeviceAllocator(const std::map<std::string, int>& devices);

  // Ids for each device kind `base_shape` asks for (bundle resources
  // already mapped to their base: see BaseShape). When fewer whole devices
  // are free than asked (a node may advertise more than it has, with
  // --resources), it gives those that are free.
  DeviceIds Take(const ResourceSet& base_shape);

  // Gives back what Take(base_shape) returned. FailedPrecondition, changing
  // nothing, when some device given back is already free.
  absl::Status Return(const ResourceSet& base_shape, const DeviceIds& devices);

  // The free ids of one kind (empty for a kind the node lacks).
  std::set<int> free(const std::string& name) const;

 private:
  std::map<std::string, std::set<int>> free_;
};

// What a worker holding `devices` must find in its environment: for each
// accelerator kind, the kind's own variables (TPU_VISIBLE_CHIPS and bounds,
// CUDA_VISIBLE_DEVICES), which hide that kind entirely from a worker that
// holds none of it, and Shoal's (SHOAL_DEVICE_KIND, SHOAL_DEVICE_IDS, read
// by shoal::GetAssignedDevices()). Adds them to `spawn`.
absl::Status AddDeviceEnvironment(
    const std::vector<std::shared_ptr<const accel::AcceleratorManager>>&
        accelerators,
    const DeviceIds& devices, SpawnOptions* spawn);

}  // namespace shoal::agent

#endif  // SHOAL_AGENT_DEVICE_ALLOCATOR_H_
