// Launch modes: device-centric (one process per device) and host-centric
// (one process per host, shoal::spmd).
#ifndef SHOAL_LAUNCH_H_
#define SHOAL_LAUNCH_H_

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "shoal/internal/runtime.h"
#include "shoal/serialization.h"

namespace shoal {

// Device-centric launch on this host (what torch_xla.launch does): starts one
// process per device this process holds (all chips of a TPU host, all GPUs;
// on a host without accelerators, SHOAL_NUM_CPU_DEVICES stand-ins, default
// 1), each a re-execution of this binary running fn(local_index, args...)
// with exactly one device visible and the variables of PyTorch/XLA, torch
// and Shoal set. Waits for all and returns their results in local-rank
// order. If one fails, the others are stopped and shoal::Error names it.
template <typename R, typename... Params, typename... Args>
std::vector<R> Launch(R (*fn)(int, Params...), Args&&... args) {
  static_assert(sizeof...(Args) == sizeof...(Params),
                "Launch() passes as many arguments as fn takes after its "
                "local index");
  std::vector<std::string> packed;
  (packed.push_back(
       internal::Pack(std::decay_t<Params>(std::forward<Args>(args)))),
   ...);
  std::vector<std::string> results = internal::LaunchPerDevice(
      internal::FunctionName(reinterpret_cast<const void*>(fn)), packed);
  std::vector<R> out;
  for (const auto& r : results) out.push_back(internal::Unpack<R>(r));
  return out;
}

// Inside a process started by Launch or `shoal launch --per-device`: the
// device it drives and its place in the gang.
struct DeviceContext {
  std::string kind;     // "TPU", "GPU", "CPU"
  int local_index = 0;  // always 0: each process sees one device
  int device_id = -1;   // the chip or GPU id on its host
  int local_rank = 0;
  int global_rank = 0;
  int world_size = 1;
};
DeviceContext CurrentDevice();

namespace spmd {

// Host-centric (multi-controller JAX) view of this process: one process per
// host driving every device of the host.
struct ProcessInfo {
  int process_id = 0;  // dense 0..n-1, TPU hosts in worker-id order
  int process_count = 1;
  int local_device_count = 0;
  int global_device_count = 0;      // 8 on each host of a v5p-16
  std::string coordinator_address;  // host:port of process 0
};

// Reads what `shoal launch --per-host` set (SHOAL_PROCESS_ID, ...), or, in a
// task that holds a whole TPU host, derives it from the slice (TPU_WORKER_ID,
// TPU_WORKER_HOSTNAMES).
ProcessInfo Initialize();

}  // namespace spmd

}  // namespace shoal

#endif  // SHOAL_LAUNCH_H_
