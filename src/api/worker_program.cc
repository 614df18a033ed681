#include "api/worker_program.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "api/task_error.h"
#include "common/files.h"
#include "common/status_macros.h"

namespace shoal::internal {

absl::StatusOr<WorkerProgram> IdentifyWorkerProgram(
    bool workers_run_this_program, const WorkerCommand& command,
    const std::string& cpp_program, const std::string& self_path,
    const std::string& self_hash_path) {
  WorkerProgram program;
  if (workers_run_this_program) {
    program.binary_path = self_path;
    ASSIGN_OR_RETURN(program.binary_hash, Sha256File(self_hash_path));
  } else if (!command.empty()) {
    std::string text;
    for (const auto& arg : command.argv) {
      absl::StrAppend(&text, arg.size(), ":", arg);
    }
    for (const auto& [k, v] : command.env) {
      absl::StrAppend(&text, k.size(), ":", k, v.size(), ":", v);
    }
    program.binary_hash = "command-" + Sha256Hex(text);
  }
  if (!cpp_program.empty()) {
    program.cpp_binary_path = std::filesystem::absolute(cpp_program).string();
  }
  return program;
}

absl::StatusOr<std::string> CppProgramHash(const std::string& path) {
  auto hash = Sha256File(path);
  if (!hash.ok()) {
    return TaskError(ErrorKind::kOther,
                     absl::StrCat("the C++ program ", path, " cannot be read: ",
                                  hash.status().message()));
  }
  return hash;
}

}  // namespace shoal::internal
