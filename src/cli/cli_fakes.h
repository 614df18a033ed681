// Fakes for the CLI's unit tests: a host whose processes are entries in a
// table, a head that answers from fixed replies, and a runner of command
// lines that captures what they print. No socket is opened and no process
// started.
#ifndef SHOAL_CLI_CLI_FAKES_H_
#define SHOAL_CLI_CLI_FAKES_H_

#include <signal.h>
#include <stdlib.h>

#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/cli.h"
#include "cli/cluster_api.h"
#include "cli/context.h"
#include "cli/host.h"
#include "common/files.h"
#include "gtest/gtest.h"

namespace shoal::cli::testing {

// Processes are pids in a table: "started" ones get the next pid, "live"
// ones are what LivePid reports, and a signal ends one unless it is
// stubborn (then only SIGKILL does).
class FakeHost : public Host {
 public:
  struct Signal {
    int64_t pid;
    int signal;
  };

  absl::StatusOr<pid_t> StartDaemon(const DaemonSpec& spec) override {
    started.push_back(spec);
    if (fail_start) {
      if (absl::Status st = fail_start(spec); !st.ok()) return st;
    }
    // What the real head and agent write once they are up.
    const std::string& dir = spec.session_dir;
    if (spec.log_name == "head") {
      std::string host = ArgAfter(spec.argv, "--node-ip-address");
      std::string port = ArgAfter(spec.argv, "--port");
      WriteFile(dir + "/cluster_address",
                absl::StrCat(host, ":", port == "0" ? "41000" : port))
          .IgnoreError();
      if (ArgAfter(spec.argv, "--dashboard-port") != "-1") {
        WriteFile(dir + "/dashboard_address", host + ":8265").IgnoreError();
      }
    } else {
      WriteFile(dir + "/node_id", "node-1").IgnoreError();
      WriteFile(dir + "/agent_address", "127.0.0.1:42000").IgnoreError();
    }
    pid_t pid = next_pid++;
    alive[pid] = true;
    return pid;
  }
  int64_t LivePid(const std::string& session_dir,
                  const std::string& name) override {
    auto it = live.find(session_dir + "/" + name);
    if (it == live.end() || !Alive(it->second)) return 0;
    return it->second;
  }
  bool Alive(int64_t pid) override {
    auto it = alive.find(pid);
    return it != alive.end() && it->second;
  }
  void Signal(int64_t pid, int signal) override {
    signals.push_back({pid, signal});
    if (signal == SIGKILL || !stubborn.count(pid)) alive[pid] = false;
  }
  void Terminate(int64_t pid, int grace_ms) override {
    terminated.push_back(pid);
    alive[pid] = false;
  }
  void SleepMs(int64_t ms) override { slept_ms += ms; }
  void RemoveStaleArenas() override { ++arena_sweeps; }
  void BlockStopSignals() override { blocked = true; }
  std::optional<int> AwaitStop(pid_t child) override {
    awaited = child;
    return child_ends;
  }

  // A live process `name` (head, agent) of session `dir`.
  void SetLive(const std::string& dir, const std::string& name, int64_t pid) {
    live[dir + "/" + name] = pid;
    alive[pid] = true;
  }

  static std::string ArgAfter(const std::vector<std::string>& argv,
                              const std::string& flag) {
    for (size_t i = 0; i + 1 < argv.size(); ++i) {
      if (argv[i] == flag) return argv[i + 1];
    }
    return "";
  }

  std::vector<DaemonSpec> started;
  std::function<absl::Status(const DaemonSpec&)> fail_start;
  std::map<std::string, int64_t> live;
  std::map<int64_t, bool> alive;
  std::set<int64_t> stubborn;
  std::vector<struct Signal> signals;
  std::vector<int64_t> terminated;
  int64_t slept_ms = 0;
  int arena_sweeps = 0;
  bool blocked = false;
  std::optional<pid_t> awaited;
  std::optional<int> child_ends;  // AwaitStop's answer: nullopt = a signal
  pid_t next_pid = 1000;
};

// A head that answers from the replies a test sets, and records requests.
class FakeCluster : public ClusterApi {
 public:
  absl::StatusOr<proto::ClusterStatus> ClusterStatus(int64_t) override {
    ++status_calls;
    return status;
  }
  absl::StatusOr<proto::JobInfo> SubmitJob(const proto::JobSpec& s) override {
    submitted.push_back(s);
    return submit_reply;
  }
  absl::StatusOr<proto::JobInfo> GetJob(const proto::JobRef& job) override {
    job_refs.push_back(job.submission_id());
    if (job_states.empty()) return absl::NotFoundError("no such job");
    absl::StatusOr<proto::JobInfo> info = job_states.front();
    if (job_states.size() > 1) job_states.pop_front();
    return info;
  }
  absl::StatusOr<proto::JobList> ListJobs() override { return jobs; }
  absl::StatusOr<proto::JobInfo> StopJob(const proto::JobRef& job) override {
    stopped.push_back(job.submission_id());
    return stop_reply;
  }
  absl::StatusOr<proto::JobLogs> GetJobLogs(
      const proto::JobLogsRequest& request) override {
    log_requests.push_back(request);
    if (job_logs.empty()) return absl::UnavailableError("head gone");
    proto::JobLogs logs = job_logs.front();
    job_logs.pop_front();
    return logs;
  }
  absl::Status AttachWorkingDir(const std::string& dir,
                                proto::JobSpec* spec) override {
    attached.push_back(dir);
    return absl::OkStatus();
  }
  absl::StatusOr<proto::TaskList> ListTasks(
      const proto::ListTasksRequest& request) override {
    task_requests.push_back(request);
    return tasks;
  }
  absl::StatusOr<proto::ObjectList> ListObjects(
      const proto::ListObjectsRequest&) override {
    return objects;
  }
  absl::StatusOr<proto::GangList> ListGangs() override { return gangs; }
  absl::StatusOr<proto::LogList> ListLogs(
      const proto::ListLogsRequest&) override {
    return logs;
  }
  absl::StatusOr<proto::LogChunk> ReadLog(
      const proto::ReadLogRequest& request) override {
    read_requests.push_back(request);
    return chunk;
  }

  absl::StatusOr<proto::ClusterStatus> status = proto::ClusterStatus();
  int status_calls = 0;
  proto::JobInfo submit_reply;
  std::vector<proto::JobSpec> submitted;
  std::deque<absl::StatusOr<proto::JobInfo>> job_states;
  std::vector<std::string> job_refs;
  proto::JobList jobs;
  proto::JobInfo stop_reply;
  std::vector<std::string> stopped;
  std::deque<proto::JobLogs> job_logs;
  std::vector<proto::JobLogsRequest> log_requests;
  std::vector<std::string> attached;
  proto::TaskList tasks;
  std::vector<proto::ListTasksRequest> task_requests;
  proto::ObjectList objects;
  proto::GangList gangs;
  proto::LogList logs;
  proto::LogChunk chunk;
  std::vector<proto::ReadLogRequest> read_requests;
};

// What a command line did.
struct Ran {
  int code = -1;
  std::string out, err;
  std::vector<std::pair<std::string, std::string>> connections;  // addr, token
  std::string interrupt_note;
};

// Runs `shoal ARGS...` against `host` and `cluster` (connections to any
// address reach it, unless `refuse` says why not).
class Shoal {
 public:
  Ran Run(std::vector<std::string> args) {
    args.insert(args.begin(), "shoal");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    std::ostringstream out, err;
    Ran ran;
    Context ctx{&out, &err, &host,
                [&](const std::string& address, const std::string& token)
                    -> absl::StatusOr<std::unique_ptr<ClusterApi>> {
                  ran.connections.emplace_back(address, token);
                  if (!refuse.ok()) return refuse;
                  return std::unique_ptr<ClusterApi>(new Borrowed(cluster));
                },
                [&](const std::string& note) { ran.interrupt_note = note; }};
    ran.code = Main(static_cast<int>(argv.size()), argv.data(), ctx);
    ran.out = out.str();
    ran.err = err.str();
    return ran;
  }

  FakeHost host;
  FakeCluster cluster;
  absl::Status refuse = absl::OkStatus();

 private:
  // The test's cluster, lent to one command.
  class Borrowed : public ClusterApi {
   public:
    explicit Borrowed(FakeCluster& c) : c_(c) {}
    absl::StatusOr<proto::ClusterStatus> ClusterStatus(int64_t t) override {
      return c_.ClusterStatus(t);
    }
    absl::StatusOr<proto::JobInfo> SubmitJob(const proto::JobSpec& s) override {
      return c_.SubmitJob(s);
    }
    absl::StatusOr<proto::JobInfo> GetJob(const proto::JobRef& j) override {
      return c_.GetJob(j);
    }
    absl::StatusOr<proto::JobList> ListJobs() override { return c_.ListJobs(); }
    absl::StatusOr<proto::JobInfo> StopJob(const proto::JobRef& j) override {
      return c_.StopJob(j);
    }
    absl::StatusOr<proto::JobLogs> GetJobLogs(
        const proto::JobLogsRequest& r) override {
      return c_.GetJobLogs(r);
    }
    absl::Status AttachWorkingDir(const std::string& d,
                                  proto::JobSpec* s) override {
      return c_.AttachWorkingDir(d, s);
    }
    absl::StatusOr<proto::TaskList> ListTasks(
        const proto::ListTasksRequest& r) override {
      return c_.ListTasks(r);
    }
    absl::StatusOr<proto::ObjectList> ListObjects(
        const proto::ListObjectsRequest& r) override {
      return c_.ListObjects(r);
    }
    absl::StatusOr<proto::GangList> ListGangs() override {
      return c_.ListGangs();
    }
    absl::StatusOr<proto::LogList> ListLogs(
        const proto::ListLogsRequest& r) override {
      return c_.ListLogs(r);
    }
    absl::StatusOr<proto::LogChunk> ReadLog(
        const proto::ReadLogRequest& r) override {
      return c_.ReadLog(r);
    }

   private:
    FakeCluster& c_;
  };
};

// A fresh folder for one test, removed after it; SHOAL_* variables that
// would point the commands elsewhere are unset, and the default temp dir
// is the test's own.
class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name :
         {"SHOAL_ADDRESS", "SHOAL_TOKEN", "SHOAL_TLS_CERT", "SHOAL_TLS_KEY",
          "SHOAL_TLS_CA", "SHOAL_TLS_MUTUAL", "SHOAL_HEAD_TIMEOUT_S"}) {
      unsetenv(name);
    }
    char pattern[] = "/tmp/shoal-cli-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    setenv("SHOAL_TEMP_DIR", (dir_ + "/default").c_str(), 1);
  }
  void TearDown() override {
    unsetenv("SHOAL_TEMP_DIR");
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  std::string dir_;
};

}  // namespace shoal::cli::testing

#endif  // SHOAL_CLI_CLI_FAKES_H_
