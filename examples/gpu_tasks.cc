// Tasks that ask for GPUs, on whatever cluster shoal::Init() finds: one task
// per GPU at once (each sees only its own device), two half-GPU tasks that
// share a device, and a task without a GPU that sees none. Prints one line
// per task and exits 1, saying why, when the cluster has no GPU.
//
//   shoal start --head && build/bin/gpu_tasks
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "shoal/api.h"

// What a task sees of the GPUs. It holds them for `hold_ms`, so that tasks
// submitted together run at once on distinct devices.
std::string SeeDevices(int64_t hold_ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
  const char* visible = getenv("CUDA_VISIBLE_DEVICES");
  shoal::AssignedDevices held = shoal::GetAssignedDevices();
  std::string ids;
  for (int id : held.ids) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  return "node " + shoal::CurrentNodeId() +
         " CUDA_VISIBLE_DEVICES=" + (visible ? visible : "<unset>") +
         " held=" + (held.kind.empty() ? "none" : held.kind + ":" + ids) +
         (held.accelerator_type.empty() ? "" : " " + held.accelerator_type);
}
SHOAL_REMOTE(SeeDevices);

constexpr int64_t kHoldMs = 500;

int main() {
  try {
    shoal::Init();
    int gpus = static_cast<int>(shoal::ClusterResources()["GPU"]);
    if (gpus < 1) {
      std::cerr << "gpu_tasks: the cluster has no GPU (shoal status shows "
                   "what its nodes detected)\n";
      return 1;
    }
    std::vector<shoal::ObjectRef<std::string>> whole;
    for (int i = 0; i < gpus; ++i) {
      whole.push_back(
          shoal::Task(SeeDevices).SetResource("GPU", 1).Remote(kHoldMs));
    }
    for (const std::string& seen : shoal::Get(whole)) {
      std::cout << "GPU: 1    " << seen << "\n";
    }
    std::vector<shoal::ObjectRef<std::string>> halves;
    for (int i = 0; i < 2; ++i) {
      halves.push_back(
          shoal::Task(SeeDevices).SetResource("GPU", 0.5).Remote(kHoldMs));
    }
    for (const std::string& seen : shoal::Get(halves)) {
      std::cout << "GPU: 0.5  " << seen << "\n";
    }
    std::cout << "no GPU    "
              << shoal::Get(shoal::Task(SeeDevices).Remote(int64_t{0})) << "\n";
    shoal::Shutdown();
  } catch (const shoal::Error& e) {
    std::cerr << "gpu_tasks: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
