#include "common/session.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/environment.h"
#include "common/files.h"
#include "common/net.h"
#include "common/process.h"
#include "common/status_macros.h"

namespace shoal {

std::string DefaultTempDir() { return env::Get(env::Var::kTempDir); }

absl::StatusOr<std::string> CreateSessionDir(const std::string& temp_dir,
                                             std::string* previous_latest) {
  if (absl::Status made = MakeDirs(temp_dir, 0700); !made.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(made.message(),
                     ". Pass --temp-dir (or set SHOAL_TEMP_DIR) to a folder "
                     "you may write in"));
  }
  time_t now = time(nullptr);
  tm local;
  localtime_r(&now, &local);
  char stamp[64];
  strftime(stamp, sizeof(stamp), "%Y-%m-%d_%H-%M-%S", &local);
  std::string name = absl::StrCat("session_", stamp, "_", getpid());
  // A process may start several sessions in one second (Init, Shutdown,
  // Init): each gets its own folder.
  for (int n = 1; PathExists(absl::StrCat(temp_dir, "/", name)); ++n) {
    name = absl::StrCat("session_", stamp, "_", getpid(), "-", n);
  }
  std::string dir = absl::StrCat(temp_dir, "/", name);
  // mkdir's mode, not chmod: the folder is never open to others, not even
  // for a moment.
  for (const std::string& d : {dir, dir + "/logs"}) {
    if (mkdir(d.c_str(), 0700) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot create ", d, ": ", strerror(errno),
          ". Pass --temp-dir (or set SHOAL_TEMP_DIR) to a folder you may "
          "write in"));
    }
  }
  std::string link = temp_dir + "/session_latest";
  if (previous_latest != nullptr) {
    std::error_code ec;
    *previous_latest = std::filesystem::read_symlink(link, ec).string();
  }
  std::string tmp_link = absl::StrCat(link, ".", getpid());
  unlink(tmp_link.c_str());
  if (symlink(name.c_str(), tmp_link.c_str()) == 0) {
    rename(tmp_link.c_str(), link.c_str());
  }
  return dir;
}

void AbandonSessionDir(const std::string& temp_dir,
                       const std::string& session_dir,
                       const std::string& previous_latest) {
  std::string link = temp_dir + "/session_latest";
  std::error_code ec;
  std::filesystem::path named = std::filesystem::read_symlink(link, ec);
  if (ec || named.filename() != std::filesystem::path(session_dir).filename()) {
    return;  // another start has moved it on since
  }
  if (previous_latest.empty()) {
    unlink(link.c_str());
    return;
  }
  std::string tmp_link = absl::StrCat(link, ".", getpid());
  unlink(tmp_link.c_str());
  if (symlink(previous_latest.c_str(), tmp_link.c_str()) == 0) {
    rename(tmp_link.c_str(), link.c_str());
  }
}

void KeepSessionPrivate(const std::string& session_dir) {
  auto strip = [](const std::filesystem::path& p) {
    struct stat st;
    if (lstat(p.c_str(), &st) == 0 && !S_ISLNK(st.st_mode) &&
        (st.st_mode & 077) != 0) {
      chmod(p.c_str(), st.st_mode & 07700);
    }
  };
  strip(session_dir);
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(session_dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator();
       it.increment(ec)) {
    strip(it->path());
  }
}

absl::Status CheckNodeId(const std::string& node_id, const std::string& flag) {
  bool ok = !node_id.empty() && node_id.size() <= 64 && node_id[0] != '.';
  for (char c : node_id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' &&
        c != '_' && c != '.') {
      ok = false;
    }
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      flag, " \"", absl::CHexEscape(node_id),
      "\" is not allowed: a node id names files of its node, so it is 1 to "
      "64 letters, digits, '-', '_' and '.', not starting with '.'"));
}

std::vector<std::string> ListSessionDirs(const std::string& temp_dir) {
  std::vector<std::string> out;
  DIR* d = opendir(temp_dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (absl::StartsWith(name, "session_") && name != "session_latest" &&
        name.find('.') == std::string::npos) {
      out.push_back(temp_dir + "/" + name);
    }
  }
  closedir(d);
  std::sort(out.rbegin(), out.rend());
  return out;
}

std::string ReadSessionFile(const std::string& session_dir,
                            const std::string& name) {
  auto text = ReadFile(session_dir + "/" + name);
  if (!text.ok()) return "";
  return std::string(absl::StripAsciiWhitespace(*text));
}

int64_t LivePid(const std::string& session_dir, const std::string& name) {
  int64_t pid = 0;
  if (!absl::SimpleAtoi(ReadSessionFile(session_dir, name + ".pid"), &pid)) {
    return 0;
  }
  return ProcessAlive(pid) ? pid : 0;
}

void MarkSessionEmbedded(const std::string& session_dir) {
  WriteFile(session_dir + "/embedded", "started by a program's shoal::Init()")
      .IgnoreError();
}

LocalCluster FindLocalCluster(const std::string& temp_dir) {
  for (const std::string& dir : ListSessionDirs(temp_dir)) {
    if (PathExists(dir + "/embedded")) continue;
    if (LivePid(dir, "head") == 0 && LivePid(dir, "agent") == 0) continue;
    LocalCluster c;
    c.session_dir = dir;
    c.head_address = ReadSessionFile(dir, "cluster_address");
    c.token = ReadSessionFile(dir, "token");
    if (!c.head_address.empty()) return c;
  }
  return {};
}

namespace {

// Whether two HOST:PORT addresses reach the same listener from this host:
// equal, or the same port on two addresses of this host (a head answers on
// 127.0.0.1 as well as on the address it advertises).
bool SameListener(const std::string& a, const std::string& b) {
  if (a == b) return true;
  std::string host_a, host_b;
  int port_a = 0, port_b = 0;
  if (!SplitHostPort(a, &host_a, &port_a).ok() ||
      !SplitHostPort(b, &host_b, &port_b).ok() || port_a != port_b) {
    return false;
  }
  auto local = [](const std::string& host) {
    return host == "localhost" || absl::StartsWith(host, "127.") ||
           IsLocalAddress(host);
  };
  return local(host_a) && local(host_b);
}

}  // namespace

absl::Status ResolveClusterAddress(const std::string& temp_dir,
                                   std::string* address, std::string* token) {
  if (address->empty()) *address = env::Get(env::Var::kAddress);
  if (token->empty()) *token = env::Get(env::Var::kToken);
  LocalCluster local = FindLocalCluster(temp_dir);
  if (address->empty()) {
    if (local.head_address.empty()) {
      return absl::NotFoundError(absl::StrCat(
          "no cluster to talk to: pass --address HOST:PORT, set "
          "SHOAL_ADDRESS, or start one here with `shoal start --head` (none "
          "is running from ",
          temp_dir, ")"));
    }
    *address = local.head_address;
  }
  std::string host;
  int port = 0;
  RETURN_IF_ERROR(SplitHostPort(*address, &host, &port));
  if (!token->empty()) return absl::OkStatus();
  if (!local.head_address.empty() &&
      SameListener(local.head_address, *address)) {
    *token = local.token;
    return absl::OkStatus();
  }
  // A cluster started or joined from this host, whatever its temp dir (the
  // live ones first), or an earlier session of a head at that address.
  std::vector<std::string> temp_dirs = {temp_dir};
  for (const std::string& td : {DefaultTempDir(), std::string("/tmp/shoal")}) {
    if (std::find(temp_dirs.begin(), temp_dirs.end(), td) == temp_dirs.end()) {
      temp_dirs.push_back(td);
    }
  }
  for (bool live : {true, false}) {
    for (const std::string& td : temp_dirs) {
      for (const std::string& dir : ListSessionDirs(td)) {
        bool alive = LivePid(dir, "head") != 0 || LivePid(dir, "agent") != 0;
        if (alive != live) continue;
        if (!SameListener(ReadSessionFile(dir, "cluster_address"), *address)) {
          continue;
        }
        *token = ReadSessionFile(dir, "token");
        if (!token->empty()) return absl::OkStatus();
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace shoal
