// The seed walkthrough on a TPU slice (real, or simulated with
// `shoal dev fake-tpu`): the same function on one device, on every device of
// one host, on every device of every host, and host-centric.
//
//   SHOAL_ADDRESS=head:6379 ./build/bin/seed_walkthrough
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "shoal/api.h"

#ifdef SHOAL_WITH_TORCH
#include <torch/torch.h>
#endif

namespace {

// A 2x2 random tensor made on this process's device, described in one line.
std::string RandomTensorOnDevice(int local_index) {
  shoal::DeviceContext device = shoal::CurrentDevice();
  shoal::AssignedDevices held = shoal::GetAssignedDevices();
  int chip = device.device_id >= 0 ? device.device_id
                                   : (held.ids.empty() ? -1 : held.ids[0]);
  uint64_t seed = 1000 + device.global_rank * 10 + local_index;
  std::ostringstream out;
  out << "rank " << device.global_rank << "/" << device.world_size << " on "
      << shoal::CurrentNodeId() << " "
      << (held.kind.empty() ? "CPU" : held.kind) << ":" << chip << " ";
#ifdef SHOAL_WITH_TORCH
  // The process sees one device; libtorch has no TPU backend, so the tensor
  // lives in host memory.
  torch::manual_seed(seed);
  torch::Tensor tensor = torch::rand({2, 2}, torch::kFloat32);
  auto a = tensor.accessor<float, 2>();
  out << "torch.rand(2, 2) = tensor([[" << a[0][0] << ", " << a[0][1] << "], ["
      << a[1][0] << ", " << a[1][1] << "]])";
#else
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1, 1);
  out << "tensor([[";
  for (int i = 0; i < 4; ++i) {
    out << (i == 2 ? "], [" : (i ? ", " : "")) << uniform(rng);
  }
  out << "]])  (built without libtorch)";
#endif
  // A simulated chip (a fake TPU host tree) has no silicon behind it.
  if (getenv("SHOAL_DEVICE_ROOT") != nullptr) {
    out << "  (simulated chip: computed on the CPU)";
  }
  return out.str();
}

std::string OneDevice() { return RandomTensorOnDevice(0); }

std::vector<std::string> EveryDeviceOfThisHost() {
  return shoal::Launch(RandomTensorOnDevice);
}

int64_t GlobalDeviceCount() {
  return shoal::spmd::Initialize().global_device_count;
}

SHOAL_REMOTE(RandomTensorOnDevice, OneDevice, EveryDeviceOfThisHost,
             GlobalDeviceCount);

}  // namespace

int Run() {
  shoal::Init();
  // The totals: what is free lags the tasks and groups that just ended.
  double chips = shoal::ClusterResources()["TPU"];
  int hosts = static_cast<int>(chips / 4);
  std::printf("Cluster: %.0f TPU chips, %d host(s) of 4\n", chips, hosts);
  if (hosts < 1) {
    std::printf(
        "No TPU host of 4 chips: start nodes on TPU hosts (or fake ones: "
        "shoal dev fake-tpu)\n");
    return 1;
  }

  std::printf("\n1. One device (a task holding one chip):\n  %s\n",
              shoal::Get(shoal::Task(OneDevice).SetResource("TPU", 1).Remote())
                  .c_str());

  std::printf(
      "\n2. One host, every device (shoal::Launch in a TPU: 4 task):\n");
  for (const auto& line : shoal::Get(
           shoal::Task(EveryDeviceOfThisHost).SetResource("TPU", 4).Remote())) {
    std::printf("  %s\n", line.c_str());
  }

  std::printf("\n3. Every host, every device (one TPU: 4 task per host):\n");
  std::vector<shoal::ObjectRef<std::vector<std::string>>> per_host;
  for (int h = 0; h < hosts; ++h) {
    per_host.push_back(
        shoal::Task(EveryDeviceOfThisHost).SetResource("TPU", 4).Remote());
  }
  for (const auto& lines : shoal::Get(per_host)) {
    for (const auto& line : lines) std::printf("  %s\n", line.c_str());
  }

  std::printf("\n4. Host-centric (one process per host, all its chips):\n");
  std::vector<shoal::ObjectRef<int64_t>> counts;
  for (int h = 0; h < hosts; ++h) {
    counts.push_back(
        shoal::Task(GlobalDeviceCount).SetResource("TPU", 4).Remote());
  }
  std::printf("  [");
  const char* sep = "";
  for (int64_t count : shoal::Get(counts)) {
    std::printf("%s%ld", sep, static_cast<long>(count));
    sep = ", ";
  }
  std::printf("]\n");
  shoal::Shutdown();
  return 0;
}

int main() {
  try {
    return Run();
  } catch (const shoal::Error& e) {
    // No cluster at SHOAL_ADDRESS, a wrong token, a task that failed.
    std::fprintf(stderr, "seed_walkthrough: %s\n", e.what());
    return 1;
  }
}
