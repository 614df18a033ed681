#include "common/environment.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"

namespace shoal::env {
namespace {

using enum Setter;
using enum Type;

// code-sizes: table
constexpr Variable kTable[] = {
    // Set by users.
    {Var::kAddress, "SHOAL_ADDRESS", kAddress, kUser, "", 0, false,
     "The head that the CLI, drivers and shoal.init() connect to. Unset: "
     "the cluster started from this host's temp dir (the CLI), else a new "
     "local cluster (a driver). Shoal sets it for workers and jobs."},
    {Var::kToken, "SHOAL_TOKEN", kText, kUser, "", 0, true,
     "The cluster's token, when it is not read from the session folder that "
     "`shoal start` wrote on this host. Shoal sets it for workers and jobs."},
    {Var::kTempDir, "SHOAL_TEMP_DIR", kPath, kUser, "/tmp/shoal", 0, false,
     "The folder that holds session folders (logs, the token, the head's "
     "address); the same as --temp-dir."},
    {Var::kLogLevel, "SHOAL_LOG_LEVEL", kText, kUser, "info", 0, false,
     "The least severe log line written: debug, info, warning or error."},
    {Var::kTlsCert, "SHOAL_TLS_CERT", kPath, kUser, "", 0, false,
     "PEM certificate this process presents; the same as --tls-cert."},
    {Var::kTlsKey, "SHOAL_TLS_KEY", kPath, kUser, "", 0, false,
     "PEM private key of SHOAL_TLS_CERT; the same as --tls-key."},
    {Var::kTlsCa, "SHOAL_TLS_CA", kPath, kUser, "", 0, false,
     "PEM CA bundle that peers' certificates must chain to; the same as "
     "--tls-ca. Set: this process speaks TLS."},
    {Var::kTlsMutual, "SHOAL_TLS_MUTUAL", kFlag, kUser, "0", 0, false,
     "Servers ask clients for certificates too; the same as --tls-mutual."},
    {Var::kHeadTimeoutS, "SHOAL_HEAD_TIMEOUT_S", kInteger, kUser, "60", 1,
     false,
     "Seconds a node agent waits for a head that does not answer before it "
     "stops its workers and itself; the same as --head-timeout-s."},
    {Var::kHeadOutageWaitMs, "SHOAL_HEAD_OUTAGE_WAIT_MS", kInteger, kUser,
     "30000", 0, false,
     "Milliseconds a driver's blocking calls and a launcher keep calling a "
     "head that cannot be reached (it restarts) before they fail."},
    {Var::kMaxPendingTasks, "SHOAL_MAX_PENDING_TASKS", kInteger, kUser,
     "100000", 0, false,
     "Tasks a driver may have submitted and not yet finished before Remote() "
     "waits for room (0: no bound)."},
    {Var::kInlineThresholdBytes, "SHOAL_INLINE_THRESHOLD_BYTES", kInteger,
     kUser, "102400", 0, false,
     "Objects up to this size travel inside RPCs; larger ones go through the "
     "node's shared-memory store."},
    {Var::kTaskEventsReportIntervalMs, "SHOAL_TASK_EVENTS_REPORT_INTERVAL_MS",
     kInteger, kUser, "1000", 0, false,
     "How often a driver or worker sends its task events (for `shoal list "
     "tasks` and the dashboard) to the head (0: at once)."},
    {Var::kDeviceRoot, "SHOAL_DEVICE_ROOT", kPath, kUser, "/", 0, false,
     "The root under which accelerator detection reads /dev and /sys: a "
     "fake host made by `shoal dev fake-tpu`."},
    {Var::kLibtpuLockfile, "SHOAL_LIBTPU_LOCKFILE", kPath, kUser,
     "/tmp/libtpu_lockfile", 0, false,
     "The lock file libtpu takes; a node agent clears a stale one left by a "
     "worker that died."},
    {Var::kHostId, "SHOAL_HOST_ID", kText, kUser, "", 0, false,
     "What this process calls its host instead of the kernel's boot id and "
     "the root file system (processes with one id must see the same files)."},
    {Var::kNcclDevice, "SHOAL_NCCL_DEVICE", kInteger, kUser, "", 0, false,
     "The CUDA device an NCCL collective group uses. Unset: the first one "
     "visible (CUDA_VISIBLE_DEVICES)."},
    {Var::kShmSlotBytes, "SHOAL_SHM_SLOT_BYTES", kInteger, kUser, "", 1, false,
     "Bytes per slot of a shared-memory collective group's segment. Unset: "
     "sized from the group's world size."},
    {Var::kShmSpins, "SHOAL_SHM_SPINS", kInteger, kUser, "128", 1, false,
     "Times a shared-memory collective checks its peers before it sleeps on "
     "a futex."},
    {Var::kSendDebugInfo, "SHOAL_SEND_DEBUG_INFO", kFlag, kUser, "0", 0, false,
     "A driver sends its program to other hosts with its debug info (else "
     "stripped, when objcopy is there)."},
    {Var::kNumCpuDevices, "SHOAL_NUM_CPU_DEVICES", kInteger, kUser, "1", 1,
     false,
     "Processes a per-device launch from a task starts on a host that has no "
     "accelerators."},
    {Var::kCli, "SHOAL_CLI", kPath, kUser, "", 0, false,
     "The `shoal` program the Python package runs for a local cluster. "
     "Unset: the one it was built with, else `shoal` on PATH."},
    {Var::kAutoInit, "SHOAL_AUTO_INIT", kFlag, kUser, "1", 0, false,
     "A Python driver joins (or starts) a cluster on its first remote call, "
     "put or get, as if init() had been called; 0 makes those an error "
     "until init()."},
    {Var::kIgnoreUnhandledErrors, "SHOAL_IGNORE_UNHANDLED_ERRORS", kFlag, kUser,
     "0", 0, false,
     "1: a Python driver does not print the \"Unhandled error\" line for a "
     "failed task whose result was dropped without get()."},
    {Var::kOverrideDashboardUrl, "SHOAL_OVERRIDE_DASHBOARD_URL", kText, kUser,
     "", 0, false,
     "What a Python driver's get_dashboard_url() (and init()'s webui_url) "
     "says instead of the head's dashboard address: for a dashboard behind "
     "a proxy."},
    // Set by Shoal for the processes it starts.
    {Var::kRole, "SHOAL_ROLE", kText, kShoal, "", 0, false,
     "What a program built with Shoal is started as: worker, launch-child, "
     "group-guard or cli. Unset: the user's program (a driver)."},
    {Var::kNodeId, "SHOAL_NODE_ID", kText, kShoal, "", 0, false,
     "The node whose agent started this worker."},
    {Var::kNodeIp, "SHOAL_NODE_IP", kText, kShoal, "", 0, false,
     "The address of this worker's node."},
    {Var::kAgentAddress, "SHOAL_AGENT_ADDRESS", kAddress, kShoal, "", 0, false,
     "The RPC address of this worker's node agent."},
    {Var::kSessionDir, "SHOAL_SESSION_DIR", kPath, kShoal, "", 0, false,
     "The node's session folder (its logs)."},
    {Var::kWorkerId, "SHOAL_WORKER_ID", kText, kShoal, "", 0, false,
     "This worker's id."},
    {Var::kJobId, "SHOAL_JOB_ID", kText, kShoal, "", 0, false,
     "The driver job this worker runs tasks of."},
    {Var::kBlobHash, "SHOAL_BLOB_HASH", kText, kShoal, "", 0, false,
     "The head's copy of the program this worker runs."},
    {Var::kJobSubmissionId, "SHOAL_JOB_SUBMISSION_ID", kText, kShoal, "", 0,
     false, "The submitted job (`shoal job submit`) this process belongs to."},
    {Var::kJobDir, "SHOAL_JOB_DIR", kPath, kShoal, "", 0, false,
     "The submitted job's working folder."},
    {Var::kJobArchive, "SHOAL_JOB_ARCHIVE", kPath, kShoal, "", 0, false,
     "The archive of the working dir the job was submitted with."},
    {Var::kGroupGuardGraceMs, "SHOAL_GROUP_GUARD_GRACE_MS", kInteger, kShoal,
     "5000", 0, false,
     "Milliseconds a job's process group has between SIGTERM and SIGKILL "
     "when its node agent dies."},
    {Var::kDeviceKind, "SHOAL_DEVICE_KIND", kText, kShoal, "", 0, false,
     "The kind of accelerator this process holds: TPU, GPU or CPU."},
    {Var::kDeviceIds, "SHOAL_DEVICE_IDS", kList, kShoal, "", 0, false,
     "The ids of the devices this process holds on its host."},
    {Var::kAcceleratorType, "SHOAL_ACCELERATOR_TYPE", kText, kShoal, "", 0,
     false, "The accelerator's type, e.g. v5p-16 or H100."},
    {Var::kAcceleratorName, "SHOAL_ACCELERATOR_NAME", kText, kShoal, "", 0,
     false, "The accelerator-type label of the node (as Ray names it)."},
    {Var::kTpuSliceName, "SHOAL_TPU_SLICE_NAME", kText, kShoal, "", 0, false,
     "The TPU slice this worker's host is part of."},
    {Var::kTpuWorkerId, "SHOAL_TPU_WORKER_ID", kInteger, kShoal, "", 0, false,
     "This host's worker id in its TPU slice."},
    {Var::kLaunchMode, "SHOAL_LAUNCH_MODE", kText, kShoal, "", 0, false,
     "How the gang was launched: per-device or per-host."},
    {Var::kRank, "SHOAL_RANK", kInteger, kShoal, "0", 0, false,
     "This process's rank in its gang."},
    {Var::kLocalRank, "SHOAL_LOCAL_RANK", kInteger, kShoal, "0", 0, false,
     "This process's rank among its host's."},
    {Var::kWorldSize, "SHOAL_WORLD_SIZE", kInteger, kShoal, "1", 0, false,
     "The processes in the gang."},
    {Var::kLocalWorldSize, "SHOAL_LOCAL_WORLD_SIZE", kInteger, kShoal, "", 0,
     false, "The gang's processes on this host."},
    {Var::kNodeRank, "SHOAL_NODE_RANK", kInteger, kShoal, "", 0, false,
     "This host's index in the gang."},
    {Var::kNumNodes, "SHOAL_NUM_NODES", kInteger, kShoal, "", 0, false,
     "The hosts in the gang."},
    {Var::kProcessId, "SHOAL_PROCESS_ID", kInteger, kShoal, "0", 0, false,
     "This process's id in the gang, as JAX numbers processes."},
    {Var::kNumProcesses, "SHOAL_NUM_PROCESSES", kInteger, kShoal, "1", 0, false,
     "The gang's processes, as JAX counts them."},
    {Var::kCoordinatorAddress, "SHOAL_COORDINATOR_ADDRESS", kAddress, kShoal,
     "", 0, false, "The gang's rendezvous address (rank 0's host)."},
    {Var::kLocalDeviceIds, "SHOAL_LOCAL_DEVICE_IDS", kList, kShoal, "", 0,
     false, "The devices this process drives."},
    {Var::kLocalDeviceCount, "SHOAL_LOCAL_DEVICE_COUNT", kInteger, kShoal, "0",
     0, false, "How many devices this process drives."},
    {Var::kGlobalDeviceCount, "SHOAL_GLOBAL_DEVICE_COUNT", kInteger, kShoal,
     "0", 0, false, "The devices of the whole gang."},
    {Var::kRestartCount, "SHOAL_RESTART_COUNT", kInteger, kShoal, "0", 0, false,
     "How many times the gang was started again after a failure."},
    {Var::kLaunchSpec, "SHOAL_LAUNCH_SPEC", kPath, kShoal, "", 0, false,
     "The gang a launch child process runs its rank of."},
    {Var::kLaunchResult, "SHOAL_LAUNCH_RESULT", kPath, kShoal, "", 0, false,
     "Where a launch child process writes its rank's result."},
    {Var::kLaunchLocalIndex, "SHOAL_LAUNCH_LOCAL_INDEX", kInteger, kShoal, "0",
     0, false, "Which of its host's ranks a launch child process runs."},
    // Set by other tools.
    {Var::kCudaVisibleDevices, "CUDA_VISIBLE_DEVICES", kList, kOther, "", 0,
     false,
     "The GPUs this process may use; an NCCL group takes the first unless "
     "SHOAL_NCCL_DEVICE says otherwise."},
    {Var::kTmpdir, "TMPDIR", kPath, kOther, "/tmp", 0, false,
     "Where Shoal writes temporary files."},
    {Var::kPythonpath, "PYTHONPATH", kList, kOther, "", 0, false,
     "Kept for submitted jobs, with Shoal's own Python package appended."},
    {Var::kGlooSocketIfname, "GLOO_SOCKET_IFNAME", kText, kOther, "", 0, false,
     "The interface Gloo uses. Unset: a launch sets it to the one that holds "
     "the host's address in the gang."},
    {Var::kMasterAddr, "MASTER_ADDR", kText, kOther, "", 0, false,
     "torch.distributed's rendezvous host; a collective group started under "
     "a launcher tells generations apart by it."},
    {Var::kMasterPort, "MASTER_PORT", kInteger, kOther, "", 0, false,
     "torch.distributed's rendezvous port; used as MASTER_ADDR is."},
    {Var::kTpuName, "TPU_NAME", kText, kOther, "", 0, false,
     "The TPU slice's name (the TPU VM's metadata, or GKE); detection makes "
     "it the node's slice label."},
    {Var::kTpuWorkerIdOfVm, "TPU_WORKER_ID", kInteger, kOther, "", 0, false,
     "This host's worker id in its slice (the TPU VM, or GKE)."},
    {Var::kTpuWorkerHostnames, "TPU_WORKER_HOSTNAMES", kList, kOther, "", 0,
     false, "The hosts of this TPU slice, worker 0 first."},
    {Var::kTpuAcceleratorType, "TPU_ACCELERATOR_TYPE", kText, kOther, "", 0,
     false, "The slice's accelerator type, e.g. v5p-16."},
    {Var::kTpuTopology, "TPU_TOPOLOGY", kText, kOther, "", 0, false,
     "The slice's chip topology, e.g. 2x2x2."},
    {Var::kSlurmJobId, "SLURM_JOB_ID", kText, kOther, "", 0, false,
     "Slurm: the allocation this process runs in; symmetric-run and launch "
     "then take their hosts from it."},
    {Var::kSlurmStepId, "SLURM_STEP_ID", kText, kOther, "", 0, false,
     "Slurm: the job step (srun) this process is a task of."},
    {Var::kSlurmNodeId, "SLURM_NODEID", kInteger, kOther, "", 0, false,
     "Slurm: this node's index in the step; symmetric-run's node 0 runs "
     "the head."},
    {Var::kSlurmJobNodelist, "SLURM_JOB_NODELIST", kText, kOther, "", 0, false,
     "Slurm: the allocation's hosts as a hostlist, e.g. node[1-3]."},
    {Var::kSlurmStepNodelist, "SLURM_STEP_NODELIST", kText, kOther, "", 0,
     false,
     "Slurm: the step's hosts; symmetric-run's cluster is made of them."},
    {Var::kSlurmCpusOnNode, "SLURM_CPUS_ON_NODE", kInteger, kOther, "", 0,
     false,
     "Slurm: the CPUs the job has on this node, which its node agent "
     "advertises."},
    {Var::kSlurmMemPerNode, "SLURM_MEM_PER_NODE", kInteger, kOther, "", 0,
     false, "Slurm: MB of memory the job has on this node (--mem)."},
    {Var::kSlurmMemPerCpu, "SLURM_MEM_PER_CPU", kInteger, kOther, "", 0, false,
     "Slurm: MB of memory per CPU (--mem-per-cpu)."},
    {Var::kSlurmGpusOnNode, "SLURM_GPUS_ON_NODE", kInteger, kOther, "", 0,
     false,
     "Slurm: GPUs the job has on this node (--gres=gpu:N); they are "
     "CUDA_VISIBLE_DEVICES's."},
    {Var::kSlurmSubmitDir, "SLURM_SUBMIT_DIR", kPath, kOther, "", 0, false,
     "Slurm: where the job was submitted from, on storage every node sees; "
     "symmetric-run keeps the job's folder there."},
};

constexpr bool InVarOrder() {
  for (size_t i = 0; i < std::size(kTable); ++i) {
    if (static_cast<size_t>(kTable[i].var) != i) return false;
  }
  return true;
}
static_assert(InVarOrder(), "kTable must list every Var, in Var's order");
static_assert(static_cast<size_t>(Var::kSlurmSubmitDir) + 1 ==
                  std::size(kTable),
              "kTable must list every Var");

}  // namespace

std::span<const Variable> Table() { return kTable; }

const Variable& Describe(Var var) { return kTable[static_cast<size_t>(var)]; }

const char* Name(Var var) { return Describe(var).name; }

std::optional<std::string> Find(Var var) {
  const char* value = getenv(Name(var));
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::string Get(Var var) {
  std::optional<std::string> value = Find(var);
  return value ? *value : Describe(var).default_value;
}

std::optional<int64_t> FindInt(Var var) {
  std::optional<std::string> value = Find(var);
  if (!value) return std::nullopt;
  const Variable& v = Describe(var);
  int64_t parsed = 0;
  if (absl::SimpleAtoi(*value, &parsed) && parsed >= v.minimum) return parsed;
  // stderr, not the log: the log reads SHOAL_LOG_LEVEL through here.
  static std::atomic<bool> warned[std::size(kTable)];
  if (!warned[static_cast<size_t>(var)].exchange(true)) {
    fprintf(stderr,
            "shoal: ignoring %s=%s: not a whole number of at least %lld; "
            "using %s\n",
            v.name, value->c_str(), static_cast<long long>(v.minimum),
            *v.default_value != '\0' ? v.default_value : "the default");
  }
  return std::nullopt;
}

int64_t GetInt(Var var) {
  if (std::optional<int64_t> value = FindInt(var)) return *value;
  int64_t fallback = 0;
  (void)absl::SimpleAtoi(Describe(var).default_value, &fallback);
  return fallback;
}

bool IsOn(Var var) {
  std::string value = absl::AsciiStrToLower(Get(var));
  return value == "1" || value == "true" || value == "yes";
}

}  // namespace shoal::env
