#include "cli/session_files.h"

#include <stdio.h>
#include <unistd.h>

#include <filesystem>
#include <utility>

#include "cli/host.h"
#include "common/session.h"

namespace shoal::cli {
namespace {

// What a head writes that names it as the running one.
constexpr const char* kHeadFiles[] = {"cluster_address", "head.pid",
                                      "dashboard_address"};

}  // namespace

std::string CrashedHeadSession(const std::string& temp_dir, Host& host) {
  std::string latest = temp_dir + "/session_latest";
  std::error_code ec;
  std::string dir = std::filesystem::canonical(latest, ec).string();
  if (ec) return "";
  auto exists = [&](const std::string& name) {
    return std::filesystem::exists(dir + "/" + name, ec);
  };
  // A program's embedded cluster (MarkSessionEmbedded) ended with it: it is
  // not a cluster to take up.
  if ((!exists("head.db") && !exists(kStorageFile)) || exists(kStoppedMarker) ||
      exists("embedded") ||
      (!exists("cluster_address") &&
       !exists(std::string("cluster_address") + kResumingSuffix)) ||
      host.LivePid(dir, "head") != 0) {
    return "";
  }
  return dir;
}

SessionResume::SessionResume(std::string dir) : dir_(std::move(dir)) {
  for (const char* file : kHeadFiles) {
    rename(Path(file).c_str(), (Path(file) + kResumingSuffix).c_str());
  }
}

std::string SessionResume::Address() const {
  std::string address = ReadSessionFile(dir_, "cluster_address");
  if (address.empty()) {
    address =
        ReadSessionFile(dir_, std::string("cluster_address") + kResumingSuffix);
  }
  return address;
}

void SessionResume::Restore() {
  for (const char* file : kHeadFiles) {
    rename((Path(file) + kResumingSuffix).c_str(), Path(file).c_str());
  }
}

void SessionResume::ForgetSetAside(const std::string& dir) {
  for (const char* file : kHeadFiles) {
    unlink((dir + "/" + file + kResumingSuffix).c_str());
  }
  const std::string storage = dir + "/" + kStorageFile;
  rename((storage + ".next").c_str(), storage.c_str());
}

}  // namespace shoal::cli
