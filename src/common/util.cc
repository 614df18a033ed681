#include "common/util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace shoal {

std::string RandomHex(int bytes) {
  std::string raw(bytes, '\0');
  size_t got = 0;
  while (got < raw.size()) {
    ssize_t n = getrandom(raw.data() + got, raw.size() - got, 0);
    if (n > 0) got += n;
  }
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes * 2);
  for (unsigned char c : raw) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

uint64_t RandomU64() {
  uint64_t v = 0;
  while (v == 0) {
    if (getrandom(&v, sizeof(v), 0) != sizeof(v)) v = 0;
  }
  return v;
}

int64_t JitteredMs(int64_t ms) {
  thread_local std::mt19937_64 rng(RandomU64());
  int64_t spread = std::max<int64_t>(1, ms / 10);
  std::uniform_int_distribution<int64_t> d(-spread, spread);
  return std::max<int64_t>(1, ms + d(rng));
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t MonotonicUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string Hostname() {
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

std::string HostId() {
  static const std::string id = [] {
    const char* named = getenv("SHOAL_HOST_ID");
    if (named != nullptr && named[0] != '\0') return std::string(named);
    std::string boot = ReadFile("/proc/sys/kernel/random/boot_id").value_or("");
    while (!boot.empty() && (boot.back() == '\n' || boot.back() == ' ')) {
      boot.pop_back();
    }
    struct stat root;
    if (boot.empty() || stat("/", &root) != 0) return std::string();
    return absl::StrCat(boot, ":", root.st_dev, ":", root.st_ino);
  }();
  return id;
}

namespace {

std::string DefaultRouteInterface() {
  std::ifstream in("/proc/net/route");
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::vector<std::string> f = absl::StrSplit(line, '\t', absl::SkipEmpty());
    if (f.size() > 2 && f[1] == "00000000") return f[0];
  }
  return "";
}

}  // namespace

std::string PrimaryIpAddress() {
  std::string route_iface = DefaultRouteInterface();
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "127.0.0.1";
  std::string first, routed;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    if ((a->ifa_flags & IFF_UP) == 0 || (a->ifa_flags & IFF_LOOPBACK)) continue;
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr,
              buf, sizeof(buf));
    if (first.empty()) first = buf;
    if (routed.empty() && route_iface == a->ifa_name) routed = buf;
  }
  freeifaddrs(list);
  if (!routed.empty()) return routed;
  if (!first.empty()) return first;
  return "127.0.0.1";
}

std::string InterfaceOf(const std::string& ip) {
  if (ip == "localhost") return "lo";
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string name;
  for (ifaddrs* a = list; a != nullptr && name.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr,
              buf, sizeof(buf));
    if (ip == buf) name = a->ifa_name;
  }
  freeifaddrs(list);
  // Any 127/8 address is served by the loopback interface.
  if (name.empty() && absl::StartsWith(ip, "127.")) name = "lo";
  return name;
}

bool IsLocalAddress(const std::string& ip) { return !InterfaceOf(ip).empty(); }

absl::Status SplitHostPort(const std::string& address, std::string* host,
                           int* port) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), port) || *port <= 0 ||
      *port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad address \"", address,
                     "\": expected HOST:PORT, e.g. 10.0.0.2:6379"));
  }
  *host = address.substr(0, colon);
  return absl::OkStatus();
}

absl::Status ResolveAddress(const std::string& address, sockaddr_in* out) {
  std::string host;
  int port = 0;
  if (absl::Status s = SplitHostPort(address, &host, &port); !s.ok()) return s;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc =
      getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", host, ": ", gai_strerror(rc)));
  }
  memcpy(out, res->ai_addr, sizeof(*out));
  freeaddrinfo(res);
  return absl::OkStatus();
}

void PrefaultForWrite(void* p, uint64_t size) {
  constexpr int kPopulateWrite = 23;  // MADV_POPULATE_WRITE, Linux 5.14
  const uintptr_t page = 4096;
  uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
  uintptr_t end = (reinterpret_cast<uintptr_t>(p) + size) & ~(page - 1);
  if (end > begin) {
    madvise(reinterpret_cast<void*>(begin), end - begin, kPopulateWrite);
  }
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", path, ": ", strerror(errno)));
  }
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

absl::Status WriteFile(const std::string& path, const std::string& contents,
                       int mode) {
  static std::atomic<uint64_t> writes{0};
  std::string tmp = absl::StrCat(path, ".tmp.", getpid(), ".", writes++);
  // Made afresh, so that it has `mode` less the process's umask: never more
  // open than asked, nor than the process allows. (One left by a killed
  // process of the same pid is replaced.)
  const int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;
  int fd = open(tmp.c_str(), flags, mode);
  if (fd < 0 && errno == EEXIST && unlink(tmp.c_str()) == 0) {
    fd = open(tmp.c_str(), flags, mode);
  }
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot write ", path, ": ", strerror(errno)));
  }
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      unlink(tmp.c_str());
      return absl::InternalError(
          absl::StrCat("cannot write ", path, ": ", strerror(err)));
    }
    done += n;
  }
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    unlink(tmp.c_str());
    return absl::InternalError(
        absl::StrCat("cannot rename ", tmp, ": ", strerror(err)));
  }
  return absl::OkStatus();
}

absl::Status MakeDirs(const std::string& path, int mode) {
  std::string partial;
  for (const auto& part : absl::StrSplit(path, '/')) {
    partial += std::string(part) + "/";
    if (part.empty()) continue;
    if (mkdir(partial.c_str(), mode) != 0 && errno != EEXIST) {
      return absl::InternalError(
          absl::StrCat("cannot create ", partial, ": ", strerror(errno)));
    }
  }
  return absl::OkStatus();
}

bool PathExists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

namespace {

// Ends the SHA-256 digest `ctx` (begun by StartSha256) and frees it; the
// digest in hex.
std::string FinishSha256(EVP_MD_CTX* ctx) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, digest, &len);
  EVP_MD_CTX_free(ctx);
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kDigits[digest[i] >> 4]);
    out.push_back(kDigits[digest[i] & 15]);
  }
  return out;
}

EVP_MD_CTX* StartSha256() {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  return ctx;
}

}  // namespace

absl::StatusOr<std::string> Sha256File(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", path, ": ", strerror(errno)));
  }
  EVP_MD_CTX* ctx = StartSha256();
  std::string buf(1 << 20, '\0');
  ssize_t n;
  while ((n = read(fd, buf.data(), buf.size())) > 0) {
    EVP_DigestUpdate(ctx, buf.data(), n);
  }
  close(fd);
  std::string digest = FinishSha256(ctx);
  if (n < 0) return absl::InternalError(absl::StrCat("cannot read ", path));
  return digest;
}

std::string Sha256Hex(std::string_view bytes) {
  EVP_MD_CTX* ctx = StartSha256();
  EVP_DigestUpdate(ctx, bytes.data(), bytes.size());
  return FinishSha256(ctx);
}

std::string SelfExecutable() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  buf[n] = 0;
  std::string path(buf);
  const std::string kDeleted = " (deleted)";
  if (absl::EndsWith(path, kDeleted))
    path.resize(path.size() - kDeleted.size());
  return path;
}

std::vector<int64_t> ProcessesHoldingFile(const std::string& path) {
  std::vector<int64_t> out;
  char resolved[4096];
  std::string target = realpath(path.c_str(), resolved) ? resolved : path;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return out;
  while (dirent* e = readdir(proc)) {
    int64_t pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    std::string fd_dir = absl::StrCat("/proc/", pid, "/fd");
    DIR* fds = opendir(fd_dir.c_str());
    if (fds == nullptr) continue;
    while (dirent* f = readdir(fds)) {
      char link[4096];
      ssize_t n = readlink(absl::StrCat(fd_dir, "/", f->d_name).c_str(), link,
                           sizeof(link) - 1);
      if (n <= 0) continue;
      link[n] = 0;
      if (target == link) {
        out.push_back(pid);
        break;
      }
    }
    closedir(fds);
  }
  closedir(proc);
  return out;
}

std::vector<int64_t> ProcessesWithEnvironment(const std::string& name,
                                              const std::string& value) {
  std::vector<int64_t> out;
  const std::string wanted = absl::StrCat(name, "=", value);
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return out;
  while (dirent* e = readdir(proc)) {
    int64_t pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    auto vars = ReadFile(absl::StrCat("/proc/", pid, "/environ"));
    if (!vars.ok()) continue;
    for (absl::string_view var : absl::StrSplit(*vars, '\0')) {
      if (var == wanted) {
        out.push_back(pid);
        break;
      }
    }
  }
  closedir(proc);
  return out;
}

bool ProcessAlive(int64_t pid) {
  // A value beyond pid_t (a corrupt pid file) would otherwise be truncated
  // into some other process's pid, e.g. 2^32 + 1 into init's.
  if (pid <= 0 || pid > std::numeric_limits<pid_t>::max()) return false;
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  // A zombie (exited, not yet reaped by its parent) is not alive.
  auto stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  if (!stat.ok()) return true;
  size_t paren = stat->rfind(')');
  return paren == std::string::npos || paren + 2 >= stat->size() ||
         (*stat)[paren + 2] != 'Z';
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) {
    return absl::StrCat("exited with code ", WEXITSTATUS(status));
  }
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char* name = strsignal(sig);
    return absl::StrCat("killed by signal ", sig, " (", name ? name : "?", ")");
  }
  return absl::StrCat("ended with wait status ", status);
}

}  // namespace shoal
