#include "tests/system/netns.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/files.h"

namespace shoal::testing {
namespace {

constexpr char kPrefix[] = "shoal-sys-";

// `ip ARGS...` in the root namespace; its output, or an error naming the
// command and what it said.
absl::StatusOr<std::string> Ip(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"ip"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string out;
  int rc = RunInNetns("", argv, &out);
  if (rc != 0) {
    std::string command;
    for (const auto& a : argv) absl::StrAppend(&command, " ", a);
    return absl::InternalError(
        absl::StrCat("`", absl::StripLeadingAsciiWhitespace(command),
                     "` failed (exit ", rc, "): ", out));
  }
  return out;
}

std::vector<pid_t> NetnsPids(const std::string& netns) {
  std::vector<pid_t> pids;
  auto out = Ip({"netns", "pids", netns});
  if (!out.ok()) return pids;
  for (absl::string_view line : absl::StrSplit(*out, '\n')) {
    int pid = 0;
    if (absl::SimpleAtoi(line, &pid) && pid > 0) pids.push_back(pid);
  }
  return pids;
}

void KillNetnsProcesses(const std::string& netns) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    std::vector<pid_t> pids = NetnsPids(netns);
    if (pids.empty()) return;
    for (pid_t pid : pids) kill(pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void DeleteNetns(const std::string& netns) {
  KillNetnsProcesses(netns);
  (void)Ip({"netns", "delete", netns});
}

// Namespaces `shoal-sys-<pid>-...` whose pid is no longer alive were left by
// a test that crashed or was killed before its destructor ran.
void SweepDeadRuns() {
  std::error_code ec;
  for (const auto& entry :
       std::filesystem::directory_iterator("/run/netns", ec)) {
    std::string name = entry.path().filename().string();
    absl::string_view rest = name;
    if (!absl::ConsumePrefix(&rest, kPrefix)) continue;
    int pid = 0;
    if (!absl::SimpleAtoi(rest.substr(0, rest.find('-')), &pid)) continue;
    if (pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH)) DeleteNetns(name);
  }
}

}  // namespace

absl::StatusOr<RunningCommand> StartInNetns(
    const std::string& netns, const std::vector<std::string>& argv,
    const std::vector<std::string>& env) {
  if (argv.empty()) return absl::InvalidArgumentError("no command");
  // Everything the child needs is prepared before fork(): after it, only
  // async-signal-safe calls.
  int netns_fd = -1;
  if (!netns.empty()) {
    netns_fd = open(("/run/netns/" + netns).c_str(), O_RDONLY | O_CLOEXEC);
    if (netns_fd < 0) {
      return absl::NotFoundError(absl::StrCat("cannot open /run/netns/", netns,
                                              ": ", strerror(errno)));
    }
  }
  std::vector<std::string> env_copy = env;
  std::vector<std::string> argv_copy = argv;
  std::vector<char*> c_argv;
  for (auto& s : argv_copy) c_argv.push_back(s.data());
  c_argv.push_back(nullptr);
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    if (netns_fd >= 0) close(netns_fd);
    return absl::InternalError("pipe failed");
  }
  pid_t pid = fork();
  if (pid == 0) {
    dup2(pipe_fds[1], 1);
    dup2(pipe_fds[1], 2);
    if (netns_fd >= 0 && setns(netns_fd, CLONE_NEWNET) != 0) _exit(126);
    for (auto& e : env_copy) putenv(e.data());
    execvp(c_argv[0], c_argv.data());
    _exit(127);
  }
  close(pipe_fds[1]);
  if (netns_fd >= 0) close(netns_fd);
  if (pid < 0) {
    close(pipe_fds[0]);
    return absl::InternalError("fork failed");
  }
  return RunningCommand{pid, pipe_fds[0]};
}

int FinishCommand(RunningCommand& command, std::string* output) {
  char buf[4096];
  ssize_t n;
  while ((n = read(command.fd, buf, sizeof(buf))) > 0 ||
         (n < 0 && errno == EINTR)) {
    if (n > 0 && output != nullptr) output->append(buf, n);
  }
  close(command.fd);
  command.fd = -1;
  int status = 0;
  while (waitpid(command.pid, &status, 0) < 0 && errno == EINTR) {
  }
  command.pid = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int RunInNetns(const std::string& netns, const std::vector<std::string>& argv,
               std::string* output, const std::vector<std::string>& env) {
  auto command = StartInNetns(netns, argv, env);
  if (!command.ok()) {
    if (output != nullptr) *output = std::string(command.status().message());
    return -1;
  }
  if (output != nullptr) output->clear();
  return FinishCommand(*command, output);
}

std::string NetnsUnavailableReason() {
  if (geteuid() != 0) {
    return "not running as root (network namespaces need CAP_SYS_ADMIN and "
           "CAP_NET_ADMIN); run as root to include the system tier";
  }
  std::string probe = absl::StrCat(kPrefix, getpid(), "-probe");
  auto added = Ip({"netns", "add", probe});
  if (!added.ok()) {
    return absl::StrCat("cannot create a network namespace: ",
                        added.status().message());
  }
  DeleteNetns(probe);
  return "";
}

absl::StatusOr<std::unique_ptr<HostNetwork>> HostNetwork::Create(
    int num_hosts) {
  static std::atomic<int> next_run{0};
  int run = next_run++;
  SweepDeadRuns();
  std::unique_ptr<HostNetwork> net(new HostNetwork());
  std::string base = absl::StrCat(kPrefix, getpid(), "-", run);
  // Each run has its own switch, so its subnet never meets another's; the
  // pid still goes into it so that logs of concurrent runs read apart.
  std::string subnet =
      absl::StrCat("10.", 100 + run % 100, ".", getpid() % 250, ".");
  net->switch_netns_ = base + "-switch";
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"netns", "add", net->switch_netns_},
           {"-n", net->switch_netns_, "link", "set", "lo", "up"},
           {"-n", net->switch_netns_, "link", "add", "br0", "type", "bridge"},
           {"-n", net->switch_netns_, "link", "set", "br0", "up"}}) {
    auto out = Ip(args);
    if (!out.ok()) return out.status();
  }
  for (int i = 0; i < num_hosts; ++i) {
    net->hosts_.push_back({absl::StrCat(base, "-host", i),
                           absl::StrCat(subnet, i + 1),
                           absl::StrCat("port", i)});
    absl::Status st = net->AddHost(i, subnet);
    if (!st.ok()) return st;
  }
  return net;
}

absl::Status HostNetwork::AddHost(int index, const std::string& subnet) {
  const Host& h = hosts_[index];
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"netns", "add", h.netns},
           {"-n", h.netns, "link", "set", "lo", "up"},
           {"-n", switch_netns_, "link", "add", h.port, "type", "veth", "peer",
            "name", "eth0", "netns", h.netns},
           {"-n", switch_netns_, "link", "set", h.port, "master", "br0", "up"},
           {"-n", h.netns, "addr", "add", h.address + "/24", "dev", "eth0"},
           {"-n", h.netns, "link", "set", "eth0", "up"}}) {
    auto out = Ip(args);
    if (!out.ok()) return out.status();
  }
  return absl::OkStatus();
}

HostNetwork::~HostNetwork() {
  for (const Host& h : hosts_) DeleteNetns(h.netns);
  if (!switch_netns_.empty()) DeleteNetns(switch_netns_);
}

std::vector<pid_t> HostNetwork::Pids(int host) const {
  return NetnsPids(netns(host));
}

std::vector<pid_t> HostNetwork::PidsMatching(int host,
                                             const std::string& marker) const {
  std::vector<pid_t> matching;
  for (pid_t pid : Pids(host)) {
    auto cmdline = ReadFile(absl::StrCat("/proc/", pid, "/cmdline"));
    if (!cmdline.ok()) continue;
    for (char& c : *cmdline) {
      if (c == '\0') c = ' ';
    }
    if (cmdline->find(marker) != std::string::npos) matching.push_back(pid);
  }
  return matching;
}

void HostNetwork::KillAll(int host) { KillNetnsProcesses(netns(host)); }

absl::Status HostNetwork::Disconnect(int host) {
  return Ip({"-n", switch_netns_, "link", "delete", hosts_.at(host).port})
      .status();
}

}  // namespace shoal::testing
