#include "api/program_copy.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/environment.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/process.h"
#include "head_client/head_client.h"

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
  absl::StatusOr<std::string> out = MakeTempFile("shoal-program-");
  if (!out.ok()) return out.status();
  absl::Status stripped = RunToEnd({"objcopy", "--strip-debug", path, *out});
  if (!stripped.ok()) {
    unlink(out->c_str());
    return stripped;
  }
  return out;
}

absl::StatusOr<std::string> SendProgram(rpc::HeadClient& head,
                                        const std::string& path) {
  std::string copy = path;
  if (!env::IsOn(env::Var::kSendDebugInfo)) {
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
