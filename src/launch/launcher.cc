#include "launch/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "api/cluster_status.h"
#include "api/core_runtime.h"
#include "api/status_format.h"
#include "common/logging.h"
#include "common/process.h"
#include "common/session.h"
#include "common/utf8.h"
#include "common/util.h"
#include "head_client/head_client.h"
#include "launch/framework_env.h"
#include "launch/output_lines.h"
#include "rpc/rpc.h"
#include "shoal/api.h"
#include "shoal/shoal.pb.h"

namespace shoal::launch {
namespace {

constexpr int64_t kReportIntervalUs = 100000;
constexpr int kStopGraceMs = 3000;
constexpr int64_t kReportTimeoutMs = 5000;
// A runner that cannot reach its launcher for this long stops its processes
// and fails (a wrong token fails at once).
constexpr int64_t kLauncherLostUs = 10'000'000;
// Undelivered output kept while the launcher is unreachable.
constexpr int kMaxPendingLines = 10000;
constexpr size_t kMaxPendingBytes = 16 << 20;
// Read from one rank per pass: a rank that prints without pause still lets
// the others and the reports through (its pipe holds the rest, and then
// slows it down).
constexpr size_t kMaxDrainBytes = 1 << 20;

DeviceKind KindOf(const std::string& kind) {
  if (kind == "TPU") return DeviceKind::kTpu;
  if (kind == "GPU") return DeviceKind::kGpu;
  return DeviceKind::kCpu;
}

int ExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 255;
}

// ---- The runner: one per host, inside a task that holds the host ----

struct Proc {
  pid_t pid = 0;
  int fd = -1;
  int rank = 0;
  std::unique_ptr<LineSplitter> lines;
  std::ofstream log;
  bool exited = false;
};

// Sends what accumulated to the launcher. Returns whether it says to stop,
// or why it could not be reached; what was not delivered is kept for the
// next report.
absl::StatusOr<bool> Report(rpc::EventLoop* loop, rpc::Channel* channel,
                            proto::LaunchReport* report) {
  absl::StatusOr<bool> result = rpc::RunOnLoopAndWait<absl::StatusOr<bool>>(
      loop, [&](std::function<void(absl::StatusOr<bool>)> done) {
        rpc::CallProto<proto::LaunchReportReply>(
            channel, proto::LAUNCH_REPORT, *report,
            [done](absl::StatusOr<proto::LaunchReportReply> r) {
              if (r.ok()) {
                done(r->stop());
              } else {
                done(r.status());
              }
            },
            kReportTimeoutMs);
      });
  if (result.ok()) {
    report->clear_lines();
    report->clear_exits();
  }
  return result;
}

// Writes the rank's lines from `first` on to its log, as it printed them.
void LogLines(Proc& p, const proto::LaunchReport& report, int first) {
  for (int i = first; i < report.lines_size(); ++i) {
    const std::string& text = report.lines(i).text();
    p.log.write(text.data(), static_cast<std::streamsize>(text.size()));
    if (!report.lines(i).continues()) p.log.put('\n');
  }
  p.log.flush();
}

// Reads what the rank printed, up to kMaxDrainBytes; returns how much.
size_t Drain(Proc& p, proto::LaunchReport* report) {
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
  LogLines(p, *report, first);
  return taken;
}

// Keeps at most kMaxPendingLines lines and kMaxPendingBytes of output that
// could not be delivered yet, the newest.
void TrimPending(proto::LaunchReport* report) {
  auto* lines = report->mutable_lines();
  int drop = std::max(0, lines->size() - kMaxPendingLines);
  size_t bytes = 0;
  for (int i = lines->size() - 1; i >= drop; --i) {
    bytes += lines->Get(i).text().size();
    if (bytes > kMaxPendingBytes) {
      drop = i + 1;
      break;
    }
  }
  if (drop > 0) lines->DeleteSubrange(0, drop);
}

// A port nothing listens on now, on this host.
absl::StatusOr<int> FreePort(const std::string& host) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
  }
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return absl::UnavailableError("cannot find a free port on " + host);
  }
  close(fd);
  return ntohs(addr.sin_port);
}

// Host 0 publishes a free port under launch/<id>/port; the others read it.
absl::StatusOr<int> RendezvousPort(rpc::HeadClient& head,
                                   const proto::LaunchHostSpec& spec) {
  constexpr int64_t kHeadTimeoutMs = 5000;
  // Both calls may be made again (a put that overwrites, a get), so a head
  // that is away (killed, being started again) is waited for, as drivers
  // wait for it: up to SHOAL_HEAD_OUTAGE_WAIT_MS (30 s).
  int64_t outage_ms = 30000;
  if (const char* v = getenv("SHOAL_HEAD_OUTAGE_WAIT_MS");
      v != nullptr && !absl::SimpleAtoi(v, &outage_ms)) {
    outage_ms = 30000;
  }
  const int64_t give_up_us =
      MonotonicUs() + std::max<int64_t>(0, outage_ms) * 1000;
  auto head_away = [&](const absl::Status& st) {
    if (!absl::IsUnavailable(st) || MonotonicUs() >= give_up_us) return false;
    usleep(200000);
    return true;
  };
  std::string key = absl::StrCat("launch/", spec.launch_id(), "/port");
  if (spec.host_index() == 0) {
    int port = 0;
    absl::StatusOr<int> free = FreePort(spec.hosts(0).address());
    if (!free.ok()) return free.status();
    port = *free;
    proto::KvPutRequest put;
    put.set_key(key);
    put.set_value(std::to_string(port));
    put.set_overwrite(true);
    absl::StatusOr<proto::KvPutReply> reply = head.KvPut(put, kHeadTimeoutMs);
    while (!reply.ok() && head_away(reply.status())) {
      reply = head.KvPut(put, kHeadTimeoutMs);
    }
    if (!reply.ok()) return reply.status();
    return port;
  }
  proto::KvGetRequest get;
  get.set_key(key);
  for (int i = 0; i < 600; ++i) {  // up to a minute
    absl::StatusOr<proto::KvGetReply> reply = head.KvGet(get, kHeadTimeoutMs);
    if (!reply.ok() && head_away(reply.status())) continue;
    if (!reply.ok()) return reply.status();
    int port = 0;
    if (reply->found() && absl::SimpleAtoi(reply->value(), &port)) return port;
    usleep(100000);
  }
  return absl::DeadlineExceededError(
      "host 0 of the gang never published its rendezvous port");
}

// The gang a runner (or the launcher, to check it) computes the processes of.
LaunchSpec GangOf(const proto::LaunchHostSpec& spec) {
  LaunchSpec gang;
  gang.mode = spec.per_host() ? LaunchMode::kPerHost : LaunchMode::kPerDevice;
  gang.restart_count = spec.restart_count();
  for (const auto& h : spec.hosts()) {
    GangHost host;
    host.address = h.address();
    host.kind = KindOf(h.kind());
    host.num_devices = h.num_devices();
    host.tpu_accelerator_type = h.tpu_type();
    host.tpu_worker_id = h.tpu_worker_id();
    gang.hosts.push_back(host);
  }
  return gang;
}

std::string RunLaunchHost(std::string spec_bytes) {
  proto::LaunchHostSpec spec;
  proto::LaunchHostResult result;
  if (!spec.ParseFromString(spec_bytes)) {
    result.set_error("malformed launch spec");
    return result.SerializeAsString();
  }
  LaunchSpec gang = GangOf(spec);
  auto loop = rpc::EventLoop::Create("shoal-runner");
  if (!loop.ok()) {
    result.set_error(std::string(loop.status().message()));
    return result.SerializeAsString();
  }
  // The launcher, the head and the ranks all use the cluster's token: the
  // launcher sends the one it resolved, the worker holds the agent's.
  const char* env_token = getenv("SHOAL_TOKEN");
  std::string token = !spec.token().empty() ? spec.token()
                      : env_token           ? env_token
                                            : "";
  const char* head = getenv("SHOAL_ADDRESS");
  const proto::LaunchHost& self = spec.hosts(spec.host_index());
  std::string where =
      absl::StrCat("host ", spec.host_index(), " (", self.address(), ", node ",
                   self.node_id(), ")");
  std::unique_ptr<rpc::Channel> channel;
  rpc::HeadClient head_client(loop->get(), head ? head : "", token, "runner");
  (*loop)->RunSync([&] {
    channel = std::make_unique<rpc::TcpChannel>(
        loop->get(), spec.launcher_address(), token, "runner");
  });
  auto close_channels = [&] {
    (*loop)->RunSync([&] {
      channel.reset();
      head_client.Close();
    });
    (*loop)->Stop();
  };
  // The rendezvous port (MASTER_PORT, the JAX coordinator's port): host 0
  // picks a free one and publishes it in the head's key-value store.
  auto port = RendezvousPort(head_client, spec);
  if (!port.ok()) {
    close_channels();
    result.set_error(absl::StrCat(where, ": ", port.status().message()));
    return result.SerializeAsString();
  }
  gang.rendezvous.master_port = *port;
  gang.rendezvous.coordinator_port = *port;
  auto envs = ComputeLaunchEnvironments(gang);
  if (!envs.ok()) {
    close_channels();
    result.set_error(absl::StrCat(where, ": ", envs.status().message()));
    return result.SerializeAsString();
  }
  const char* session = getenv("SHOAL_SESSION_DIR");
  std::string log_dir = absl::StrCat(session ? session : "/tmp",
                                     "/logs/launch-", spec.launch_id());
  MakeDirs(log_dir).IgnoreError();

  std::vector<Proc> procs;
  procs.reserve(envs->size());
  // Gloo (torch.distributed's CPU backend) finds its own address by
  // resolving the hostname, which Debian maps to a loopback address: peers on
  // other hosts could not reach it. Point it at the interface that holds this
  // host's address in the gang, unless the user chose one.
  std::string gloo_interface;
  if (getenv("GLOO_SOCKET_IFNAME") == nullptr) {
    gloo_interface = InterfaceOf(spec.hosts(spec.host_index()).address());
  }
  for (const ProcessEnvironment& env : *envs) {
    if (env.node_rank != spec.host_index()) continue;
    result.set_num_processes(result.num_processes() + 1);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) continue;
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    SpawnOptions s;
    s.argv = {spec.argv().begin(), spec.argv().end()};
    s.env = env.set;
    if (!gloo_interface.empty()) s.env["GLOO_SOCKET_IFNAME"] = gloo_interface;
    s.unset_env = env.unset;
    s.unset_env.push_back("SHOAL_ROLE");  // the command is not a worker
    s.output_fd = fds[1];
    s.new_session = true;  // its own process group: stopped as a whole
    procs.emplace_back();
    Proc& p = procs.back();
    p.rank = env.rank;
    std::string device;
    if (!env.device_ids.empty() && !spec.per_host()) {
      device = absl::StrCat(
          " ", spec.hosts(spec.host_index()).kind() == "GPU" ? "gpu" : "chip",
          " ", env.device_ids[0]);
      if (spec.hosts(spec.host_index()).kind() == "CPU") device.clear();
    }
    p.lines = std::make_unique<LineSplitter>(
        env.rank, absl::StrCat("[rank ", env.rank, " host ", spec.host_index(),
                               device, "]"));
    p.log.open(absl::StrCat(log_dir, "/rank-", env.rank, ".log"),
               std::ios::app);
    auto pid = Spawn(s);
    close(fds[1]);
    p.fd = fds[0];
    if (!pid.ok()) {
      p.exited = true;
      proto::LaunchExit* e = result.add_exits();
      e->set_rank(p.rank);
      e->set_exit_code(127);
      // Names the command, whose bytes need not be UTF-8.
      e->set_description(ToValidUtf8(std::string(pid.status().message())));
      e->set_time_us(MonotonicUs());
      continue;
    }
    p.pid = *pid;
  }

  proto::LaunchReport report;
  report.set_launch_id(spec.launch_id());
  report.set_host_index(spec.host_index());
  *report.mutable_exits() = result.exits();
  bool stopping = result.exits_size() > 0;
  int64_t stop_deadline_us = 0;
  int64_t last_report = 0;
  int64_t unreachable_since_us = 0;
  bool launcher_lost = false;
  size_t running = 0;
  for (const Proc& p : procs) running += p.exited ? 0 : 1;
  while (running > 0 || (!launcher_lost && (report.lines_size() > 0 ||
                                            report.exits_size() > 0))) {
    std::vector<pollfd> pfds;
    for (const Proc& p : procs) pfds.push_back({p.fd, POLLIN, 0});
    poll(pfds.data(), pfds.size(), 50);
    for (Proc& p : procs) Drain(p, &report);
    for (Proc& p : procs) {
      if (p.exited) continue;
      int status = 0;
      if (waitpid(p.pid, &status, WNOHANG) != p.pid) continue;
      p.exited = true;
      --running;
      // Everything it printed before it exited (bounded: a process it
      // left behind may hold the pipe and go on printing).
      for (int i = 0; i < 64 && Drain(p, &report) >= kMaxDrainBytes; ++i) {
      }
      // What it printed after its last newline ends its output.
      const int first = report.lines_size();
      p.lines->Finish(&report);
      LogLines(p, report, first);
      kill(-p.pid, SIGKILL);  // anything it left in its group
      close(p.fd);            // at its end (or held by what was just killed)
      p.fd = -1;              // poll skips it
      proto::LaunchExit* e = report.add_exits();
      e->set_rank(p.rank);
      e->set_exit_code(ExitCode(status));
      e->set_description(DescribeWaitStatus(status));
      e->set_time_us(NowMs() * 1000);
      e->set_stopped(stopping);
      *result.add_exits() = *e;
      if (ExitCode(status) != 0) stopping = true;
    }
    int64_t now = MonotonicUs();
    bool due = now - last_report >= kReportIntervalUs || running == 0;
    if (!launcher_lost && due) {
      last_report = now;
      absl::StatusOr<bool> stop = Report(loop->get(), channel.get(), &report);
      if (stop.ok()) {
        unreachable_since_us = 0;
        if (*stop) stopping = true;
      } else {
        if (unreachable_since_us == 0) unreachable_since_us = now;
        bool refused =
            stop.status().code() == absl::StatusCode::kPermissionDenied;
        if (refused || now - unreachable_since_us >= kLauncherLostUs) {
          // Nobody hears this gang: stop it, and say why in the result.
          launcher_lost = true;
          stopping = true;
          result.set_error(absl::StrCat(
              where, " lost its launcher at ", spec.launcher_address(), ": ",
              stop.status().message(), "; its processes were stopped"));
          SHOAL_LOG(WARNING) << result.error();
        }
        TrimPending(&report);
      }
    }
    if (stopping && stop_deadline_us == 0) {
      stop_deadline_us = now + kStopGraceMs * 1000;
      for (const Proc& p : procs) {
        if (!p.exited) kill(-p.pid, SIGTERM);
      }
    }
    if (stop_deadline_us != 0 && now > stop_deadline_us) {
      for (const Proc& p : procs) {
        if (!p.exited) kill(-p.pid, SIGKILL);
      }
    }
  }
  for (Proc& p : procs) {
    if (p.fd >= 0) close(p.fd);
  }
  close_channels();
  return result.SerializeAsString();
}

SHOAL_REMOTE(RunLaunchHost);

// ---- The launcher ----

struct LaunchState {
  std::mutex mu;
  std::string launch_id;
  bool stop = false;
  bool have_failure = false;
  proto::LaunchExit first_failure;
  std::string first_failure_prefix;
  // The exits runners reported in this attempt, by rank, for the head's
  // gang record; `exits_changed` once there are some it has not heard of.
  std::map<int, proto::LaunchExit> exits;
  bool exits_changed = false;
  LinePrinter printer;  // the ranks' output, to stdout
};

// Tells the head how the gang stands (GANG_UPDATE), for `shoal list gangs`,
// the dashboard and the metrics; a head that cannot be told is not the
// gang's problem (said once).
void ReportGang(const proto::GangInfo& gang) {
  static bool warned = false;
  absl::Status st;
  try {
    st = internal::RequireRuntime()->head().GangUpdate(gang, 2000);
  } catch (const Error& e) {
    st = absl::UnavailableError(e.what());
  }
  if (!st.ok() && !warned) {
    warned = true;
    SHOAL_LOG(WARNING) << "the head does not know of this gang: " << st;
  }
}

// The gang's ranks for attempt `launch_id`: where each runs, its log.
void SetGangRanks(const std::vector<std::pair<int, int>>& rank_hosts,
                  const std::vector<proto::LaunchHost>& hosts,
                  const std::string& launch_id, proto::GangInfo* gang) {
  gang->clear_ranks();
  for (const auto& [rank, host] : rank_hosts) {
    proto::GangRank* r = gang->add_ranks();
    r->set_rank(rank);
    r->set_host_index(host);
    r->set_node_id(hosts[host].node_id());
    r->set_address(hosts[host].address());
    r->set_log_name(absl::StrCat("launch-", launch_id, "/rank-", rank, ".log"));
  }
}

void SetGangExits(const std::map<int, proto::LaunchExit>& exits,
                  proto::GangInfo* gang) {
  for (proto::GangRank& r : *gang->mutable_ranks()) {
    auto it = exits.find(r.rank());
    if (it == exits.end()) continue;
    r.set_exited(true);
    r.set_exit_code(it->second.exit_code());
    r.set_description(it->second.description());
  }
}

std::atomic<bool> g_interrupted{false};

proto::LaunchHost DescribeHost(const NodeInfo& n, int nproc_per_node) {
  proto::LaunchHost h;
  h.set_node_id(n.node_id);
  h.set_address(n.address.substr(0, n.address.rfind(':')));
  auto total = [&](const char* r) {
    auto it = n.total.find(r);
    return it == n.total.end() ? 0 : static_cast<int>(it->second);
  };
  if (total("TPU") > 0) {
    h.set_kind("TPU");
    h.set_num_devices(total("TPU"));
    auto type = n.labels.find("shoal.io/accelerator-type");
    if (type != n.labels.end()) h.set_tpu_type(type->second);
    auto w = n.labels.find("shoal.io/tpu-worker-id");
    int worker = 0;
    if (w != n.labels.end()) (void)absl::SimpleAtoi(w->second, &worker);
    h.set_tpu_worker_id(worker);
  } else if (total("GPU") > 0) {
    h.set_kind("GPU");
    h.set_num_devices(total("GPU"));
  } else {
    h.set_kind("CPU");
    h.set_num_devices(std::max(1, nproc_per_node));
  }
  return h;
}

// The bundle of one host of an N-node gang: a CPU for its runner, and every
// device of the host when at least N alive hosts have the same accelerators
// (the most common such shape; TPU hosts first), so that the runner can hold
// them all.
std::map<std::string, double> GangBundle(const std::vector<NodeInfo>& alive,
                                         int n, int nproc_per_node) {
  std::map<std::pair<std::string, int>, int> shapes;
  for (const NodeInfo& node : alive) {
    proto::LaunchHost h = DescribeHost(node, nproc_per_node);
    if (h.kind() != "CPU") ++shapes[{h.kind(), h.num_devices()}];
  }
  std::map<std::string, double> bundle = {{"CPU", 1}};
  const std::pair<std::string, int>* best = nullptr;
  int best_count = 0;
  for (const auto& [shape, count] : shapes) {
    bool better =
        count > best_count || (count == best_count && shape.first == "TPU");
    if (count >= n && better) {
      best = &shape;
      best_count = count;
    }
  }
  if (best != nullptr) bundle[best->first] = best->second;
  return bundle;
}

// Reserves `n` alive nodes but those in `excluded` (nodes the launcher saw
// die, which the head may not have declared dead yet) as a STRICT_SPREAD
// placement group of one GangBundle each: sets *group, *host_ids (its
// bundles' nodes) and *bundle_devices. Throws Error (with *busy set when
// the nodes were there but taken for --reserve-timeout).
void ReserveNodes(const LaunchOptions& options, int n, int nproc,
                  const std::set<std::string>& excluded, PlacementGroup* group,
                  std::vector<std::string>* host_ids,
                  std::map<std::string, double>* bundle_devices, bool* busy) {
  std::vector<NodeInfo> alive;
  for (const NodeInfo& node : Nodes()) {
    if (node.alive && excluded.count(node.node_id) == 0) alive.push_back(node);
  }
  if (n > static_cast<int>(alive.size())) {
    throw Error(absl::StrCat("asked for ", n, " nodes; the cluster has ",
                             alive.size(), " alive"));
  }
  PlacementGroupOptions pg;
  pg.strategy = PlacementStrategy::kStrictSpread;
  pg.bundles.assign(n, GangBundle(alive, n, nproc));
  *bundle_devices = pg.bundles[0];
  *group = CreatePlacementGroup(pg);
  if (!group->Wait(int64_t{options.reserve_timeout_s} * 1000)) {
    RemovePlacementGroup(*group);
    *busy = true;
    throw Error(absl::StrCat("could not reserve ", n, " nodes within ",
                             options.reserve_timeout_s,
                             " s (--reserve-timeout); they are busy"));
  }
  *host_ids = group->BundleNodes();
}

}  // namespace

int RunLaunch(const LaunchOptions& options) {
  if (options.argv.empty()) {
    std::cerr << "shoal launch: give the command after --, e.g. "
                 "shoal launch --per-device -- python train.py\n";
    return 2;
  }
  if (options.max_restarts < 0) {
    std::cerr << "shoal launch: --max-restarts must be 0 or more (got "
              << options.max_restarts << ")\n";
    return 2;
  }
  if (options.nproc_per_node < 0) {
    std::cerr << "shoal launch: --nproc-per-node must be 1 or more (got "
              << options.nproc_per_node << ")\n";
    return 2;
  }
  // The cluster, by the rule every command follows (common/session.h): a
  // launch never starts a cluster of its own.
  InitOptions init;
  init.address = options.address;
  init.token = options.token;
  absl::Status found =
      ResolveClusterAddress(DefaultTempDir(), &init.address, &init.token);
  if (!found.ok()) {
    std::cerr << "shoal launch: " << found.message() << "\n";
    return absl::IsInvalidArgument(found) ? 2 : 1;
  }
  try {
    Init(init);
  } catch (const Error& e) {
    std::cerr << "shoal launch: " << e.what() << "\n";
    return 1;
  }
  // Until the gang is reserved, Ctrl-C or SIGTERM ends the launch at once:
  // nothing runs yet, and the head removes this job's placement group (a
  // pending one included) when its connection closes.
  struct sigaction sa {};
  sa.sa_handler = [](int) {
    static const char kMessage[] =
        "shoal launch: interrupted while reserving the gang; nothing was "
        "started\n";
    ssize_t ignored = write(2, kMessage, sizeof(kMessage) - 1);
    (void)ignored;
    _exit(130);
  };
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  // The gang: every host of the slice, or N nodes.
  std::vector<NodeInfo> alive;
  bool has_slice = false;
  for (const NodeInfo& n : Nodes()) {
    if (!n.alive) continue;
    alive.push_back(n);
    has_slice |= n.labels.count("shoal.io/tpu-slice-name") > 0;
  }
  PlacementGroup group;
  std::vector<std::string> host_ids;
  bool slice_gang = false;
  std::map<std::string, double> bundle_devices;
  int nproc = std::max(1, options.nproc_per_node);
  int gang_nodes = 0;  // of a gang that is not a TPU slice's
  bool busy = false;
  try {
    slice_gang = !options.slice.empty() ||
                 (has_slice && options.nodes == 0 && !options.local);
    if (slice_gang) {
      SliceReservation slice = ReserveTpuSlice(
          options.slice, int64_t{options.reserve_timeout_s} * 1000);
      group = slice.group;
      host_ids = slice.hosts;
    } else {
      gang_nodes = options.local
                       ? 1
                       : (options.nodes > 0 ? options.nodes
                                            : static_cast<int>(alive.size()));
      ReserveNodes(options, gang_nodes, nproc, {}, &group, &host_ids,
                   &bundle_devices, &busy);
    }
  } catch (const Error& e) {
    std::string why = e.what();
    if (dynamic_cast<const TimeoutError*>(&e) != nullptr || busy) {
      // Say who holds what the gang waited for.
      auto status = internal::FetchClusterStatus();
      std::string holders =
          status.ok() ? internal::DescribeHolders(*status) : std::string();
      absl::StrAppend(&why, holders.empty() ? "" : "; held by: ", holders,
                      " (`shoal status --verbose` shows more)");
    }
    std::cerr << "shoal launch: " << why << "\n";
    Shutdown();
    return 1;
  }
  std::vector<proto::LaunchHost> hosts;
  for (const std::string& id : host_ids) {
    for (const NodeInfo& n : Nodes()) {
      if (n.node_id == id) hosts.push_back(DescribeHost(n, nproc));
    }
  }
  // The gang must make sense before anything starts: the same check the
  // runners make, and the number of processes every launch must account for.
  int expected_processes = 0;
  std::vector<std::pair<int, int>> rank_hosts;  // rank, host index
  {
    proto::LaunchHostSpec probe;
    for (const auto& h : hosts) *probe.add_hosts() = h;
    probe.set_per_host(options.per_host);
    LaunchSpec gang = GangOf(probe);
    gang.rendezvous.master_port = kDefaultMasterPort;
    gang.rendezvous.coordinator_port = kDefaultMasterPort;
    std::string problem;
    bool devices = !hosts.empty() && hosts[0].kind() != "CPU";
    if (devices && options.nproc_per_node > 0 &&
        options.nproc_per_node != hosts[0].num_devices()) {
      problem = absl::StrCat(
          "--nproc-per-node ", options.nproc_per_node,
          ": the gang's hosts have ", hosts[0].num_devices(), " ",
          hosts[0].kind(),
          " each, and a launch runs one process per device (--per-device) or "
          "per host (--per-host); drop --nproc-per-node");
    } else if (auto envs = ComputeLaunchEnvironments(gang); !envs.ok()) {
      problem = std::string(envs.status().message());
      if (!slice_gang && hosts[0].kind() == "TPU") {
        absl::StrAppend(&problem,
                        ". A TPU slice runs as a whole: leave out --local and "
                        "--nodes to launch on every host of the slice");
      }
    } else {
      expected_processes = static_cast<int>(envs->size());
      for (const ProcessEnvironment& env : *envs) {
        rank_hosts.emplace_back(env.rank, env.node_rank);
      }
      std::sort(rank_hosts.begin(), rank_hosts.end());
    }
    if (!problem.empty()) {
      std::cerr << "shoal launch: " << problem << "\n";
      RemovePlacementGroup(group);
      Shutdown();
      return 2;
    }
  }

  // From here on, Ctrl-C stops every process of the gang first.
  sa.sa_handler = [](int) { g_interrupted = true; };
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  // Where runners report.
  LaunchState state;
  auto loop = rpc::EventLoop::Create("shoal-launch");
  std::unique_ptr<rpc::Server> server;
  const std::string& token = init.token;
  // Every host's runner reports here, so listen where all of them can reach:
  // on loopback only when the whole gang is on loopback (one machine), else
  // on this host's address in the gang, else on its primary address.
  std::string host = "127.0.0.1";
  for (const proto::LaunchHost& h : hosts) {
    if (!absl::StartsWith(h.address(), "127.") && h.address() != "localhost") {
      host = PrimaryIpAddress();
      break;
    }
  }
  if (host != "127.0.0.1") {
    for (const proto::LaunchHost& h : hosts) {
      if (IsLocalAddress(h.address())) {
        host = h.address();
        break;
      }
    }
  }
  absl::Status listen;
  (*loop)->RunSync([&] {
    auto s = rpc::Server::Create(loop->get(), host, 0, token);
    if (!s.ok()) {
      listen = s.status();
      return;
    }
    server = std::move(*s);
    rpc::RegisterProto<proto::LaunchReport>(
        server.get(), proto::LAUNCH_REPORT,
        [&state](const proto::LaunchReport& r, rpc::Responder resp) {
          std::lock_guard<std::mutex> lock(state.mu);
          proto::LaunchReportReply reply;
          if (r.launch_id() == state.launch_id) {
            // Bytes, as the ranks printed them.
            std::string out = state.printer.Format(r);
            fwrite(out.data(), 1, out.size(), stdout);
            fflush(stdout);
            for (const auto& e : r.exits()) {
              state.exits[e.rank()] = e;
              state.exits_changed = true;
              if (e.exit_code() == 0 || e.stopped()) continue;
              if (!state.have_failure ||
                  e.time_us() < state.first_failure.time_us()) {
                state.have_failure = true;
                state.first_failure = e;
              }
              state.stop = true;
            }
            if (g_interrupted) state.stop = true;
            reply.set_stop(state.stop);
          } else {
            reply.set_stop(true);  // an earlier attempt's straggler
          }
          resp.Reply(reply);
        });
  });
  if (!listen.ok()) {
    std::cerr << "shoal launch: " << listen.message() << "\n";
    return 1;
  }
  std::string launcher_address = absl::StrCat(host, ":", server->port());

  int exit_code = 0;
  std::string summary;
  proto::GangInfo gang;
  gang.set_gang_id(RandomHex(4));
  for (const auto& a : options.argv) gang.add_argv(ToValidUtf8(a));
  gang.set_per_host(options.per_host);
  gang.set_placement_group_id(group.id());
  gang.set_max_restarts(options.max_restarts);
  gang.set_start_time_ms(NowMs());
  if (const char* job = getenv("SHOAL_JOB_SUBMISSION_ID")) gang.set_job_id(job);
  gang.set_launcher(absl::StrCat(Hostname(), " pid ", getpid()));
  std::set<std::string> excluded_nodes;  // seen dead: not placed on again
  for (int attempt = 0;; ++attempt) {
    {
      std::lock_guard<std::mutex> lock(state.mu);
      state.launch_id = absl::StrCat(gang.gang_id(), "-", attempt);
      state.stop = false;
      state.have_failure = false;
      state.exits.clear();
      state.exits_changed = false;
      gang.set_restarts(attempt);
      SetGangRanks(rank_hosts, hosts, state.launch_id, &gang);
    }
    ReportGang(gang);
    std::vector<ObjectRef<std::string>> runners;
    for (size_t i = 0; i < hosts.size(); ++i) {
      proto::LaunchHostSpec spec;
      spec.set_launch_id(state.launch_id);
      spec.set_launcher_address(launcher_address);
      spec.set_host_index(static_cast<int>(i));
      for (const auto& a : options.argv) spec.add_argv(a);
      for (const auto& h : hosts) *spec.add_hosts() = h;
      spec.set_per_host(options.per_host);
      spec.set_restart_count(attempt);
      spec.set_token(token);
      auto task = Task(RunLaunchHost)
                      .SetPlacementGroup(group, static_cast<int>(i))
                      .SetMaxRetries(0);
      if (hosts[i].kind() != "CPU" &&
          (slice_gang || bundle_devices.count(hosts[i].kind()))) {
        task.SetResource(hosts[i].kind(), hosts[i].num_devices());
      }
      runners.push_back(task.Remote(spec.SerializeAsString()));
    }
    // Collect runners as they finish: a runner that fails (its host died)
    // stops the others too. Success needs every process of the gang to have
    // run to its end and exited 0, as the runners themselves report it (the
    // streamed reports may have been lost).
    std::string runner_error;
    std::set<std::string> lost_nodes;  // whose runner's worker died
    int exited_zero = 0;
    std::vector<proto::LaunchExit> unreported;  // non-zero, from results
    std::vector<bool> done(runners.size(), false);
    for (size_t finished = 0; finished < runners.size();) {
      Wait(runners, runners.size(), 200);
      bool exits_changed = false;
      {
        std::lock_guard<std::mutex> lock(state.mu);
        if (state.exits_changed) {
          state.exits_changed = false;
          exits_changed = true;
          SetGangExits(state.exits, &gang);
        }
      }
      if (exits_changed) ReportGang(gang);
      for (size_t i = 0; i < runners.size(); ++i) {
        if (done[i] || !Wait(std::vector{runners[i]}, 1, 0).not_ready.empty()) {
          continue;
        }
        done[i] = true;
        ++finished;
        std::string error;
        try {
          proto::LaunchHostResult result;
          if (!result.ParseFromString(Get(runners[i]))) {
            result.set_error(absl::StrCat("the runner on host ", i,
                                          " sent a malformed result"));
          }
          error = result.error();
          for (const proto::LaunchExit& e : result.exits()) {
            if (e.exit_code() == 0) {
              ++exited_zero;
            } else {
              unreported.push_back(e);
            }
          }
          if (error.empty() && result.exits_size() < result.num_processes()) {
            error =
                absl::StrCat("the runner on host ", i, " (", hosts[i].address(),
                             ") accounted for ", result.exits_size(),
                             " of its ", result.num_processes(), " processes");
          }
        } catch (const Error& e) {
          error = absl::StrCat("the runner on host ", i, " (",
                               hosts[i].address(), ", node ",
                               hosts[i].node_id(), ") failed: ", e.what());
          if (dynamic_cast<const WorkerDiedError*>(&e) != nullptr) {
            lost_nodes.insert(hosts[i].node_id());
          }
        }
        if (!error.empty()) {
          if (runner_error.empty()) runner_error = error;
          std::lock_guard<std::mutex> lock(state.mu);
          state.stop = true;
        }
      }
      if (g_interrupted) {
        std::lock_guard<std::mutex> lock(state.mu);
        state.stop = true;
      }
    }
    proto::LaunchExit failure;
    bool failed;
    {
      std::lock_guard<std::mutex> lock(state.mu);
      failed = state.have_failure;
      failure = state.first_failure;
    }
    // A process that failed on its own, which the launcher never heard of
    // (its report was lost).
    for (const proto::LaunchExit& e : unreported) {
      if (failed) break;
      if (e.stopped()) continue;
      failed = true;
      failure = e;
    }
    if (!failed && runner_error.empty() && !g_interrupted &&
        exited_zero == expected_processes) {
      summary = absl::StrCat("shoal launch: all ", exited_zero,
                             " processes exited 0");
      exit_code = 0;
      break;
    }
    if (g_interrupted) {
      summary =
          "shoal launch: interrupted; every process of the gang was stopped";
      exit_code = 130;
      break;
    }
    // A host of the gang died (its runner with it): with restarts left,
    // the gang is placed again on nodes that are alive and starts over.
    if (!failed && !lost_nodes.empty() && !slice_gang &&
        attempt < options.max_restarts) {
      std::cout << "shoal launch: " << runner_error
                << "; placing the gang again (restart " << attempt + 1 << " of "
                << options.max_restarts << ")\n";
      std::cout.flush();
      excluded_nodes.insert(lost_nodes.begin(), lost_nodes.end());
      try {
        RemovePlacementGroup(group);
        bool busy_again = false;
        ReserveNodes(options, gang_nodes, nproc, excluded_nodes, &group,
                     &host_ids, &bundle_devices, &busy_again);
      } catch (const Error& e) {
        summary = absl::StrCat("shoal launch: ", runner_error,
                               "; the gang cannot be placed again: ", e.what());
        exit_code = 1;
        break;
      }
      hosts.clear();
      for (const std::string& id : host_ids) {
        for (const NodeInfo& n : Nodes()) {
          if (n.node_id == id) hosts.push_back(DescribeHost(n, nproc));
        }
      }
      gang.set_placement_group_id(group.id());
      continue;
    }
    if (!failed) {
      if (runner_error.empty()) {
        runner_error = absl::StrCat(exited_zero, " of ", expected_processes,
                                    " processes ran to their end and exited "
                                    "0; the others were stopped");
      }
      summary = absl::StrCat("shoal launch: ", runner_error);
      exit_code = 1;
      break;
    }
    exit_code = failure.exit_code();
    summary = absl::StrCat("shoal launch: rank ", failure.rank(),
                           " failed first: ", failure.description(),
                           "; the gang was stopped");
    bool restartable = attempt < options.max_restarts &&
                       options.no_restart_on.count(exit_code) == 0;
    if (!restartable) {
      if (attempt < options.max_restarts) {
        absl::StrAppend(&summary, " (exit code ", exit_code,
                        " is in --no-restart-on: not restarted)");
      }
      break;
    }
    std::cout << summary << "; restarting the gang (restart " << attempt + 1
              << " of " << options.max_restarts << ")\n";
  }
  std::cout << summary << "\n";
  std::cout.flush();
  {
    std::lock_guard<std::mutex> lock(state.mu);
    SetGangExits(state.exits, &gang);
  }
  gang.set_state(exit_code == 0  ? proto::GangInfo::SUCCEEDED
                 : g_interrupted ? proto::GangInfo::STOPPED
                                 : proto::GangInfo::FAILED);
  gang.set_message(summary.substr(std::string("shoal launch: ").size()));
  gang.set_end_time_ms(NowMs());
  ReportGang(gang);
  (*loop)->RunSync([&] { server->Shutdown(); });
  (*loop)->Stop();
  try {
    RemovePlacementGroup(group);
  } catch (const Error&) {
  }
  Shutdown();
  return exit_code;
}

}  // namespace shoal::launch
