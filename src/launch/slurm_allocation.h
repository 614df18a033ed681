// What Slurm gives a process that runs in one of its allocations: the hosts
// (SLURM_JOB_NODELIST, SLURM_STEP_NODELIST, expanded as `scontrol show
// hostnames` does), this node's place among them, and the CPUs, memory and
// GPUs the job has on it. Pure: the variables come through a lookup, so a
// test feeds what srun sets.
#ifndef SHOAL_LAUNCH_SLURM_ALLOCATION_H_
#define SHOAL_LAUNCH_SLURM_ALLOCATION_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shoal::launch {

// "node[1-3,07],gpu-a" -> node1 node2 node3 node07 gpu-a. Ranges keep the
// lower bound's zero padding ("[08-10]": 08 09 10); several bracket groups
// in one name multiply ("r[1-2]n[1-2]": r1n1 r1n2 r2n1 r2n2).
absl::StatusOr<std::vector<std::string>> ExpandHostlist(absl::string_view text);

struct SlurmAllocation {
  std::string job_id;
  std::string step_id;  // "" outside a step (the batch script itself)
  // The step's hosts in Slurm's order (the job's outside a step), and
  // this node's index among them (SLURM_NODEID; -1 when Slurm gave none).
  std::vector<std::string> hosts;
  int node_index = -1;
  std::optional<int> cpus;              // SLURM_CPUS_ON_NODE
  std::optional<int64_t> memory_bytes;  // --mem, or --mem-per-cpu x cpus
  // The GPUs of this node the job may use, as CUDA_VISIBLE_DEVICES names
  // them: none when Slurm gave none (no --gres), whatever the host has.
  std::vector<std::string> gpus;
  std::string submit_dir;  // SLURM_SUBMIT_DIR
};

// Reads the allocation from `get` (a variable's value, "" when unset);
// nullopt outside one (no SLURM_JOB_ID). An error names the variable that
// cannot be read.
absl::StatusOr<std::optional<SlurmAllocation>> ReadSlurmAllocation(
    const std::function<std::string(const char*)>& get);

// The same from this process's environment.
absl::StatusOr<std::optional<SlurmAllocation>> SlurmAllocationOfThisProcess();

}  // namespace shoal::launch

#endif  // SHOAL_LAUNCH_SLURM_ALLOCATION_H_
