// session_file: the files of a session folder that `shoal` and
// shoal::Init() read to find a cluster (common/session.h): cluster_address,
// token, node_id, head.pid, agent.pid, agent_address, dashboard_address.
//
// Input: byte 0 holds flags: bit 0, head.pid holds this process's pid (so
// that the session counts as live) instead of its field; bit 1, the session
// is marked as a program's own (embedded); bit 2, an older session with
// the same files sits beside it. The rest is the files' contents, in the
// order of kFiles, separated by NUL bytes; a file without a field is not
// written. The session folders live in a temp dir of this process
// (/dev/shm/shoal-session-fuzz-*, else under /tmp).
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/files.h"
#include "common/net.h"
#include "common/session.h"
#include "fuzz/fuzz_targets.h"

namespace shoal::fuzz {
namespace {

constexpr const char* kFiles[] = {
    "cluster_address", "token",         "node_id",          "head.pid",
    "agent.pid",       "agent_address", "dashboard_address"};
constexpr int kHeadPidFile = 3;
// The newer (the one the flags describe) and the older session.
constexpr const char* kNewer = "session_2038-01-01_00-00-00_2";
constexpr const char* kOlder = "session_2000-01-01_00-00-00_1";

void RemoveTree(const std::string& path) {
  if (DIR* d = opendir(path.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      RemoveTree(path + "/" + name);
    }
    closedir(d);
    rmdir(path.c_str());
  } else {
    unlink(path.c_str());
  }
}

// This process's temp dir, removed at exit.
const std::string& TempDir() {
  static const std::string* dir = [] {
    // The harness reads only its own temp dir: a cluster running on this
    // host is never found through these variables.
    unsetenv("SHOAL_ADDRESS");
    unsetenv("SHOAL_TOKEN");
    // In memory where there is a tmpfs: each input writes a dozen files.
    std::string base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    // Named by pid: libFuzzer ends a timed run without running atexit
    // handlers, and scripts/fuzz then removes what this pid left.
    std::string pattern =
        base + "/shoal-session-fuzz-" + std::to_string(getpid()) + "-XXXXXX";
    SHOAL_FUZZ_CHECK(mkdtemp(pattern.data()) != nullptr);
    auto* d = new std::string(pattern);
    std::atexit([] { RemoveTree(TempDir()); });
    return d;
  }();
  return *dir;
}

// Removes the sessions of the last input (a tree walk per input would cost
// more than the code under test).
void RemoveSessions(const std::string& temp_dir) {
  for (const char* session : {kNewer, kOlder}) {
    const std::string dir = temp_dir + "/" + session;
    for (const char* name : kFiles) unlink((dir + "/" + name).c_str());
    unlink((dir + "/embedded").c_str());
    rmdir(dir.c_str());
  }
}

void WriteBytes(const std::string& path, absl::string_view bytes) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  SHOAL_FUZZ_CHECK(fd >= 0);
  SHOAL_FUZZ_CHECK(write(fd, bytes.data(), bytes.size()) ==
                   static_cast<ssize_t>(bytes.size()));
  close(fd);
}

void WriteSession(const std::string& dir,
                  const std::vector<absl::string_view>& fields, bool live,
                  bool embedded) {
  SHOAL_FUZZ_CHECK(mkdir(dir.c_str(), 0755) == 0);
  for (size_t i = 0; i < std::size(kFiles); ++i) {
    const std::string path = dir + "/" + kFiles[i];
    if (i == kHeadPidFile && live) {
      WriteBytes(path, std::to_string(getpid()));
    } else if (i < fields.size()) {
      WriteBytes(path, fields[i]);
    }
  }
  if (embedded) MarkSessionEmbedded(dir);
}

}  // namespace

int FuzzSessionFile(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool live = (data[0] & 1) != 0;
  const bool embedded = (data[0] & 2) != 0;
  const bool older = (data[0] & 4) != 0;
  std::vector<absl::string_view> fields = absl::StrSplit(
      absl::string_view(reinterpret_cast<const char*>(data) + 1, size - 1),
      '\0');

  const std::string& temp_dir = TempDir();
  RemoveSessions(temp_dir);
  if (older) {
    WriteSession(temp_dir + "/" + kOlder, fields, /*live=*/false,
                 /*embedded=*/false);
  }
  WriteSession(temp_dir + "/" + kNewer, fields, live, embedded);

  // What `shoal status`, `shoal stop` and shoal::Init() read.
  std::vector<std::string> sessions = ListSessionDirs(temp_dir);
  SHOAL_FUZZ_CHECK(sessions.size() == (older ? 2u : 1u));
  for (const std::string& dir : sessions) {
    for (const char* name : kFiles) {
      std::string value = ReadSessionFile(dir, name);
      std::string host;
      int port = 0;
      if (SplitHostPort(value, &host, &port).ok()) {
        SHOAL_FUZZ_CHECK(port > 0 && port <= 65535);
      }
    }
    int64_t head = LivePid(dir, "head");
    int64_t agent = LivePid(dir, "agent");
    SHOAL_FUZZ_CHECK(head >= 0 && agent >= 0);
  }
  LocalCluster local = FindLocalCluster(temp_dir);
  if (!local.head_address.empty()) {
    // A cluster a program started for itself is never joined.
    SHOAL_FUZZ_CHECK(!PathExists(local.session_dir + "/embedded"));
    SHOAL_FUZZ_CHECK(local.head_address ==
                     ReadSessionFile(local.session_dir, "cluster_address"));
  }
  // With no address given, the cluster found here (and its token).
  std::string address, token;
  absl::Status resolved = ResolveClusterAddress(temp_dir, &address, &token);
  if (resolved.ok()) {
    SHOAL_FUZZ_CHECK(address == local.head_address);
    SHOAL_FUZZ_CHECK(token == local.token);
  }
  return 0;
}

std::vector<Seed> SessionFileSeeds() {
  using namespace std::string_literals;
  return {
      {"live_head",
       "\x01"
       "10.0.0.2:6379\0"
       "3f2a9c\0"
       "n1\0"
       "\0"
       "\0"
       "10.0.0.2:40121\0"
       "10.0.0.2:8265"s},
      {"live_older",
       "\x05"
       "127.0.0.1:6379\n\0"
       "  token-with-space  \n\0"
       "n2"s},
      {"embedded",
       "\x03"
       "127.0.0.1:6379\0"
       "t"s},
      {"bad_address",
       "\x01"
       "10.0.0.2\0"
       "t"s},
      {"port_out_of_range",
       "\x01"
       "host:70000\0"
       "t"s},
      {"pid_files",
       "\x00"
       "10.0.0.2:6379\0"
       "t\0"
       "n1\0"
       "99999999999\0"
       "-1"s},
      {"empty", "\x01"s},
  };
}

}  // namespace shoal::fuzz
