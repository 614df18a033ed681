#include "cli/start_command.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ostream>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/cluster_api.h"
#include "cli/context.h"
#include "cli/daemon_args.h"
#include "cli/exit_status.h"
#include "cli/host.h"
#include "cli/session_files.h"
#include "cli/start_report.h"
#include "common/environment.h"
#include "common/files.h"
#include "common/net.h"
#include "common/process.h"
#include "common/random.h"
#include "common/session.h"
#include "common/shell_quote.h"
#include "common/status_macros.h"
#include "head/head_storage.h"
#include "head/redis_storage.h"

namespace shoal::cli::start {
namespace {

constexpr char kDiscardWalUse[] =
    "--discard-wal is for a head (--head) that keeps its state in SQLite: "
    "it sets a damaged write-ahead log (head.db-wal) aside";

// (A head taking up a session keeps the storage the session names.)
bool DiscardWalMisused(const Flags& f, const std::string& storage) {
  return f.discard_wal && (!f.head || storage == "memory" ||
                           absl::StartsWith(storage, "redis://"));
}

// The port at the end of HOST:PORT (0 when there is none).
int PortOf(const std::string& address) {
  int port = 0;
  absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port);
  return port;
}

// ` --temp-dir DIR` when start was given one, for the commands it prints:
// without it they would look in the default temp dir. (A temp dir from
// SHOAL_TEMP_DIR is the user's default: their shell has it.)
std::string GivenTempDir(const Flags& f) {
  return f.temp_dir.empty() ? "" : Absolute(f.temp_dir);
}

// Who holds host:port: a Shoal head started from a temp dir we know (named
// by session and pid), another cluster's Shoal head (it answers our hello),
// or another program.
std::string DescribeListener(const std::string& host, int port,
                             const std::string& temp_dir, Context& ctx) {
  std::string address = absl::StrCat(host, ":", port);
  for (const std::string& td : {temp_dir, DefaultTempDir()}) {
    for (const std::string& d : ListSessionDirs(td)) {
      if (ctx.host->LivePid(d, "head") != 0 &&
          ReadSessionFile(d, "cluster_address") == address) {
        return absl::StrCat(" by a running Shoal head (session ", d, ", pid ",
                            ctx.host->LivePid(d, "head"), ")");
      }
    }
  }
  absl::StatusOr<std::unique_ptr<ClusterApi>> probe =
      ctx.connect(address, "probe");
  if (probe.ok()) {
    auto status = (*probe)->ClusterStatus(2000);
    if (!status.ok() &&
        status.status().code() == absl::StatusCode::kPermissionDenied) {
      return absl::StrCat(" by a running Shoal head at ", address,
                          " (started from another temp dir; `shoal status "
                          "--address ",
                          ShellQuote(address), "` shows it)");
    }
  }
  return " by another program";
}

// A head runs from `dir` without its node agent: a start was killed
// between the two, or the agent died. Starts the agent, with `f`'s flags.
absl::StatusOr<int> StartMissingAgent(const Flags& f, const std::string& dir,
                                      int64_t head_pid, Context& ctx) {
  const std::string address = ReadSessionFile(dir, "cluster_address");
  *ctx.out << "A Shoal head is already running from " << dir << " (pid "
           << head_pid << ", address " << address
           << "), without its node agent: starting it.\n";
  unlink((dir + "/agent_address").c_str());
  absl::StatusOr<pid_t> agent = ctx.host->StartDaemon(
      {AgentArgs(f, SelfExecutable(), address, dir), dir,
       ReadSessionFile(dir, "token"), "agent", "agent_address", false});
  if (!agent.ok()) {
    return absl::UnavailableError("cannot start the node agent: " +
                                  std::string(agent.status().message()));
  }
  *ctx.out << "Node agent started: node " << ReadSessionFile(dir, "node_id")
           << " at " << ReadSessionFile(dir, "agent_address") << ".\n"
           << "To see the cluster:  shoal status"
           << TempDirFlag(GivenTempDir(f)) << "\n";
  return 0;
}

// One head and one node agent per temp dir: what `f` asks for may run
// already. The exit status when it does (nothing more to do), else nullopt.
absl::StatusOr<std::optional<int>> StartOnRunning(const Flags& f,
                                                  const std::string& temp_dir,
                                                  Context& ctx) {
  const std::string temp_dir_flag = TempDirFlag(GivenTempDir(f));
  for (const std::string& dir : ListSessionDirs(temp_dir)) {
    int64_t head_pid = ctx.host->LivePid(dir, "head");
    int64_t agent_pid = ctx.host->LivePid(dir, "agent");
    if (f.head && head_pid != 0) {
      // Starting what already runs does nothing, as joining twice does; a
      // head on another port than the one asked for is not what was asked.
      const std::string address = ReadSessionFile(dir, "cluster_address");
      if (f.port == 0 || f.port == PortOf(address)) {
        // A start killed while it took this session up left the crashed
        // head's files set aside; its head came up all the same.
        SessionResume::ForgetSetAside(dir);
        if (agent_pid == 0) return StartMissingAgent(f, dir, head_pid, ctx);
        *ctx.out << "A Shoal head is already running from " << temp_dir
                 << " (pid " << head_pid << ", address " << address
                 << ", session " << dir << "); nothing to do.\n"
                 << "To see the cluster:  shoal status" << temp_dir_flag
                 << "\nTo start it again with other options, stop it "
                    "first:  shoal stop"
                 << temp_dir_flag << "\n";
        return 0;
      }
      return absl::AlreadyExistsError(absl::StrCat(
          "a head is already running from ", temp_dir, ": pid ", head_pid,
          ", address ", address, " (not port ", f.port, "), session ", dir,
          ". Stop it first with `shoal stop --temp-dir ", ShellQuote(temp_dir),
          "`, or use another --temp-dir and --port"));
    }
    if (!f.head && agent_pid != 0) {
      *ctx.out << "A node agent is already running from " << temp_dir
               << " (pid " << agent_pid << ", node "
               << ReadSessionFile(dir, "node_id") << ", joined "
               << ReadSessionFile(dir, "cluster_address")
               << "); nothing to do.\n";
      return 0;
    }
  }
  return std::nullopt;
}

// The token to start with: --token, else SHOAL_TOKEN; a node joining
// without either finds it in the session of the head it joins, when that
// was started on this host.
absl::StatusOr<std::string> StartToken(const Flags& f,
                                       const std::string& temp_dir) {
  std::string token = f.token.empty() ? env::Get(env::Var::kToken) : f.token;
  if (f.head || !token.empty()) return token;
  std::string address = f.address;
  ResolveClusterAddress(temp_dir, &address, &token).IgnoreError();
  if (token.empty()) {
    // Any head started on this host, whatever its temp dir.
    for (const std::string& td :
         {DefaultTempDir(), std::string("/tmp/shoal")}) {
      LocalCluster c = FindLocalCluster(td);
      if (c.head_address == f.address) token = c.token;
    }
  }
  if (token.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "joining ", f.address,
        " needs the cluster token: pass --token or set SHOAL_TOKEN (the "
        "head printed it; it is in the head's session folder, file token)"));
  }
  return token;
}

// One start, from its session folder to its processes running.
class Starter {
 public:
  Starter(const Flags& f, Context& ctx, std::string temp_dir, std::string token)
      : f_(f),
        ctx_(ctx),
        temp_dir_(std::move(temp_dir)),
        token_(std::move(token)),
        port_(f.port),
        storage_(f.storage),
        storage_sync_(f.storage_sync) {}

  absl::StatusOr<int> Start() {
    RETURN_IF_ERROR(OpenSession());
    if (f_.block) ctx_.host->BlockStopSignals();
    if (f_.head) {
      RETURN_IF_ERROR(StartHead());
    } else {
      head_address_ = f_.address;
      WriteFile(dir_ + "/cluster_address", head_address_).IgnoreError();
    }
    for (const auto& [name, contents] : write_when_up_) {
      WriteFile(dir_ + "/" + name, contents, 0600).IgnoreError();
    }
    WriteFile(dir_ + "/token", token_, 0600).IgnoreError();
    ASSIGN_OR_RETURN(pid_t agent_pid, StartAgent());
    if (resume_) resume_->Done();
    Report();
    if (!f_.block) return 0;
    return Block(agent_pid);
  }

 private:
  // A crashed head's session taken up, or a new one.
  absl::Status OpenSession() {
    const std::string resumed =
        f_.head ? CrashedHeadSession(temp_dir_, *ctx_.host) : "";
    if (resumed.empty()) {
      ASSIGN_OR_RETURN(dir_, CreateSessionDir(temp_dir_, &previous_latest_));
      return absl::OkStatus();
    }
    // A head that did not stop left its session and state: a head started
    // here again takes them up, on the same port and with the same token,
    // so that the cluster's agents and drivers find it again.
    dir_ = resumed;
    if (storage_.empty()) storage_ = ReadSessionFile(dir_, kStorageFile);
    if (DiscardWalMisused(f_, storage_)) return UsageError(kDiscardWalUse);
    if (storage_sync_.empty()) {
      storage_sync_ = ReadSessionFile(dir_, kStorageSyncFile);
    }
    std::string kept = ReadSessionFile(dir_, "token");
    if (!token_.empty() && token_ != kept) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the head of session ", dir_,
          " did not stop, and a head started "
          "here takes it up with its own token: leave out --token, or "
          "`shoal stop",
          TempDirFlag(GivenTempDir(f_)), "` first to start a new cluster"));
    }
    token_ = kept;
    // (A session of an earlier version may have been open to others.)
    KeepSessionPrivate(dir_);
    resume_.emplace(dir_);
    port_ = PortOf(resume_->Address());
    *ctx_.out << "Taking up session " << dir_
              << ": its head did not stop (it crashed or was killed).\n";
    return absl::OkStatus();
  }

  // Puts the session back as this start found it.
  void Undo() {
    if (resume_) {
      resume_->Restore();
    } else {
      AbandonSessionDir(temp_dir_, dir_, previous_latest_);
    }
  }

  // The head, with the session's storage; on failure the session is put
  // back as this start found it.
  absl::Status StartHead() {
    if (token_.empty()) token_ = RandomHex(16);
    const std::string host =
        f_.node_ip.empty() ? PrimaryIpAddress() : f_.node_ip;
    std::vector<std::string> argv =
        HeadArgs(f_, SelfExecutable(), {host, port_, dir_});
    // The storage goes to the head in a 0600 file, never in its arguments
    // (a Redis URL may hold a password). A session taken up with another
    // --storage keeps its own until the new head is up.
    std::string storage_path;
    if (!storage_.empty()) {
      const bool kept =
          resume_ && storage_ == ReadSessionFile(dir_, kStorageFile);
      storage_path = absl::StrCat(dir_, "/", kStorageFile, kept ? "" : ".next");
      if (!kept) {
        if (absl::Status st = WriteFile(storage_path, storage_, 0600);
            !st.ok()) {
          Undo();
          return absl::InternalError("cannot start the head: " +
                                     std::string(st.message()));
        }
        write_when_up_.emplace_back(kStorageFile, storage_);
      }
      argv.insert(argv.end(), {"--storage-file", storage_path});
    }
    if (!storage_sync_.empty()) {
      argv.insert(argv.end(), {"--storage-sync", storage_sync_});
      write_when_up_.emplace_back(kStorageSyncFile, storage_sync_);
    }
    if (f_.discard_wal) argv.push_back("--discard-wal");
    auto pid = ctx_.host->StartDaemon(
        {std::move(argv), dir_, token_, "head", "cluster_address", f_.block});
    if (absl::EndsWith(storage_path, ".next")) unlink(storage_path.c_str());
    if (!pid.ok()) {
      Undo();
      return HeadFailure(pid.status(), host);
    }
    head_pid_ = *pid;
    head_address_ = ReadSessionFile(dir_, "cluster_address");
    if (f_.discard_wal) {
      *ctx_.out << ReadSessionFile(dir_, kDiscardedWalFile) << "\n";
      unlink((dir_ + "/" + kDiscardedWalFile).c_str());
    }
    return absl::OkStatus();
  }

  // Why the head did not start, and what to do.
  absl::Status HeadFailure(const absl::Status& status,
                           const std::string& host) {
    std::string msg(status.message());
    if (msg.find("already in use") == std::string::npos) {
      return absl::UnavailableError("cannot start the head: " + msg);
    }
    // A head taking up a crashed session listens where the crashed one
    // did (its agents and drivers know that address), whatever --port.
    return absl::UnavailableError(absl::StrCat(
        "cannot start the head: ", host, ":", port_, " is already in use",
        DescribeListener(host, port_, temp_dir_, ctx_),
        resume_ ? ". The crashed head's agents and programs reconnect to "
                  "that port: stop what holds it, then run `shoal start "
                  "--head` again"
                : absl::StrCat(". Stop it with `shoal stop",
                               TempDirFlag(GivenTempDir(f_)),
                               "`, or choose another --port")));
  }

  // This host's node agent; a taken-up session whose agent still runs
  // keeps it.
  absl::StatusOr<pid_t> StartAgent() {
    pid_t running = static_cast<pid_t>(ctx_.host->LivePid(dir_, "agent"));
    own_agent_ = !resume_ || running == 0;
    if (!own_agent_) return running;
    unlink((dir_ + "/agent_address").c_str());
    absl::StatusOr<pid_t> pid = ctx_.host->StartDaemon(
        {AgentArgs(f_, SelfExecutable(), head_address_, dir_), dir_, token_,
         "agent", "agent_address", f_.block});
    if (!pid.ok()) {
      if (head_pid_) ctx_.host->Terminate(head_pid_, 3000);
      Undo();
      return absl::UnavailableError("cannot start the node agent: " +
                                    std::string(pid.status().message()));
    }
    return *pid;
  }

  void Report() {
    StartedNode node{dir_,
                     head_address_,
                     ReadSessionFile(dir_, "node_id"),
                     ReadSessionFile(dir_, "agent_address"),
                     GivenTempDir(f_),
                     rpc::TlsConfig::FromEnvironment()};
    if (f_.head) {
      ReportHeadStarted(
          node, token_,
          DashboardLine(ReadSessionFile(dir_, "dashboard_address"), token_),
          *ctx_.out);
    } else {
      ReportAgentStarted(node, *ctx_.out);
    }
    ctx_.out->flush();
  }

  // --block: until Ctrl-C (or SIGTERM), or until the node agent this
  // command started ends by itself (its head lost for --head-timeout-s):
  // then this command ends too, with its exit code, as the process a
  // container or service manager watches.
  absl::StatusOr<int> Block(pid_t agent_pid) {
    std::optional<int> ended = ctx_.host->AwaitStop(own_agent_ ? agent_pid : 0);
    if (ended) {
      *ctx_.err << "shoal: the node agent (pid " << agent_pid << ") "
                << DescribeWaitStatus(*ended) << "; see " << dir_
                << "/logs/agent.log\n";
      if (head_pid_) ctx_.host->Terminate(head_pid_, 5000);
      return WIFEXITED(*ended) && WEXITSTATUS(*ended) != 0 ? WEXITSTATUS(*ended)
                                                           : 1;
    }
    ctx_.host->Terminate(agent_pid, 5000);
    if (head_pid_) ctx_.host->Terminate(head_pid_, 5000);
    return 0;
  }

  const Flags& f_;
  Context& ctx_;
  const std::string temp_dir_;
  std::string token_;
  int port_;
  std::string storage_, storage_sync_;
  std::string dir_;
  std::optional<SessionResume> resume_;
  // A new session folder's start that fails leaves session_latest as it
  // was, so that the next start finds the session this temp dir had.
  std::string previous_latest_;
  pid_t head_pid_ = 0;
  std::string head_address_;
  bool own_agent_ = true;
  // Files of the session that change only once its head is up: a start
  // that fails, or is killed, leaves the ones of the crashed head.
  std::vector<std::pair<std::string, std::string>> write_when_up_;
};

}  // namespace

absl::Status CheckFlags(const Flags& f) {
  if (f.head && !f.address.empty()) {
    return UsageError(
        "say either --head (start a new cluster here) or --address HOST:PORT "
        "(join a cluster), not both");
  }
  if (!f.head && f.address.empty()) {
    return UsageError(
        "say --head (start a new cluster here) or --address HOST:PORT (join "
        "a cluster)");
  }
  if (absl::Status st = CheckAdvertised(f.advertised); !st.ok()) {
    return UsageError(st.message());
  }
  if (!f.node_id.empty()) {
    if (absl::Status st = CheckNodeId(f.node_id); !st.ok()) {
      return UsageError(st.message());
    }
  }
  if (f.head && f.health_timeout_ms < 2 * f.heartbeat_ms) {
    return UsageError(absl::StrCat(
        "--health-timeout-ms (", f.health_timeout_ms,
        ") must be at least twice --heartbeat-ms (", f.heartbeat_ms,
        "): a node would be declared dead between two of its heartbeats"));
  }
  if (StorageSync sync; !f.storage_sync.empty()) {
    if (absl::Status st = ParseStorageSync(f.storage_sync, &sync); !st.ok()) {
      return UsageError(st.message());
    }
  }
  if (absl::StartsWith(f.storage, "redis://")) {
    if (auto url = ParseRedisUrl(f.storage); !url.ok()) {
      return UsageError(url.status().message());
    }
  }
  if (DiscardWalMisused(f, f.storage)) return UsageError(kDiscardWalUse);
  // (ApplyTls loaded the files.) Heads and agents serve: with TLS they
  // need a certificate.
  if (auto tls = rpc::ProcessTls(); tls.ok() && *tls != nullptr) {
    if (absl::Status st = (*tls)->CheckCanServe(); !st.ok()) {
      return UsageError(st.message());
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int> Run(const Flags& f, Context& ctx) {
  const std::string temp_dir =
      f.temp_dir.empty() ? DefaultTempDir() : f.temp_dir;
  // Everything about the command line is checked before anything (a
  // session folder, a process) is made.
  RETURN_IF_ERROR(CheckFlags(f));
  ASSIGN_OR_RETURN(std::optional<int> done, StartOnRunning(f, temp_dir, ctx));
  if (done) return *done;
  ASSIGN_OR_RETURN(std::string token, StartToken(f, temp_dir));
  return Starter(f, ctx, temp_dir, std::move(token)).Start();
}

}  // namespace shoal::cli::start
