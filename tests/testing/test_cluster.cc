#include "tests/testing/test_cluster.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "accel/fake_host.h"
#include "common/clock.h"
#include "common/files.h"
#include "common/session.h"
#include "common/status_macros.h"
#include "shoal/api.h"

namespace shoal::testing {

std::vector<std::string> ProcessesMentioning(const std::string& text,
                                             const std::string& in) {
  std::vector<std::string> found;
  const std::string self = std::to_string(getpid());
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    std::string pid = entry.path().filename().string();
    if (pid == self ||
        pid.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    auto searched = ReadFile(entry.path().string() + "/" + in);
    if (!searched.ok()) continue;
    // Both files separate their strings with NULs.
    std::replace(searched->begin(), searched->end(), '\0', ' ');
    if (searched->find(text) == std::string::npos) continue;
    if (in == "cmdline") {
      found.push_back(absl::StrCat(pid, ": ", *searched));
      continue;
    }
    auto cmdline = ReadFile(entry.path().string() + "/cmdline");
    if (!cmdline.ok()) continue;
    std::replace(cmdline->begin(), cmdline->end(), '\0', ' ');
    found.push_back(absl::StrCat(pid, ": ", *cmdline));
  }
  return found;
}

int HoldPort(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 1) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

pid_t StartCli(const std::vector<std::string>& args, int* out_fd,
               const std::vector<std::string>& env, const std::string& netns,
               const std::vector<std::string>& hidden) {
  int netns_fd = -1;
  if (!netns.empty()) {
    netns_fd = open(("/run/netns/" + netns).c_str(), O_RDONLY | O_CLOEXEC);
    if (netns_fd < 0) return -1;
  }
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return -1;
  std::vector<std::string> argv_s = {SelfExecutable()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  pid_t pid = fork();
  if (pid == 0) {
    dup2(pipe_fds[1], 1);
    dup2(pipe_fds[1], 2);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    if (netns_fd >= 0 && setns(netns_fd, CLONE_NEWNET) != 0) _exit(126);
    if (!hidden.empty()) {
      // Mounts made here stay in this namespace: none reaches the host's.
      if (unshare(CLONE_NEWNS) != 0 ||
          mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
        _exit(125);
      }
      for (const std::string& dir : hidden) {
        if (mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=1m") != 0) _exit(125);
      }
    }
    setenv("SHOAL_ROLE", "cli", 1);
    for (const auto& e : env) putenv(strdup(e.c_str()));
    std::vector<char*> argv;
    for (auto& s : argv_s) argv.push_back(s.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(pipe_fds[1]);
  if (netns_fd >= 0) close(netns_fd);
  *out_fd = pipe_fds[0];
  return pid;
}

namespace {

// The pids of `root` and every process below it.
std::vector<pid_t> ProcessTree(pid_t root) {
  std::map<pid_t, std::vector<pid_t>> children;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    auto stat = ReadFile(entry.path().string() + "/stat");
    if (!stat.ok()) continue;
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    size_t close_paren = stat->rfind(')');
    if (close_paren == std::string::npos) continue;
    std::vector<std::string> fields =
        absl::StrSplit(stat->substr(close_paren + 2), ' ');
    pid_t ppid = 0;
    if (fields.size() > 1 && absl::SimpleAtoi(fields[1], &ppid)) {
      children[ppid].push_back(pid);
    }
  }
  std::vector<pid_t> tree = {root};
  for (size_t i = 0; i < tree.size(); ++i) {
    for (pid_t child : children[tree[i]]) tree.push_back(child);
  }
  return tree;
}

// What each thread of `pid` is doing, from gdb when the host has it.
std::string Stacks(pid_t pid) {
  if (access("/usr/bin/gdb", X_OK) != 0) return "(no /usr/bin/gdb for stacks)";
  std::string out;
  FILE* gdb = popen(absl::StrCat("timeout 60 /usr/bin/gdb -batch -nx -p ", pid,
                                 " -ex 'thread apply all bt 30' 2>&1")
                        .c_str(),
                    "r");
  if (gdb == nullptr) return "(cannot run gdb)";
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), gdb)) > 0) out.append(buf, n);
  pclose(gdb);
  return out;
}

}  // namespace

int FinishCli(pid_t pid, int out_fd, std::string* output) {
  // A command that does not end is a failure to report, with what it was
  // doing, well before ctest's own timeout ends the whole test binary
  // without a word.
  int64_t limit_s = 240;
  if (const char* v = getenv("SHOAL_TEST_CLI_TIMEOUT_S")) {
    absl::SimpleAtoi(v, &limit_s);
  }
  const int64_t deadline_us = MonotonicUs() + limit_s * 1000000;
  std::string out;
  char buf[4096];
  int status = 0;
  bool reaped = false;
  int64_t reaped_at_us = 0;
  for (;;) {
    if (!reaped && waitpid(pid, &status, WNOHANG) == pid) {
      reaped = true;
      reaped_at_us = MonotonicUs();
    }
    // What it left behind may hold the pipe open: its output ends a little
    // after it does.
    if (reaped && MonotonicUs() - reaped_at_us > 5000000) break;
    if (MonotonicUs() > deadline_us) {
      absl::StrAppend(&out, "\n[test harness: the command did not end within ",
                      limit_s, " s (SHOAL_TEST_CLI_TIMEOUT_S); killed]\n");
      std::vector<pid_t> tree = ProcessTree(pid);
      for (pid_t p : tree) {
        auto cmdline = ReadFile(absl::StrCat("/proc/", p, "/cmdline"));
        std::string cmd = cmdline.ok() ? *cmdline : "?";
        std::replace(cmd.begin(), cmd.end(), '\0', ' ');
        absl::StrAppend(&out, "--- pid ", p, ": ", cmd, "\n", Stacks(p), "\n");
      }
      for (pid_t p : tree) kill(p, SIGKILL);
      break;
    }
    pollfd pfd = {out_fd, POLLIN, 0};
    if (poll(&pfd, 1, 200) <= 0) continue;
    ssize_t n = read(out_fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (reaped) break;
      // The pipe ended before the process: wait for it a little more.
      if (waitpid(pid, &status, 0) == pid) reaped = true;
      break;
    }
    out.append(buf, n);
  }
  close(out_fd);
  if (!reaped) waitpid(pid, &status, 0);
  if (output) output->append(out);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int RunCli(const std::vector<std::string>& args, std::string* output,
           const std::vector<std::string>& env, const std::string& netns,
           const std::vector<std::string>& hidden) {
  if (output) output->clear();
  int fd = -1;
  pid_t pid = StartCli(args, &fd, env, netns, hidden);
  if (pid < 0) {
    if (output && !netns.empty()) *output = "cannot open /run/netns/" + netns;
    return -1;
  }
  int rc = FinishCli(pid, fd, output);
  if (rc == 125 && !hidden.empty() && output != nullptr) {
    output->append(
        "cannot hide folders from the command: a mount namespace with a "
        "tmpfs over each needs root (CAP_SYS_ADMIN)");
  }
  return rc;
}

absl::StatusOr<std::unique_ptr<TestCluster>> TestCluster::Start(
    const ClusterSpec& spec) {
  std::unique_ptr<TestCluster> owned(new TestCluster());
  TestCluster& c = *owned;
  c.spec_ = spec;
  char tmpl[] = "/tmp/shoal-test-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  c.root_ = tmpl;
  c.stopped_ = false;
  absl::Status head = c.StartNode(spec.nodes.at(0), /*head=*/true);
  if (!head.ok()) return head;
  std::string dir = c.session_dir(0);
  c.address_ = ReadSessionFile(dir, "cluster_address");
  c.token_ = ReadSessionFile(dir, "token");
  for (size_t i = 1; i < spec.nodes.size(); ++i) {
    absl::Status st = c.AddNode(spec.nodes[i]);
    if (!st.ok()) return st;
  }
  return owned;
}

namespace {

// A node on a fake TPU host made under `host_root`.
absl::StatusOr<NodeSpec> FakeTpuHostNode(
    const std::string& host_root, const accel::FakeTpuHostOptions& options,
    const std::string& node_id, const std::string& lockfile,
    double cpus_per_host) {
  std::map<std::string, std::string> env;
  absl::Status st = accel::MakeFakeTpuHost(host_root, options, &env);
  if (!st.ok()) return st;
  NodeSpec node{node_id, cpus_per_host, ""};
  node.env.push_back("SHOAL_DEVICE_ROOT=" + host_root);
  node.env.push_back("SHOAL_LIBTPU_LOCKFILE=" + lockfile);
  for (const auto& [name, value] : env) node.env.push_back(name + "=" + value);
  return node;
}

}  // namespace

absl::StatusOr<std::vector<NodeSpec>> FakeTpuSliceNodes(
    const std::string& root, const std::string& accelerator_type, int hosts,
    double cpus_per_host) {
  std::vector<NodeSpec> nodes;
  for (int worker = 0; worker < hosts; ++worker) {
    accel::FakeTpuHostOptions options;
    options.accelerator_type = accelerator_type;
    options.worker_id = worker;
    auto node = FakeTpuHostNode(absl::StrCat(root, "/host", worker), options,
                                absl::StrCat("tpu-", worker),
                                absl::StrCat(root, "/libtpu_lockfile-", worker),
                                cpus_per_host);
    if (!node.ok()) return node.status();
    nodes.push_back(*std::move(node));
  }
  return nodes;
}

absl::StatusOr<std::vector<NodeSpec>> FakeTpuSlicesNodes(
    const std::string& root, const std::string& accelerator_type, int slices,
    int hosts, double cpus_per_host) {
  std::vector<NodeSpec> nodes;
  for (int k = 0; k < slices; ++k) {
    for (int worker = 0; worker < hosts; ++worker) {
      const std::string host_root =
          absl::StrCat(root, "/slice-", k, "/host", worker);
      accel::FakeTpuHostOptions options;
      options.accelerator_type = accelerator_type;
      options.worker_id = worker;
      options.slice_name = absl::StrCat("slice-", k);
      auto node = FakeTpuHostNode(
          host_root, options, absl::StrCat("tpu-", k, "-", worker),
          host_root + "/libtpu_lockfile", cpus_per_host);
      if (!node.ok()) return node.status();
      nodes.push_back(*std::move(node));
    }
  }
  return nodes;
}

absl::StatusOr<std::unique_ptr<TestCluster>> TestCluster::StartFakeTpuSlice(
    const std::string& root, const std::string& accelerator_type, int hosts,
    double cpus_per_host) {
  auto nodes = FakeTpuSliceNodes(root, accelerator_type, hosts, cpus_per_host);
  if (!nodes.ok()) return nodes.status();
  ClusterSpec spec;
  spec.nodes = *nodes;
  return Start(spec);
}

void TestCluster::Connect() const {
  InitOptions options;
  options.address = address_;
  options.token = token_;
  Init(options);
}

TestCluster::~TestCluster() { Stop(); }

std::string TestCluster::temp_dir(size_t node) const {
  return absl::StrCat(root_, "/node", node);
}

std::string TestCluster::session_dir(size_t node) const {
  return temp_dir(node) + "/session_latest";
}

pid_t TestCluster::agent_pid(size_t node) const {
  int64_t pid = 0;
  (void)absl::SimpleAtoi(ReadSessionFile(session_dir(node), "agent.pid"), &pid);
  return static_cast<pid_t>(pid);
}

pid_t TestCluster::head_pid() const {
  int64_t pid = 0;
  (void)absl::SimpleAtoi(ReadSessionFile(session_dir(0), "head.pid"), &pid);
  return static_cast<pid_t>(pid);
}

absl::Status TestCluster::AddNode(const NodeSpec& node) {
  return StartNode(node, /*head=*/false);
}

void TestCluster::KillHead() {
  pid_t pid = head_pid();
  if (pid <= 0) return;
  kill(pid, SIGKILL);
  for (int i = 0; i < 500 && kill(pid, 0) == 0; ++i) usleep(10000);
}

absl::Status TestCluster::RestartHead() {
  return StartNode(spec_.nodes.at(0), /*head=*/true, /*index=*/0);
}

absl::Status TestCluster::StartNode(const NodeSpec& node, bool head,
                                    std::optional<size_t> index) {
  const size_t at = index.value_or(num_nodes_);
  std::vector<std::string> args = {"start"};
  if (head) {
    // Any free dashboard port: tests run clusters side by side.
    args.insert(args.end(), {"--head", "--port", "0", "--health-timeout-ms",
                             std::to_string(spec_.health_timeout_ms),
                             "--dashboard-port", "0"});
  } else {
    args.insert(args.end(), {"--address", address_, "--token", token_});
  }
  if (node.netns.empty() && !node.primary_address) {
    args.insert(args.end(), {"--node-ip-address", "127.0.0.1"});
  }
  args.insert(
      args.end(),
      {"--temp-dir", temp_dir(at), "--num-cpus", std::to_string(node.num_cpus),
       "--infeasible-grace-ms", std::to_string(spec_.infeasible_grace_ms)});
  if (!node.node_id.empty()) {
    args.push_back("--node-id");
    args.push_back(node.node_id);
  }
  if (node.object_store_memory != 0) {
    args.push_back("--object-store-memory");
    args.push_back(
        std::to_string(std::max<int64_t>(node.object_store_memory, 0)));
  }
  if (!node.resources_json.empty()) {
    args.push_back("--resources");
    args.push_back(node.resources_json);
  }
  args.insert(args.end(), node.extra_args.begin(), node.extra_args.end());
  std::vector<std::string> env = node.env;
  bool has_root = std::any_of(env.begin(), env.end(), [](const std::string& e) {
    return e.rfind("SHOAL_DEVICE_ROOT=", 0) == 0;
  });
  if (!node.host_devices && !has_root) {
    std::string empty = root_ + "/no-devices";
    RETURN_IF_ERROR(MakeDirs(empty));
    env.push_back("SHOAL_DEVICE_ROOT=" + empty);
  }
  std::string out;
  if (RunCli(args, &out, env, node.netns, node.hidden_paths) != 0) {
    return absl::InternalError(
        absl::StrCat(head ? "shoal start --head" : "shoal start --address",
                     " failed: ", out));
  }
  if (!index.has_value()) ++num_nodes_;
  return absl::OkStatus();
}

void TestCluster::KillAgent(size_t node) {
  pid_t pid = agent_pid(node);
  if (pid > 0) kill(pid, SIGKILL);
}

void TestCluster::ExportEnvironment() const {
  setenv("SHOAL_ADDRESS", address_.c_str(), 1);
  setenv("SHOAL_TOKEN", token_.c_str(), 1);
}

void TestCluster::Stop() {
  if (stopped_) return;
  stopped_ = true;
  std::error_code ec;
  for (size_t i = num_nodes_; i-- > 0;) {
    std::string out;
    RunCli({"stop", "--temp-dir", temp_dir(i)}, &out);
  }
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(root_, ec)) {
    if (entry.path().extension() != ".log") continue;
    auto text = ReadFile(entry.path().string());
    if (!text.ok()) continue;
    for (const char* marker : {"ERROR: AddressSanitizer",
                               "runtime error:", "ERROR: LeakSanitizer"}) {
      size_t at = text->find(marker);
      if (at != std::string::npos) {
        absl::StrAppend(&sanitizer_reports_, entry.path().string(), ":\n",
                        text->substr(at, 4000), "\n");
      }
    }
  }
  // SHOAL_TEST_KEEP=1 keeps the logs for a post-mortem.
  if (getenv("SHOAL_TEST_KEEP") == nullptr) {
    std::filesystem::remove_all(root_, ec);
  }
}

}  // namespace shoal::testing
