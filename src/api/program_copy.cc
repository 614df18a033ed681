#include "api/program_copy.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/process.h"
#include "common/util.h"
#include "rpc/head_client.h"

namespace shoal::internal {

bool NodesElsewhere(const proto::ClusterStatus& status,
                    const std::string& here) {
  for (const proto::NodeInfo& node : status.nodes()) {
    if (!node.alive()) continue;
    if (here.empty() || node.host_id() != here) return true;
  }
  return false;
}

bool RunsTheFileAt(const std::string& path) {
  struct stat named, running;
  return stat(path.c_str(), &named) == 0 &&
         stat("/proc/self/exe", &running) == 0 &&
         named.st_dev == running.st_dev && named.st_ino == running.st_ino;
}

absl::StatusOr<std::string> StripDebugInfo(const std::string& path) {
  std::string out =
      (std::filesystem::temp_directory_path() / "shoal-program-XXXXXX")
          .string();
  int fd = mkstemp(out.data());
  if (fd < 0) return absl::InternalError("cannot make a temp file");
  close(fd);
  SpawnOptions objcopy;
  objcopy.argv = {"objcopy", "--strip-debug", path, out};
  objcopy.log_path = out + ".log";
  absl::StatusOr<pid_t> pid = Spawn(objcopy);
  int status = 0;
  if (pid.ok()) {
    while (waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  std::string log = ReadFile(objcopy.log_path).value_or("");
  unlink(objcopy.log_path.c_str());
  if (!pid.ok() || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    unlink(out.c_str());
    return absl::UnavailableError(absl::StrCat(
        "objcopy --strip-debug ", path, " failed: ",
        pid.ok() ? DescribeWaitStatus(status) : pid.status().message(), " ",
        log));
  }
  return out;
}

absl::StatusOr<std::string> SendProgram(rpc::HeadClient& head,
                                        const std::string& path) {
  std::string copy = path;
  const char* debug = getenv("SHOAL_SEND_DEBUG_INFO");
  if (debug == nullptr || std::string_view(debug) != "1") {
    absl::StatusOr<std::string> stripped = StripDebugInfo(path);
    if (stripped.ok()) {
      copy = *stripped;
    } else {
      SHOAL_LOG(INFO) << "sending " << path << " with its debug info ("
                      << stripped.status().message() << ")";
    }
  }
  absl::StatusOr<std::string> hash = Sha256File(copy);
  absl::Status sent = hash.ok() ? head.UploadBlob(copy, *hash) : hash.status();
  if (copy != path) unlink(copy.c_str());
  if (!sent.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot send the program ", path,
                     " to the head (nodes of other hosts run it from there): ",
                     sent.message()));
  }
  return *hash;
}

}  // namespace shoal::internal
