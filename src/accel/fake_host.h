// Fake device trees for tests and the demo: a directory that, used as
// DetectOptions::device_root (SHOAL_DEVICE_ROOT), looks like a TPU VM of a
// slice or an NVIDIA GPU host. Compute on such a host runs on the CPU.
//
// The trees mirror the real files detection reads: /dev/accel<N> (or
// /dev/vfio/<N> with sysfs IOMMU groups linking to PCI devices whose vendor
// is 0x1ae0) for TPU chips, /proc/driver/nvidia/gpus/<bus>/information for
// GPUs. Not thread-safe for the same root.
#ifndef SHOAL_ACCEL_FAKE_HOST_H_
#define SHOAL_ACCEL_FAKE_HOST_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace shoal::accel {

struct FakeTpuHostOptions {
  std::string accelerator_type;  // "v5p-16"
  int worker_id = 0;
  std::string slice_name = "my-tpu";  // TPU_NAME
  // TPU_WORKER_HOSTNAMES, one per host of the slice; empty: "127.0.0.1" for
  // each (every fake host of the demo runs on this machine).
  std::vector<std::string> worker_hostnames;
  // Chips as /dev/vfio groups of Google PCI devices instead of /dev/accel*.
  bool use_vfio = false;
};

// Creates, under `root` (not "/"), the chips of one host of the slice (any
// chips left from an earlier fake host are removed first), and sets
// TPU_ACCELERATOR_TYPE, TPU_WORKER_ID, TPU_NAME, TPU_WORKER_HOSTNAMES and
// TPU_TOPOLOGY in `*env_out` (other entries are kept). InvalidArgument for a
// bad type or worker id.
absl::Status MakeFakeTpuHost(const std::string& root,
                             const FakeTpuHostOptions& options,
                             std::map<std::string, std::string>* env_out);
absl::Status MakeFakeTpuHost(const std::string& root,
                             const std::string& accelerator_type, int worker_id,
                             std::map<std::string, std::string>* env_out);

// Creates `num_gpus` /proc/driver/nvidia/gpus/<bus>/information files whose
// model is `model` ("NVIDIA H200"), and /dev/nvidia<N>, under `root` (not
// "/"); earlier fake GPUs are removed first.
absl::Status MakeFakeNvidiaHost(const std::string& root, int num_gpus,
                                const std::string& model);

}  // namespace shoal::accel

#endif  // SHOAL_ACCEL_FAKE_HOST_H_
