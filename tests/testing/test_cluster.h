// A real cluster for tests and benchmarks: a head and node agents started
// with the `shoal` CLI (this binary re-executed with SHOAL_ROLE=cli), each
// node with its own temp dir on loopback, as separate hosts would have.
#ifndef SHOAL_TESTS_TESTING_TEST_CLUSTER_H_
#define SHOAL_TESTS_TESTING_TEST_CLUSTER_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace shoal::testing {

struct NodeSpec {
  std::string node_id;         // --node-id
  double num_cpus = 2;         // --num-cpus
  std::string resources_json;  // --resources
  // --object-store-memory; 0: detected; < 0: none (no object store).
  int64_t object_store_memory = 0;
  // Environment of its `shoal start` (and so of its agent): e.g.
  // SHOAL_DEVICE_ROOT and TPU_* for a fake TPU host.
  std::vector<std::string> env;
  // Detect this machine's own accelerators. Off by default: test nodes see
  // an empty device root (unless `env` gives SHOAL_DEVICE_ROOT), so that a
  // test means the same on a machine with GPUs or TPUs as on one without.
  bool host_devices = false;
  // Listen on this host's primary address, as `shoal start` does by
  // default, instead of 127.0.0.1.
  bool primary_address = false;
  // A network namespace to start it in (a simulated host of the system
  // tier, tests/system/netns.h); "" for loopback. A node in a namespace is
  // not given --node-ip-address: it finds its own address, as a host would.
  std::string netns;
  // More flags of its `shoal start` (e.g. --metrics-port 0).
  std::vector<std::string> extra_args;
  // Folders this node does not see, as a host without those files: its
  // `shoal start` (and so its agent and workers) runs in a mount namespace
  // of its own with an empty tmpfs over each. Needs root. Pair it with
  // SHOAL_HOST_ID in `env`, so that the node says it is another host.
  std::vector<std::string> hidden_paths;
};

struct ClusterSpec {
  std::vector<NodeSpec> nodes;  // nodes[0] is the head node
  int64_t health_timeout_ms = 2000;
  int64_t infeasible_grace_ms = 1000;
};

// The nodes of a simulated TPU slice: host i gets a fake device tree under
// root/host<i> (shoal dev fake-tpu's), the slice's TPU_* variables, its own
// libtpu lock file root/libtpu_lockfile-<i>, and node id "tpu-<i>".
absl::StatusOr<std::vector<NodeSpec>> FakeTpuSliceNodes(
    const std::string& root, const std::string& accelerator_type, int hosts,
    double cpus_per_host);
// `slices` such slices, named "slice-<k>": host i of slice k under
// root/slice-<k>/host<i>, node id "tpu-<k>-<i>".
absl::StatusOr<std::vector<NodeSpec>> FakeTpuSlicesNodes(
    const std::string& root, const std::string& accelerator_type, int slices,
    int hosts, double cpus_per_host);

// Runs the CLI (this executable with SHOAL_ROLE=cli) and returns its exit
// code; stdout and stderr are captured into *output. A non-empty `netns`
// runs it inside that network namespace (/run/netns/<netns>); `hidden`
// folders are covered by an empty tmpfs in a mount namespace of its own
// (NodeSpec::hidden_paths).
int RunCli(const std::vector<std::string>& args, std::string* output,
           const std::vector<std::string>& env = {},
           const std::string& netns = "",
           const std::vector<std::string>& hidden = {});
// Processes of this host (other than this one) whose command line contains
// `text` (or, with `in` "environ", whose environment does), each as
// "PID: COMMAND LINE".
std::vector<std::string> ProcessesMentioning(const std::string& text,
                                             const std::string& in = "cmdline");

// A socket listening on 127.0.0.1:`port`, as another program holding the
// port would (-1 when it cannot be had). The caller closes it.
int HoldPort(int port);

// RunCli in the background: returns its pid (-1 on failure) and sets
// *out_fd to the read end of its stdout and stderr. FinishCli reads the rest
// into *output (appended), reaps it and returns its exit code. A command
// still running after SHOAL_TEST_CLI_TIMEOUT_S (default 240 s) is killed,
// with it and below it, and *output ends with what each of those processes
// was doing (their threads' stacks, from gdb).
pid_t StartCli(const std::vector<std::string>& args, int* out_fd,
               const std::vector<std::string>& env = {},
               const std::string& netns = "",
               const std::vector<std::string>& hidden = {});
int FinishCli(pid_t pid, int out_fd, std::string* output);

class TestCluster {
 public:
  static absl::StatusOr<std::unique_ptr<TestCluster>> Start(
      const ClusterSpec& spec);
  // A simulated TPU slice (FakeTpuSliceNodes under `root`).
  static absl::StatusOr<std::unique_ptr<TestCluster>> StartFakeTpuSlice(
      const std::string& root, const std::string& accelerator_type, int hosts,
      double cpus_per_host);
  TestCluster(const TestCluster&) = delete;
  TestCluster& operator=(const TestCluster&) = delete;
  ~TestCluster();

  const std::string& address() const { return address_; }
  const std::string& token() const { return token_; }
  const std::string& root() const { return root_; }
  std::string temp_dir(size_t node) const;
  // Session folder of node i.
  std::string session_dir(size_t node) const;
  pid_t agent_pid(size_t node) const;
  pid_t head_pid() const;
  // Adds a node agent (joins the running head).
  absl::Status AddNode(const NodeSpec& node);
  // kill -9 of node i's agent (its workers die with it).
  void KillAgent(size_t node);
  // SIGKILL to the head (waits until it is gone), and `shoal start --head`
  // again on its temp dir, which takes up its session.
  void KillHead();
  absl::Status RestartHead();
  // Sets SHOAL_ADDRESS and SHOAL_TOKEN in this process.
  void ExportEnvironment() const;
  // shoal::Init() against this cluster.
  void Connect() const;
  // `shoal stop` for every node, then removes the temp dirs.
  void Stop();
  // After Stop(): the sanitizer reports (ASan, UBSan, LeakSanitizer) found
  // in the logs of the head, the agents and every worker, or "".
  const std::string& sanitizer_reports() const { return sanitizer_reports_; }

 private:
  TestCluster() = default;
  // Starts node number num_nodes_ (the head's, when `head`).
  // `shoal start` of node `index` (default: the next one).
  absl::Status StartNode(const NodeSpec& node, bool head,
                         std::optional<size_t> index = std::nullopt);
  ClusterSpec spec_;
  std::string root_;
  std::string address_;
  std::string token_;
  size_t num_nodes_ = 0;
  bool stopped_ = true;
  std::string sanitizer_reports_;
};

}  // namespace shoal::testing

#endif  // SHOAL_TESTS_TESTING_TEST_CLUSTER_H_
