#include "launch/rank_processes.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/process.h"
#include "common/utf8.h"
#include "launch/output_lines.h"

namespace shoal::launch {
namespace {

// Read from one rank per pass: a rank that prints without pause still lets
// the others and the reports through (its pipe holds the rest, and then
// slows it down).
constexpr size_t kMaxDrainBytes = 1 << 20;

int ExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 255;
}

// Where the rank's lines say it runs: its chip or GPU in per-device mode.
std::string DeviceOf(const proto::LaunchHostSpec& spec,
                     const ProcessEnvironment& env) {
  const std::string& kind = spec.hosts(spec.host_index()).kind();
  if (env.device_ids.empty() || spec.per_host() || kind == "CPU") return "";
  return absl::StrCat(" ", kind == "GPU" ? "gpu" : "chip", " ",
                      env.device_ids[0]);
}

// Writes the rank's lines from `first` on to its log, as it printed them.
void LogLines(std::ofstream& log, const proto::LaunchReport& report,
              int first) {
  for (int i = first; i < report.lines_size(); ++i) {
    const std::string& text = report.lines(i).text();
    log.write(text.data(), static_cast<std::streamsize>(text.size()));
    if (!report.lines(i).continues()) log.put('\n');
  }
  log.flush();
}

}  // namespace

std::vector<RankProcessPlan> PlanRanks(
    const proto::LaunchHostSpec& spec,
    const std::vector<ProcessEnvironment>& envs,
    const std::string& gloo_interface, const std::string& log_dir) {
  std::vector<RankProcessPlan> plans;
  for (const ProcessEnvironment& env : envs) {
    if (env.node_rank != spec.host_index()) continue;
    RankProcessPlan p;
    p.rank = env.rank;
    p.argv = {spec.argv().begin(), spec.argv().end()};
    p.env = env.set;
    if (!gloo_interface.empty()) p.env["GLOO_SOCKET_IFNAME"] = gloo_interface;
    p.unset_env = env.unset;
    p.unset_env.push_back("SHOAL_ROLE");  // the command is not a worker
    p.prefix = absl::StrCat("[rank ", env.rank, " host ", spec.host_index(),
                            DeviceOf(spec, env), "]");
    p.log_path = absl::StrCat(log_dir, "/rank-", env.rank, ".log");
    plans.push_back(std::move(p));
  }
  return plans;
}

RankProcesses::RankProcesses() = default;

RankProcesses::~RankProcesses() {
  for (Proc& p : procs_) {
    if (p.fd >= 0) close(p.fd);
  }
}

void RankProcesses::Start(const std::vector<RankProcessPlan>& plans,
                          proto::LaunchHostResult* result) {
  procs_.reserve(plans.size());
  for (const RankProcessPlan& plan : plans) {
    result->set_num_processes(result->num_processes() + 1);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) continue;
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    SpawnOptions s;
    s.argv = plan.argv;
    s.env = plan.env;
    s.unset_env = plan.unset_env;
    s.output_fd = fds[1];
    s.new_session = true;  // its own process group: stopped as a whole
    procs_.emplace_back();
    Proc& p = procs_.back();
    p.rank = plan.rank;
    p.lines = std::make_unique<LineSplitter>(plan.rank, plan.prefix);
    p.log.open(plan.log_path, std::ios::app);
    auto pid = Spawn(s);
    close(fds[1]);
    p.fd = fds[0];
    if (!pid.ok()) {
      p.exited = true;
      proto::LaunchExit* e = result->add_exits();
      e->set_rank(p.rank);
      e->set_exit_code(127);
      // Names the command, whose bytes need not be UTF-8.
      e->set_description(ToValidUtf8(std::string(pid.status().message())));
      e->set_time_us(MonotonicUs());
      continue;
    }
    p.pid = *pid;
    ++running_;
  }
}

bool RankProcesses::Poll(int timeout_ms, bool stopping,
                         proto::LaunchReport* report,
                         proto::LaunchHostResult* result) {
  std::vector<pollfd> pfds;
  for (const Proc& p : procs_) pfds.push_back({p.fd, POLLIN, 0});
  poll(pfds.data(), pfds.size(), timeout_ms);
  for (Proc& p : procs_) Drain(p, report);
  bool failed = false;
  for (Proc& p : procs_) {
    if (p.exited) continue;
    int status = 0;
    if (waitpid(p.pid, &status, WNOHANG) != p.pid) continue;
    Reap(p, status, stopping || failed, report, result);
    failed |= ExitCode(status) != 0;
  }
  return failed;
}

void RankProcesses::Signal(int signal) {
  for (const Proc& p : procs_) {
    if (!p.exited) kill(-p.pid, signal);
  }
}

// Reads what the rank printed, up to kMaxDrainBytes; returns how much.
size_t RankProcesses::Drain(Proc& p, proto::LaunchReport* report) {
  if (p.fd < 0) return 0;
  const int first = report->lines_size();
  char buf[65536];
  size_t taken = 0;
  while (taken < kMaxDrainBytes) {
    ssize_t n = read(p.fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    taken += static_cast<size_t>(n);
    p.lines->Add(std::string_view(buf, static_cast<size_t>(n)), report);
  }
  LogLines(p.log, *report, first);
  return taken;
}

void RankProcesses::Reap(Proc& p, int status, bool stopping,
                         proto::LaunchReport* report,
                         proto::LaunchHostResult* result) {
  p.exited = true;
  --running_;
  // Everything it printed before it exited (bounded: a process it left
  // behind may hold the pipe and go on printing).
  for (int i = 0; i < 64 && Drain(p, report) >= kMaxDrainBytes; ++i) {
  }
  // What it printed after its last newline ends its output.
  const int first = report->lines_size();
  p.lines->Finish(report);
  LogLines(p.log, *report, first);
  kill(-p.pid, SIGKILL);  // anything it left in its group
  close(p.fd);            // at its end (or held by what was just killed)
  p.fd = -1;              // poll skips it
  proto::LaunchExit* e = report->add_exits();
  e->set_rank(p.rank);
  e->set_exit_code(ExitCode(status));
  e->set_description(DescribeWaitStatus(status));
  e->set_time_us(NowMs() * 1000);
  e->set_stopped(stopping);
  *result->add_exits() = *e;
}

}  // namespace shoal::launch
