#include "cli/symmetric_run_command.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <functional>
#include <ostream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "cli/cluster_api.h"
#include "cli/context.h"
#include "cli/exit_status.h"
#include "cli/flag_checks.h"
#include "common/clock.h"
#include "common/environment.h"
#include "common/files.h"
#include "common/process.h"
#include "common/random.h"
#include "common/session.h"
#include "common/status_macros.h"

namespace shoal::cli::symmetric_run {
namespace {

// Files of the job's folder (shared by the step's nodes).
constexpr char kTokenFile[] = "token";           // 0600, made by node 0
constexpr char kAddressFile[] = "head_address";  // once the head is up
constexpr char kExitFile[] = "exit";  // the program's exit code: stop now

std::string NodeFile(const std::string& dir, const char* what, int node) {
  return absl::StrCat(dir, "/", what, "-", node);
}

// What a wait ended on.
enum class Woken { kDone, kSignal, kTimeout };

// Polls `done` every `every_ms` until it holds, SIGTERM or SIGINT arrives
// (blocked by the caller; *signal says which), or `timeout_ms` passes (< 0:
// never).
Woken WaitUntil(const std::function<bool()>& done, int64_t timeout_ms,
                int every_ms, int* signal) {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  const int64_t deadline = MonotonicUs() / 1000 + timeout_ms;
  while (true) {
    if (done()) return Woken::kDone;
    if (timeout_ms >= 0 && MonotonicUs() / 1000 >= deadline) {
      return Woken::kTimeout;
    }
    timespec wait = {0, every_ms * 1000000L};
    const int got = sigtimedwait(&stop, nullptr, &wait);
    if (got > 0) {
      *signal = got;
      return Woken::kSignal;
    }
  }
}

// The child's wait status once it has ended (reaped here), else nullopt.
std::optional<int> Ended(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, WNOHANG) == pid) return status;
  return std::nullopt;
}

int ExitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// SIGTERM to the program's process group, SIGKILL after `grace_ms`.
int StopGroup(pid_t leader, int grace_ms) {
  kill(-leader, SIGTERM);
  int signal = 0;
  std::optional<int> status;
  WaitUntil([&] { return (status = Ended(leader)).has_value(); }, grace_ms, 20,
            &signal);
  if (!status) {
    kill(-leader, SIGKILL);
    int s = 0;
    waitpid(leader, &s, 0);
    status = s;
  }
  kill(-leader, SIGKILL);  // what the leader left in its group
  return ExitCodeOf(*status);
}

// One node's part of the run.
class NodeRun {
 public:
  NodeRun(NodePlan plan, Context& ctx) : plan_(std::move(plan)), ctx_(ctx) {}

  absl::StatusOr<int> Run() {
    RETURN_IF_ERROR(MakeDirs(plan_.job_dir, 0700));
    RETURN_IF_ERROR(ClaimNode());
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    absl::StatusOr<int> code = plan_.head ? RunHead() : RunAgent();
    if (plan_.head && !ExitFileExists()) {
      // The others stop too, whatever ended this run.
      WriteFile(absl::StrCat(plan_.job_dir, "/", kExitFile),
                code.ok() ? absl::StrCat(*code, "\n") : "failed\n", 0600)
          .IgnoreError();
    }
    Stop();
    if (plan_.head) RemoveJobDir();
    return code;
  }

 private:
  absl::Status ClaimNode() {
    const std::string path = NodeFile(plan_.job_dir, "node", plan_.node_index);
    const int fd = open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
    if (fd < 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "another task of this step already runs on node ", plan_.node_index,
          " (", path,
          " exists): run one task per node, srun --ntasks-per-node=1"));
    }
    close(fd);
    return absl::OkStatus();
  }

  absl::StatusOr<int> RunHead() {
    token_ = RandomHex(32);
    RETURN_IF_ERROR(
        WriteFile(absl::StrCat(plan_.job_dir, "/", kTokenFile), token_, 0600));
    std::vector<std::string> args = plan_.start_args;
    RETURN_IF_ERROR(StartNode(args).status());
    if (signal_) return 128 + signal_;
    // Where every command finds a cluster started here: its session.
    address_ = FindLocalCluster(plan_.temp_dir).head_address;
    if (address_.empty()) {
      return absl::InternalError(
          absl::StrCat("the head started but its session in ", plan_.temp_dir,
                       " names no address"));
    }
    RETURN_IF_ERROR(WriteFile(absl::StrCat(plan_.job_dir, "/", kAddressFile),
                              address_, 0600));
    RETURN_IF_ERROR(AwaitNodes());
    if (signal_) return 128 + signal_;
    *ctx_.err << "shoal symmetric-run: " << plan_.min_nodes
              << " nodes joined the head at " << address_ << "; running "
              << absl::StrJoin(plan_.program, " ") << "\n";
    ctx_.err->flush();
    return RunProgram();
  }

  absl::StatusOr<int> RunAgent() {
    const std::string address_file =
        absl::StrCat(plan_.job_dir, "/", kAddressFile);
    Woken w =
        WaitUntil([&] { return PathExists(address_file) || ExitFileExists(); },
                  int64_t{plan_.wait_s} * 1000, 10, &signal_);
    if (w == Woken::kSignal) return 128 + signal_;
    if (w == Woken::kTimeout) {
      return absl::DeadlineExceededError(absl::StrCat(
          "no head address in ", plan_.job_dir, " after ", plan_.wait_s,
          " s: node 0 (", plan_.head_host,
          ") did not start the head (see its output), or ", plan_.job_dir,
          " is not on storage every node sees (give --job-dir on a shared "
          "filesystem)"));
    }
    if (ExitFileExists()) return 0;  // the run ended before this node came
    ASSIGN_OR_RETURN(address_, ReadFile(address_file));
    address_ = std::string(absl::StripAsciiWhitespace(address_));
    std::vector<std::string> args = plan_.start_args;
    args.insert(args.begin() + 2, {"--address", address_});
    absl::StatusOr<std::string> started = StartNode(args);
    if (!started.ok()) return started.status();
    if (signal_) return 128 + signal_;
    std::optional<int> died;
    w = WaitUntil(
        [&] {
          return ExitFileExists() || (died = Ended(start_pid_)).has_value();
        },
        -1, 100, &signal_);
    if (w == Woken::kSignal) return 128 + signal_;
    if (died) {
      start_pid_ = 0;
      return absl::UnavailableError(
          absl::StrCat("this node's agent ", DescribeWaitStatus(*died),
                       "; see ", plan_.temp_dir, "/symmetric-run.log"));
    }
    return 0;
  }

  bool ExitFileExists() const {
    return PathExists(absl::StrCat(plan_.job_dir, "/", kExitFile));
  }

  // Runs `shoal start ... --block` in the background, its output in this
  // node's folder, until it reports the node up; its report.
  absl::StatusOr<std::string> StartNode(std::vector<std::string> args) {
    RETURN_IF_ERROR(MakeDirs(plan_.temp_dir, 0700));
    const std::string log = plan_.temp_dir + "/symmetric-run.log";
    args.push_back("--token-file");
    args.push_back(absl::StrCat(plan_.job_dir, "/", kTokenFile));
    SpawnOptions spawn;
    spawn.argv = std::move(args);
    spawn.log_path = log;
    // Killed with this process, it still stops what it started.
    spawn.parent_death_signal = SIGTERM;
    ASSIGN_OR_RETURN(start_pid_, Spawn(spawn));
    std::string report;
    std::optional<int> died;
    const Woken w = WaitUntil(
        [&] {
          report = ReadFile(log).value_or("");
          if (report.find(" started") != std::string::npos) return true;
          return (died = Ended(start_pid_)).has_value();
        },
        int64_t{plan_.wait_s} * 1000, 10, &signal_);
    if (died) {
      start_pid_ = 0;
      return absl::UnavailableError(
          absl::StrCat("shoal start ", DescribeWaitStatus(*died), ":\n",
                       report.substr(0, 4000)));
    }
    if (w == Woken::kTimeout) {
      return absl::DeadlineExceededError(absl::StrCat(
          "this node did not start within ", plan_.wait_s, " s; see ", log));
    }
    return report;
  }

  // Until --min-nodes are alive in the cluster.
  absl::Status AwaitNodes() {
    ASSIGN_OR_RETURN(std::unique_ptr<ClusterApi> api,
                     ctx_.connect(address_, token_));
    std::string joined;
    int alive = 0;
    const Woken w = WaitUntil(
        [&] {
          auto status = api->ClusterStatus(2000);
          if (!status.ok()) return false;
          alive = 0;
          std::vector<std::string> names;
          for (const auto& n : status->nodes()) {
            if (!n.alive()) continue;
            ++alive;
            names.push_back(n.hostname());
          }
          joined = absl::StrJoin(names, ", ");
          return alive >= plan_.min_nodes;
        },
        int64_t{plan_.wait_s} * 1000, 20, &signal_);
    if (w == Woken::kTimeout) {
      return absl::DeadlineExceededError(absl::StrCat(
          alive, " of --min-nodes=", plan_.min_nodes, " nodes joined within ",
          plan_.wait_s, " s (", joined.empty() ? "none" : joined,
          "); the others' output says why"));
    }
    return absl::OkStatus();
  }

  // The program, in its own process group, with the cluster's address and
  // token; its exit code.
  int RunProgram() {
    SpawnOptions spawn;
    spawn.argv = plan_.program;
    spawn.env["SHOAL_ADDRESS"] = address_;
    spawn.env["SHOAL_TOKEN"] = token_;
    spawn.new_session = true;
    spawn.parent_death_signal = SIGTERM;
    absl::StatusOr<pid_t> pid = Spawn(spawn);
    if (!pid.ok()) {
      *ctx_.err << "shoal symmetric-run: " << pid.status().message() << "\n";
      return 127;
    }
    std::optional<int> status;
    const Woken w = WaitUntil(
        [&] { return (status = Ended(*pid)).has_value(); }, -1, 50, &signal_);
    if (w == Woken::kSignal) {
      // Slurm signals every process of the step at once: the head may be
      // gone already, and what the program holds with it. KillWait (30 s
      // by default) must leave room for the node to stop after it.
      StopGroup(*pid, 5000);
      return 128 + signal_;
    }
    kill(-*pid, SIGKILL);  // what it left in its group
    return ExitCodeOf(*status);
  }

  // Stops this node's head and agent (they free their stores), and says so.
  void Stop() {
    if (start_pid_ > 0) TerminateProcess(start_pid_, 20000);
    start_pid_ = 0;
    if (!plan_.head) {
      WriteFile(NodeFile(plan_.job_dir, "left", plan_.node_index), "", 0600)
          .IgnoreError();
    }
  }

  // Once the other nodes have left (or 10 s), the job's folder goes.
  void RemoveJobDir() {
    int ignored = 0;
    WaitUntil(
        [&] {
          for (const auto& e :
               std::filesystem::directory_iterator(plan_.job_dir)) {
            const std::string file = e.path().filename().string();
            absl::string_view name = file;
            int node = 0;
            if (absl::ConsumePrefix(&name, "node-") &&
                absl::SimpleAtoi(name, &node) && node != plan_.node_index &&
                !PathExists(NodeFile(plan_.job_dir, "left", node))) {
              return false;
            }
          }
          return true;
        },
        10000, 50, &ignored);
    std::error_code ec;
    std::filesystem::remove_all(plan_.job_dir, ec);
  }

  const NodePlan plan_;
  Context& ctx_;
  std::string token_;
  std::string address_;
  pid_t start_pid_ = 0;
  int signal_ = 0;
};

}  // namespace

CLI::App* Register(CLI::App& parent, Flags& f) {
  CLI::App* cmd = parent.add_subcommand(
      "symmetric-run",
      "Run on every node of a Slurm job step (srun): node 0 starts the "
      "head, the others join, the program runs once, all stop");
  cmd->add_option("--address", f.address,
                  "The head's HOST:PORT, HOST one of the step's hosts "
                  "(default: the step's first host, --port)")
      ->check(HostPort());
  cmd->add_option("--port", f.port, "The head's port (default 6379)")
      ->check(ListenPort());
  cmd->add_option("--min-nodes", f.min_nodes,
                  "Run the program once this many nodes have joined "
                  "(default: every node of the step)")
      ->check(AtLeast(1));
  cmd->add_flag("--per-host", f.per_host,
                "Run the program on every node, one process per host (JAX), "
                "as shoal launch --per-host does");
  cmd->add_flag("--per-device", f.per_device,
                "Run the program on every node, one process per device, as "
                "shoal launch --per-device does");
  cmd->add_option("--nproc-per-node", f.nproc_per_node,
                  "With --per-device on hosts without accelerators: "
                  "processes per host")
      ->check(AtLeast(1));
  cmd->add_option("--job-dir", f.job_dir,
                  "The job's folder, on storage every node sees (default: "
                  "$SLURM_SUBMIT_DIR/.shoal/JOB.STEP); holds the token "
                  "(0600) and the head's address while the step runs");
  cmd->add_option("--temp-dir", f.temp_dir,
                  "Where each node keeps its session, in slurm-JOB.STEP-NODE "
                  "(default /tmp/shoal)")
      ->envname(env::Name(env::Var::kTempDir));
  cmd->add_option("--wait-s", f.wait_s,
                  "Seconds to wait for the head and for --min-nodes "
                  "(default 120)")
      ->check(AtLeast(1));
  cmd->footer(
      "The program follows --, e.g. srun --nodes=3 --ntasks-per-node=1 "
      "shoal symmetric-run -- python train.py");
  return cmd;
}

absl::StatusOr<NodePlan> PlanNode(const Flags& f,
                                  const launch::SlurmAllocation& a,
                                  const std::string& self) {
  if (f.argv.empty()) {
    return UsageError(
        "give the program to run after --, e.g. shoal symmetric-run -- "
        "python train.py");
  }
  if (f.per_host && f.per_device) {
    return UsageError("say --per-host or --per-device, not both");
  }
  if (a.node_index < 0) {
    return UsageError(
        "no SLURM_NODEID: run shoal symmetric-run as a job step on every "
        "node, srun --nodes=N --ntasks-per-node=1 shoal symmetric-run -- ...");
  }
  const int nodes = static_cast<int>(a.hosts.size());
  NodePlan p;
  p.node_index = a.node_index;
  p.port = f.port;
  p.wait_s = f.wait_s;
  int head_index = 0;
  if (!f.address.empty()) {
    const size_t colon = f.address.rfind(':');
    const std::string host = f.address.substr(0, colon);
    auto it = std::find(a.hosts.begin(), a.hosts.end(), host);
    if (it == a.hosts.end()) {
      return UsageError(
          absl::StrCat("--address ", f.address, ": the step's hosts are ",
                       absl::StrJoin(a.hosts, ", "), "; name one of them"));
    }
    head_index = static_cast<int>(it - a.hosts.begin());
    absl::SimpleAtoi(f.address.substr(colon + 1), &p.port);
  }
  p.head = p.node_index == head_index;
  p.head_host = a.hosts[head_index];
  p.min_nodes = f.min_nodes > 0 ? f.min_nodes : nodes;
  if (p.min_nodes > nodes) {
    return UsageError(absl::StrCat("--min-nodes ", p.min_nodes,
                                   ": the step has ", nodes, " nodes"));
  }
  const std::string step =
      absl::StrCat(a.job_id, ".", a.step_id.empty() ? "batch" : a.step_id);
  p.job_dir = !f.job_dir.empty()
                  ? Absolute(f.job_dir)
                  : absl::StrCat(a.submit_dir.empty() ? std::string("/tmp")
                                                      : a.submit_dir,
                                 "/.shoal/", step);
  // Each node's own folder, also where every host shares one filesystem.
  p.temp_dir =
      absl::StrCat(Absolute(f.temp_dir), "/slurm-", step, "-", p.node_index);
  p.start_args = {self, "start", "--block", "--temp-dir", p.temp_dir};
  if (p.head) {
    p.start_args.insert(p.start_args.begin() + 2,
                        {"--head", "--port", absl::StrCat(p.port)});
  }
  // What Slurm gave the step on this node, never the whole host.
  if (a.cpus) {
    p.start_args.insert(p.start_args.end(),
                        {"--num-cpus", absl::StrCat(*a.cpus)});
  }
  p.start_args.insert(p.start_args.end(),
                      {"--num-gpus", absl::StrCat(a.gpus.size())});
  if (a.memory_bytes) {
    const int64_t store =
        std::max<int64_t>(int64_t{1} << 20, *a.memory_bytes * 3 / 10);
    p.start_args.insert(
        p.start_args.end(),
        {"--object-store-memory", absl::StrCat(store), "--memory",
         absl::StrCat(std::max<int64_t>(0, *a.memory_bytes - store))});
  }
  if (f.per_host || f.per_device) {
    p.program = {self, "launch", f.per_host ? "--per-host" : "--per-device"};
    if (f.nproc_per_node > 0) {
      p.program.insert(p.program.end(),
                       {"--nproc-per-node", absl::StrCat(f.nproc_per_node)});
    }
    p.program.push_back("--");
  }
  p.program.insert(p.program.end(), f.argv.begin(), f.argv.end());
  return p;
}

absl::StatusOr<int> Run(const Flags& f, Context& ctx) {
  ASSIGN_OR_RETURN(std::optional<launch::SlurmAllocation> allocation,
                   launch::SlurmAllocationOfThisProcess());
  if (!allocation) {
    return UsageError(
        "not in a Slurm job (no SLURM_JOB_ID): run it on every node of an "
        "allocation, srun --nodes=N --ntasks-per-node=1 shoal symmetric-run "
        "-- ...");
  }
  ASSIGN_OR_RETURN(NodePlan plan, PlanNode(f, *allocation, SelfExecutable()));
  return NodeRun(std::move(plan), ctx).Run();
}

}  // namespace shoal::cli::symmetric_run
