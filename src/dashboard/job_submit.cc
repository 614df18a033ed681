#include "dashboard/job_submit.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/process.h"

namespace shoal::dashboard {
namespace {

// `dir` packed as a .tar.gz in a temp file of its own; its path.
absl::StatusOr<std::string> PackWorkingDir(const std::string& dir) {
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the working dir ", dir, " is not a folder"));
  }
  absl::StatusOr<std::string> made = MakeTempFile("shoal-working-dir-");
  if (!made.ok()) return made.status();
  const std::string& archive = *made;
  absl::Status packed = RunToEnd({"tar", "-czf", archive, "-C", dir, "."});
  if (!packed.ok()) {
    unlink(archive.c_str());
    return absl::InternalError(absl::StrCat("cannot pack the working dir ", dir,
                                            ": ", packed.message()));
  }
  int64_t size = static_cast<int64_t>(std::filesystem::file_size(archive));
  if (size > kMaxWorkingDirBytes) {
    unlink(archive.c_str());
    return absl::InvalidArgumentError(absl::StrCat(
        "the working dir ", dir, " packs to ", size >> 20, " MiB, over the ",
        kMaxWorkingDirBytes >> 20,
        " MiB limit: leave data and build outputs out of it (read them from "
        "shared storage instead)"));
  }
  return archive;
}

}  // namespace

absl::Status AttachWorkingDir(rpc::HeadClient& head, const std::string& dir,
                              proto::JobSpec* spec) {
  absl::StatusOr<std::string> archive = PackWorkingDir(dir);
  if (!archive.ok()) return archive.status();
  absl::StatusOr<std::string> hash = Sha256File(*archive);
  absl::Status sent =
      hash.ok() ? head.UploadBlob(*archive, *hash) : hash.status();
  unlink(archive->c_str());
  if (!sent.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "cannot send the working dir to the head: ", sent.message()));
  }
  spec->set_working_dir_blob(*hash);
  return absl::OkStatus();
}

}  // namespace shoal::dashboard
