// What this process's workers run, as leases and actor specs name it: this
// program (its file and the hash of its content), or, for a driver whose
// program cannot be its workers, the command the nodes start; and the C++
// program a driver of another language calls into.
#ifndef SHOAL_API_WORKER_PROGRAM_H_
#define SHOAL_API_WORKER_PROGRAM_H_

#include <string>

#include "absl/status/statusor.h"
#include "api/worker_command.h"

namespace shoal::internal {

struct WorkerProgram {
  std::string binary_path;  // empty for a command
  // The program's content hash, "command-<hash of the command>" for a
  // command (so that idle workers are reused only by leases of the same
  // command), or empty.
  std::string binary_hash;
  // The C++ program (absolute), when one is named; its hash is read after
  // the job is registered (CppProgramHash).
  std::string cpp_binary_path;
};

// `self_path`: this program's file (SelfExecutable()), `self_hash_path`
// where to read it from (through /proc: the file may have been replaced or
// removed).
absl::StatusOr<WorkerProgram> IdentifyWorkerProgram(
    bool workers_run_this_program, const WorkerCommand& command,
    const std::string& cpp_program, const std::string& self_path,
    const std::string& self_hash_path);

// The content hash of the C++ program at `path`, or an error that names it.
absl::StatusOr<std::string> CppProgramHash(const std::string& path);

}  // namespace shoal::internal

#endif  // SHOAL_API_WORKER_PROGRAM_H_
