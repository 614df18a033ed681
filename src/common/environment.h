// Every environment variable Shoal reads, and every one it sets for the
// processes it starts, declared once in one table (environment.cc) with its
// type, default and meaning. This file's .cc is the one place in src/ that
// calls getenv (scripts/check-environment holds it to that); `shoal config`
// prints the table with the values this process sees.
#ifndef SHOAL_COMMON_ENVIRONMENT_H_
#define SHOAL_COMMON_ENVIRONMENT_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace shoal::env {

// One per variable, in the table's order.
enum class Var : uint8_t {
  // Set by users.
  kAddress,
  kToken,
  kTempDir,
  kLogLevel,
  kTlsCert,
  kTlsKey,
  kTlsCa,
  kTlsMutual,
  kHeadTimeoutS,
  kHeadOutageWaitMs,
  kMaxPendingTasks,
  kInlineThresholdBytes,
  kTaskEventsReportIntervalMs,
  kDeviceRoot,
  kLibtpuLockfile,
  kHostId,
  kNcclDevice,
  kShmSlotBytes,
  kShmSpins,
  kSendDebugInfo,
  kNumCpuDevices,
  kCli,
  kAutoInit,
  kIgnoreUnhandledErrors,
  kOverrideDashboardUrl,
  // Set by Shoal for the processes it starts.
  kRole,
  kNodeId,
  kNodeIp,
  kAgentAddress,
  kSessionDir,
  kWorkerId,
  kJobId,
  kBlobHash,
  kJobSubmissionId,
  kJobDir,
  kJobArchive,
  kGroupGuardGraceMs,
  kDeviceKind,
  kDeviceIds,
  kAcceleratorType,
  kAcceleratorName,
  kTpuSliceName,
  kTpuWorkerId,
  kLaunchMode,
  kRank,
  kLocalRank,
  kWorldSize,
  kLocalWorldSize,
  kNodeRank,
  kNumNodes,
  kProcessId,
  kNumProcesses,
  kCoordinatorAddress,
  kLocalDeviceIds,
  kLocalDeviceCount,
  kGlobalDeviceCount,
  kRestartCount,
  kLaunchSpec,
  kLaunchResult,
  kLaunchLocalIndex,
  // Set by other tools; Shoal reads them.
  kCudaVisibleDevices,
  kTmpdir,
  kPythonpath,
  kGlooSocketIfname,
  kMasterAddr,
  kMasterPort,
  kTpuName,
  kTpuWorkerIdOfVm,
  kTpuWorkerHostnames,
  kTpuAcceleratorType,
  kTpuTopology,
  kSlurmJobId,
  kSlurmStepId,
  kSlurmNodeId,
  kSlurmJobNodelist,
  kSlurmStepNodelist,
  kSlurmCpusOnNode,
  kSlurmMemPerNode,
  kSlurmMemPerCpu,
  kSlurmGpusOnNode,
  kSlurmSubmitDir,
};

enum class Type : uint8_t {
  kText,
  kInteger,  // a decimal count, at least the variable's minimum
  kFlag,     // 1, true or yes (any case) is on; anything else is off
  kPath,
  kAddress,  // HOST:PORT
  kList,     // comma-separated
};

// Who sets a variable.
enum class Setter : uint8_t {
  kUser,   // a person or their scripts; Shoal reads it
  kShoal,  // Shoal, for the workers, jobs and ranks it starts
  kOther,  // another tool (CUDA, Python, torchrun); Shoal reads it
};

struct Variable {
  Var var;
  const char* name;
  Type type;
  Setter set_by;
  // What applies when the variable is unset or empty ("": nothing, or a
  // figure the reader works out, which `doc` then describes).
  const char* default_value;
  int64_t minimum;  // for kInteger
  bool secret;      // `shoal config` never prints its value
  const char* doc;
};

// The table, in Var's order.
std::span<const Variable> Table();
const Variable& Describe(Var var);
const char* Name(Var var);

// The variable's value, or nullopt when unset or empty.
std::optional<std::string> Find(Var var);
// The value, or the table's default when unset or empty.
std::string Get(Var var);
// An integer variable's value when it is set to a decimal integer at least
// its minimum; else (with a warning on stderr, once, when it is set to
// something else) nullopt.
std::optional<int64_t> FindInt(Var var);
// FindInt, or the table's default (which every kInteger with a fixed
// default has).
int64_t GetInt(Var var);
// A kFlag variable: true for 1, true or yes.
bool IsOn(Var var);

}  // namespace shoal::env

#endif  // SHOAL_COMMON_ENVIRONMENT_H_
