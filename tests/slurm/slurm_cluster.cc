#include "tests/slurm/slurm_cluster.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/files.h"

namespace shoal::testing {
namespace {

constexpr const char* kDaemons[] = {"munged", "slurmctld", "slurmscriptd",
                                    "slurmd", "slurmstepd"};

bool OnPath(const std::string& program) {
  for (const char* dir : {"/usr/sbin", "/usr/bin", "/sbin", "/bin"}) {
    if (access(absl::StrCat(dir, "/", program).c_str(), X_OK) == 0) {
      return true;
    }
  }
  return false;
}

std::string Comm(pid_t pid) {
  auto comm = ReadFile(absl::StrCat("/proc/", pid, "/comm"));
  return comm.ok() ? std::string(absl::StripTrailingAsciiWhitespace(*comm))
                   : "";
}

std::string Cmdline(pid_t pid) {
  auto cmdline = ReadFile(absl::StrCat("/proc/", pid, "/cmdline"));
  if (!cmdline.ok()) return "";
  for (char& c : *cmdline) {
    if (c == '\0') c = ' ';
  }
  return std::string(absl::StripTrailingAsciiWhitespace(*cmdline));
}

// `sh -c` of `shell` in `cwd`.
std::vector<std::string> Shell(const std::string& shell,
                               const std::string& cwd) {
  return {"/bin/sh", "-c",
          cwd.empty() ? shell : absl::StrCat("cd '", cwd, "' && ", shell)};
}

}  // namespace

std::string SlurmCluster::UnavailableReason() {
  std::string why = NetnsUnavailableReason();
  if (!why.empty()) return why;
  for (const char* program :
       {"munged", "slurmctld", "slurmd", "srun", "sbatch", "unshare"}) {
    if (!OnPath(program)) {
      return absl::StrCat(program,
                          " is missing (scripts/setup-deps installs slurm-wlm "
                          "and munge)");
    }
  }
  return "";
}

absl::StatusOr<std::unique_ptr<SlurmCluster>> SlurmCluster::Start(
    int num_hosts, const std::string& root_parent) {
  std::unique_ptr<SlurmCluster> c(new SlurmCluster());
  std::string pattern = root_parent + "/slurm-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError("mkdtemp failed under " + root_parent);
  }
  c->root_ = pattern;
  // munged wants its socket's folder reachable by everyone.
  chmod(c->root_.c_str(), 0755);
  auto net = HostNetwork::Create(num_hosts);
  if (!net.ok()) return net.status();
  c->net_ = std::move(*net);
  if (absl::Status st = c->WriteConfig(); !st.ok()) return st;
  if (absl::Status st = c->StartDaemons(); !st.ok()) return st;
  if (absl::Status st = c->AwaitIdle(); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat(st.message(), "\n", c->Logs()));
  }
  return c;
}

std::string SlurmCluster::node_name(int host) const {
  return absl::StrCat("node", host + 1);
}

absl::Status SlurmCluster::WriteConfig() {
  for (const char* dir : {"munge", "state", "spool", "log"}) {
    if (absl::Status st = MakeDirs(absl::StrCat(root_, "/", dir), 0755);
        !st.ok()) {
      return st;
    }
  }
  std::string key(1024, '\0');
  for (size_t i = 0; i < key.size(); ++i) {
    key[i] = static_cast<char>(std::rand() & 0xff);
  }
  if (absl::Status st = WriteFile(root_ + "/munge/munge.key", key, 0600);
      !st.ok()) {
    return st;
  }
  const std::string& r = root_;
  std::string conf = absl::StrCat(
      "ClusterName=shoaltest\n", "SlurmctldHost=", node_name(0), "(",
      net_->address(0), ")\n", "AuthType=auth/munge\nCredType=cred/munge\n",
      "AuthInfo=socket=", r, "/munge/sock\n",
      "SlurmUser=root\nSlurmdUser=root\n", "StateSaveLocation=", r, "/state\n",
      "SlurmdSpoolDir=", r, "/spool/%n\n", "SlurmctldPidFile=", r,
      "/slurmctld.pid\n", "SlurmdPidFile=", r, "/slurmd-%n.pid\n",
      "SlurmctldLogFile=", r, "/log/slurmctld.log\n", "SlurmdLogFile=", r,
      "/log/slurmd-%n.log\n",
      // Processes are tracked by parentage; no cgroup is needed.
      "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n",
      "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core_Memory\n",
      "SchedulerType=sched/backfill\nReturnToService=2\nMpiDefault=none\n",
      "JobAcctGatherType=jobacct_gather/none\n",
      "AccountingStorageType=accounting_storage/none\n",
      // The simulated hosts all see this machine's CPUs and memory.
      "SlurmdParameters=config_overrides\n",
      // scancel: SIGTERM, then SIGKILL 10 s later.
      "KillWait=10\nMinJobAge=5\nSlurmctldTimeout=30\nSlurmdTimeout=30\n",
      "InactiveLimit=0\n",
      // Two GPUs per node for --gres: stand-in device nodes (no cgroup
      // constrains devices here); Slurm numbers them from their names.
      "GresTypes=gpu\n");
  for (int i = 0; i < size(); ++i) {
    absl::StrAppend(&conf, "NodeName=", node_name(i),
                    " NodeAddr=", net_->address(i),
                    " CPUs=2 RealMemory=2000 Gres=gpu:2 State=UNKNOWN\n");
  }
  absl::StrAppend(&conf,
                  "PartitionName=debug Nodes=ALL Default=YES "
                  "MaxTime=INFINITE State=UP\n");
  if (absl::Status st = WriteFile(r + "/slurm.conf", conf, 0644); !st.ok()) {
    return st;
  }
  if (absl::Status st = MakeDirs(r + "/dev", 0755); !st.ok()) return st;
  for (int g = 0; g < 2; ++g) {
    // Character devices, as slurmd wants: copies of /dev/null's numbers.
    const std::string path = absl::StrCat(r, "/dev/nvidia", g);
    if (mknod(path.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) {
      return absl::InternalError("mknod " + path + " failed");
    }
  }
  if (absl::Status st = WriteFile(
          r + "/gres.conf",
          absl::StrCat("Name=gpu File=", r, "/dev/nvidia[0-1]\n"), 0644);
      !st.ok()) {
    return st;
  }
  // slurmd opens a cgroup plugin even with proctrack/linuxproc. A machine
  // that mounts cgroup v1 controllers under a tmpfs (with v2 beside them
  // in "unified") is one autodetection misreads: name the version.
  const char* plugin = "autodetect";
  if (PathExists("/sys/fs/cgroup/cgroup.controllers")) {
    plugin = "cgroup/v2";
  } else if (PathExists("/sys/fs/cgroup/memory")) {
    plugin = "cgroup/v1";
  }
  return WriteFile(r + "/cgroup.conf",
                   absl::StrCat("CgroupPlugin=", plugin, "\n"), 0644);
}

absl::Status SlurmCluster::StartDaemons() {
  const std::string& r = root_;
  auto start = [&](const std::string& netns, const std::string& hostname,
                   const std::string& command,
                   const std::string& log) -> absl::Status {
    // Output to a file: the daemon outlives the pipe StartInNetns gives.
    std::string shell = absl::StrCat(command, " >", log, " 2>&1");
    std::vector<std::string> argv =
        hostname.empty()
            ? Shell("exec " + shell, "")
            : std::vector<std::string>{
                  "unshare", "--uts", "/bin/sh", "-c",
                  absl::StrCat("hostname ", hostname, " && exec ", shell)};
    auto d = StartInNetns(netns, argv, {"SLURM_CONF=" + r + "/slurm.conf"});
    if (!d.ok()) return d.status();
    close(d->fd);
    d->fd = -1;
    daemons_.push_back(*d);
    return absl::OkStatus();
  };
  // In host 0, so that a test killed before its destructor leaves nothing
  // behind: the next run's HostNetwork::Create kills what the namespaces
  // of dead runs hold.
  absl::Status st =
      start(net_->netns(0), "",
            absl::StrCat("munged -F --force --socket=", r,
                         "/munge/sock --key-file=", r,
                         "/munge/munge.key --pid-file=", r,
                         "/munge/pid --seed-file=", r, "/munge/seed"),
            r + "/log/munged.out");
  if (!st.ok()) return st;
  for (int i = 0; i < 100 && !PathExists(r + "/munge/sock"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  st = start(net_->netns(0), node_name(0),
             absl::StrCat("slurmctld -D -f ", r, "/slurm.conf"),
             r + "/log/slurmctld.out");
  if (!st.ok()) return st;
  for (int i = 0; i < size(); ++i) {
    st = start(net_->netns(i), node_name(i),
               absl::StrCat("slurmd -D -f ", r, "/slurm.conf"),
               absl::StrCat(r, "/log/slurmd-", node_name(i), ".out"));
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status SlurmCluster::AwaitIdle() {
  const std::string want = absl::StrCat("idle ", size());
  std::string out;
  for (int i = 0; i < 300; ++i) {
    out.clear();
    if (Run("sinfo -h -o '%T %D'", &out) == 0 &&
        absl::StripAsciiWhitespace(out) == want) {
      return absl::OkStatus();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "the Slurm nodes did not all become idle in 30 s; sinfo: ", out));
}

SlurmCluster::~SlurmCluster() {
  for (auto it = daemons_.rbegin(); it != daemons_.rend(); ++it) {
    kill(it->pid, SIGTERM);
  }
  for (RunningCommand& d : daemons_) {
    std::string ignored;
    FinishCommand(d, &ignored);
  }
  net_.reset();  // kills what is left in the hosts
}

int SlurmCluster::Run(const std::string& shell, std::string* output,
                      const std::vector<std::string>& env,
                      const std::string& cwd) {
  auto command = StartRun(shell, env, cwd);
  if (!command.ok()) {
    absl::StrAppend(output, command.status().message());
    return -1;
  }
  return FinishCommand(*command, output);
}

absl::StatusOr<RunningCommand> SlurmCluster::StartRun(
    const std::string& shell, const std::vector<std::string>& env,
    const std::string& cwd) {
  std::vector<std::string> all = {"SLURM_CONF=" + root_ + "/slurm.conf"};
  all.insert(all.end(), env.begin(), env.end());
  return StartInNetns(net_->netns(0), Shell(shell, cwd), all);
}

std::vector<std::string> SlurmCluster::StrayProcesses(int host) const {
  std::vector<std::string> stray;
  for (pid_t pid : net_->Pids(host)) {
    const std::string comm = Comm(pid);
    bool daemon = false;
    for (const char* d : kDaemons) daemon |= comm == d;
    // The sh that set the host's name before exec'ing slurmd is gone; a
    // reader of /proc that races an exit sees "".
    if (!daemon && !comm.empty()) {
      stray.push_back(absl::StrCat(pid, " ", Cmdline(pid)));
    }
  }
  return stray;
}

std::string SlurmCluster::Logs() const {
  std::string logs;
  std::error_code ec;
  for (const auto& e :
       std::filesystem::directory_iterator(root_ + "/log", ec)) {
    auto text = ReadFile(e.path().string());
    if (!text.ok()) continue;
    absl::StrAppend(
        &logs, "== ", e.path().string(), "\n",
        text->size() > 3000 ? text->substr(text->size() - 3000) : *text, "\n");
  }
  return logs;
}

}  // namespace shoal::testing
