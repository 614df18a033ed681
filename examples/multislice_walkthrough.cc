// The guide's host-centric snippet on two TPU slices at once (real ones, or
// simulated with `shoal dev fake-tpu --name`): both slices reserved by
// topology as one group, one task per host holding its 4 chips, each
// joined to the other slice by the MEGASCALE variables and reporting what
// JAX would count. The Python version is
// examples/python/multislice_walkthrough.py.
//
//   SHOAL_ADDRESS=head:6379 ./build/bin/multislice_walkthrough [2x2x2 v5p]
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "shoal/api.h"

namespace {

std::string Env(const char* name) {
  const char* value = getenv(name);
  return value == nullptr ? "" : value;
}

// The host-centric snippet on this host: the slice's device count as JAX
// sees it (the chips of every host of this slice), after setting the
// variables that join the slices, as a program does before
// jax.distributed.initialize().
std::string HostCentric(std::map<std::string, std::string> megascale) {
  for (const auto& [name, value] : megascale) {
    setenv(name.c_str(), value.c_str(), 1);
  }
  const int64_t devices = shoal::spmd::Initialize().global_device_count;
  std::string line = "slice " + Env("TPU_NAME") + " worker " +
                     Env("TPU_WORKER_ID") +
                     ": device_count() = " + std::to_string(devices);
  for (const char* name : {"MEGASCALE_SLICE_ID", "MEGASCALE_NUM_SLICES",
                           "MEGASCALE_COORDINATOR_ADDRESS", "MEGASCALE_PORT"}) {
    line += std::string("  ") + name + "=" + Env(name);
  }
  return line;
}

SHOAL_REMOTE(HostCentric);

// The address of node `node_id`, without its port.
std::string AddressOf(const std::string& node_id) {
  for (const shoal::NodeInfo& n : shoal::Nodes()) {
    if (n.node_id == node_id) return n.address.substr(0, n.address.rfind(':'));
  }
  return "";
}

int Run(const std::string& topology, const std::string& version) {
  shoal::Init();
  shoal::tpu::SliceGroup slices = shoal::tpu::ReserveSlices(
      {.topology = topology, .accelerator_version = version, .num_slices = 2});
  if (!slices.Wait(60'000)) {
    std::printf("The slices stayed busy for 60 s\n");
    slices.Release();
    return 1;
  }
  std::printf("Reserved %d x %s (%s) as one group: ", slices.num_slices(),
              slices.pod_type.c_str(), slices.topology.c_str());
  for (int s = 0; s < slices.num_slices(); ++s) {
    std::printf("%s%s", s ? ", " : "", slices.slice_names[s].c_str());
  }
  std::printf("\n");

  // Worker 0 of slice 0 coordinates the slices.
  const std::string coordinator = AddressOf(slices.Hosts(0)[0]);
  std::vector<shoal::ObjectRef<std::string>> hosts;
  for (int s = 0; s < slices.num_slices(); ++s) {
    for (int h = 0; h < slices.hosts_per_slice; ++h) {
      auto [group, bundle] = slices.Bundle(s, h);
      hosts.push_back(shoal::Task(HostCentric)
                          .SetResource("CPU", 0)
                          .SetResource("TPU", slices.chips_per_host)
                          .SetPlacementGroup(group, bundle)
                          .Remote(shoal::tpu::CoordinatorEnvVars(
                              coordinator, slices.num_slices(), s)));
    }
  }
  for (const std::string& line : shoal::Get(hosts)) {
    std::printf("  %s\n", line.c_str());
  }
  slices.Release();
  shoal::Shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string topology = argc > 1 ? argv[1] : "2x2x2";
  const std::string version = argc > 2 ? argv[2] : "v5p";
  try {
    return Run(topology, version);
  } catch (const shoal::Error& e) {
    // No cluster, fewer than two whole slices, a task that failed.
    std::fprintf(stderr, "multislice_walkthrough: %s\n", e.what());
    return 1;
  }
}
