// `shoal symmetric-run`: the same command on every node of a Slurm job step
// (srun --nodes=N --ntasks-per-node=1 shoal symmetric-run -- python
// train.py). Node 0 of the step starts the head, the others join it; once
// --min-nodes have joined, the program runs once on the head's node (or, with
// --per-host or --per-device, as a `shoal launch` gang on every node), its
// exit code becomes the step's, and every node stops what it started. The
// job's token is made by node 0 and shared through a 0600 file in the job's
// folder, on storage every node sees (docs/design/slurm.md says why).
#ifndef SHOAL_CLI_SYMMETRIC_RUN_COMMAND_H_
#define SHOAL_CLI_SYMMETRIC_RUN_COMMAND_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "launch/slurm_allocation.h"

namespace CLI {
class App;
}  // namespace CLI

namespace shoal::cli {

struct Context;

namespace symmetric_run {

struct Flags {
  std::string address;  // HOST:PORT, HOST one of the step's hosts
  int port = 6379;
  int min_nodes = 0;  // 0: every node of the step
  bool per_host = false;
  bool per_device = false;
  int nproc_per_node = 0;
  std::string job_dir;  // "": SLURM_SUBMIT_DIR/.shoal/JOB.STEP
  // Each node's session parent is TEMP_DIR/slurm-JOB.STEP-NODE.
  std::string temp_dir = "/tmp/shoal";
  int wait_s = 120;
  std::vector<std::string> argv;  // the program, after --
};

CLI::App* Register(CLI::App& parent, Flags& flags);

// What one node of the step does (pure).
struct NodePlan {
  bool head = false;
  int node_index = 0;
  int min_nodes = 0;
  std::string head_host;  // the head's host, as the step names it
  int port = 6379;
  int wait_s = 120;      // for the head, and for min_nodes
  std::string job_dir;   // shared by the step's nodes
  std::string temp_dir;  // this node's
  // `shoal start` for this node, without --address (an agent joins the
  // address node 0 writes) and without the token (its file).
  std::vector<std::string> start_args;
  // The program, or `shoal launch --per-host ... -- program`.
  std::vector<std::string> program;
};

absl::StatusOr<NodePlan> PlanNode(const Flags& flags,
                                  const launch::SlurmAllocation& allocation,
                                  const std::string& self);

// The program's exit code on node 0 (128 + signal when it was killed); 0
// on the other nodes; 128 + the signal when the step is cancelled.
absl::StatusOr<int> Run(const Flags& flags, Context& ctx);

}  // namespace symmetric_run
}  // namespace shoal::cli

#endif  // SHOAL_CLI_SYMMETRIC_RUN_COMMAND_H_
