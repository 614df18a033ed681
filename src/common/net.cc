#include "common/net.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/environment.h"
#include "common/files.h"

namespace shoal {

std::string Hostname() {
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

std::string HostId() {
  static const std::string id = [] {
    if (std::optional<std::string> named = env::Find(env::Var::kHostId)) {
      return *named;
    }
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

}  // namespace shoal
