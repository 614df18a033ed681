#include "common/process.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <mutex>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "common/environment.h"
#include "common/files.h"

extern char** environ;

namespace shoal {
namespace {

// The mask this process started with, once KeepNewFilesPrivate replaced
// it; -1 before.
int g_started_with_umask = -1;

}  // namespace

void KeepNewFilesPrivate() {
  mode_t was = umask(077);
  if (g_started_with_umask < 0) g_started_with_umask = static_cast<int>(was);
}

absl::StatusOr<std::string> MakeTempFile(const std::string& prefix) {
  std::string path =
      absl::StrCat(env::Get(env::Var::kTmpdir), "/", prefix, "XXXXXX");
  int fd = mkstemp(path.data());
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot make a temp file ", path, ": ", strerror(errno)));
  }
  close(fd);
  return path;
}

absl::Status RunToEnd(const std::vector<std::string>& argv) {
  absl::StatusOr<std::string> log = MakeTempFile("shoal-command-log-");
  if (!log.ok()) return log.status();
  SpawnOptions command;
  command.argv = argv;
  command.log_path = *log;
  absl::StatusOr<pid_t> pid = Spawn(command);
  int status = 0;
  if (pid.ok()) {
    while (waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  std::string printed = ReadFile(*log).value_or("");
  unlink(log->c_str());
  if (pid.ok() && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    return absl::OkStatus();
  }
  std::string line;
  for (const std::string& arg : argv) absl::StrAppend(&line, " ", arg);
  return absl::InternalError(
      absl::StrCat("`", line.substr(1), "` ",
                   pid.ok() ? DescribeWaitStatus(status)
                            : std::string(pid.status().message()),
                   printed.empty() ? "" : ": ", printed));
}

namespace {

// This process's environment with `options`' changes.
std::map<std::string, std::string> ChildEnvironment(
    const SpawnOptions& options) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = strchr(*e, '=');
    if (eq == nullptr) continue;
    env[std::string(*e, eq - *e)] = eq + 1;
  }
  for (const auto& name : options.unset_env) env.erase(name);
  for (const auto& [k, v] : options.env) env[k] = v;
  return env;
}

// Where `program` is: as given when it names a path, else looked up on the
// child's PATH, as a shell would ("python3", "torchrun").
absl::StatusOr<std::string> FindProgram(
    const std::string& program, const std::map<std::string, std::string>& env) {
  if (program.find('/') != std::string::npos) return program;
  auto path = env.find("PATH");
  std::string dirs =
      path != env.end() ? path->second : "/usr/local/bin:/usr/bin:/bin";
  for (size_t begin = 0; begin <= dirs.size();) {
    size_t end = dirs.find(':', begin);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(begin, end - begin);
    std::string candidate =
        (dir.empty() ? std::string(".") : dir) + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    begin = end + 1;
  }
  return absl::NotFoundError(absl::StrCat(
      "cannot run ", program, ": no such program on PATH (", dirs, ")"));
}

// What the child does between fork() and exec: only async-signal-safe
// calls. Writes exec's errno to `status_fd` when exec fails.
[[noreturn]] void ExecChild(const SpawnOptions& options, pid_t parent,
                            int child_umask, int log_fd, int status_fd,
                            const std::string& exec_path, char** argv,
                            char** envp) {
  if (options.die_with_parent) {
    prctl(PR_SET_PDEATHSIG, options.parent_death_signal);
    if (getppid() != parent) _exit(127);
  }
  if (options.new_session) setsid();
  if (child_umask >= 0) umask(static_cast<mode_t>(child_umask));
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  int devnull = open("/dev/null", O_RDONLY);
  if (devnull >= 0) dup2(devnull, 0);
  if (log_fd >= 0) {
    dup2(log_fd, 1);
    dup2(log_fd, 2);
  } else if (options.output_fd >= 0) {
    dup2(options.output_fd, 1);
    dup2(options.output_fd, 2);
  }
  execve(exec_path.c_str(), argv, envp);
  int err = errno;
  ssize_t n = write(status_fd, &err, sizeof(err));
  (void)n;
  _exit(127);
}

}  // namespace

absl::StatusOr<pid_t> Spawn(const SpawnOptions& options) {
  if (options.argv.empty()) {
    return absl::InvalidArgumentError("nothing to run");
  }
  // Everything the child needs is built before fork().
  std::map<std::string, std::string> env = ChildEnvironment(options);
  std::vector<std::string> env_strings;
  env_strings.reserve(env.size());
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  absl::StatusOr<std::string> exec_path = FindProgram(options.argv[0], env);
  if (!exec_path.ok()) return exec_path.status();
  std::vector<std::string> argv_strings = options.argv;
  std::vector<char*> argv;
  for (auto& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  int log_fd = -1;
  if (!options.log_path.empty()) {
    // Logs hold what a job prints (secrets included): its user's only.
    log_fd = open(options.log_path.c_str(),
                  O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (log_fd < 0) {
      return absl::InternalError(absl::StrCat(
          "cannot open log ", options.log_path, ": ", strerror(errno)));
    }
  }
  // A pipe that closes on a successful exec tells the parent whether exec
  // worked.
  int status_pipe[2];
  if (pipe2(status_pipe, O_CLOEXEC) != 0) {
    if (log_fd >= 0) close(log_fd);
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }
  pid_t parent = getpid();
  const int child_umask = g_started_with_umask;
  pid_t pid = fork();
  if (pid < 0) {
    int err = errno;
    if (log_fd >= 0) close(log_fd);
    close(status_pipe[0]);
    close(status_pipe[1]);
    return absl::ResourceExhaustedError(absl::StrCat("fork: ", strerror(err)));
  }
  if (pid == 0) {
    ExecChild(options, parent, child_umask, log_fd, status_pipe[1], *exec_path,
              argv.data(), envp.data());
  }
  close(status_pipe[1]);
  if (log_fd >= 0) close(log_fd);
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(status_pipe[0], &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  close(status_pipe[0]);
  if (n == sizeof(child_errno)) {
    waitpid(pid, nullptr, 0);
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot run ", options.argv[0], ": ", strerror(child_errno)));
  }
  return pid;
}

void TerminateProcess(pid_t pid, int grace_ms) {
  if (pid <= 0) return;
  if (kill(pid, SIGTERM) != 0) return;
  for (int waited = 0; waited < grace_ms; waited += 10) {
    int status;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && !ProcessAlive(pid))) return;
    usleep(10000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, WNOHANG);
}

void IgnoreSigpipeUnlessHandled() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action = {};
    if (sigaction(SIGPIPE, nullptr, &action) == 0 &&
        (action.sa_flags & SA_SIGINFO) == 0 && action.sa_handler == SIG_DFL) {
      action.sa_handler = SIG_IGN;
      sigaction(SIGPIPE, &action, nullptr);
    }
  });
}

int RunGroupGuard(char** argv, int grace_ms) {
  // The command is not a role of Shoal's.
  unsetenv("SHOAL_ROLE");
  unsetenv("SHOAL_GROUP_GUARD_GRACE_MS");
  const pid_t parent = getppid();
  sigset_t watched;
  sigemptyset(&watched);
  for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&watched, sig);
  sigprocmask(SIG_BLOCK, &watched, nullptr);
  // Spawn set SIGKILL, which would end the guard alone: SIGTERM is heard.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  bool stopping = getppid() != parent;  // the parent is gone already
  pid_t child = fork();
  if (child < 0) {
    fprintf(stderr, "shoal: cannot start the job: fork: %s\n", strerror(errno));
    return 127;
  }
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execvp(argv[0], argv);
    fprintf(stderr, "shoal: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  int64_t kill_at_us = 0;
  // `tell`: the group has not heard it (the parent died; a stop sent to
  // the whole group, as the agent sends, reached the command already).
  auto stop_group = [&](bool tell) {
    if (kill_at_us != 0) return;
    if (tell) kill(-getpgrp(), SIGTERM);  // the guard blocks it
    kill_at_us = MonotonicUs() + int64_t{grace_ms} * 1000;
  };
  if (stopping) stop_group(/*tell=*/true);
  int status = 0;
  for (;;) {
    if (waitpid(child, &status, WNOHANG) == child) break;
    timespec wait_for = {0, 100 * 1000 * 1000};
    int sig = sigtimedwait(&watched, nullptr, &wait_for);
    if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP) {
      stop_group(/*tell=*/getppid() != parent);
    }
    if (kill_at_us != 0 && MonotonicUs() >= kill_at_us) {
      kill(child, SIGKILL);
      kill(-getpgrp(), SIGKILL);  // ends the guard too: the group is done
    }
  }
  if (kill_at_us != 0) {
    // Asked to stop: what the command left in the group goes with it.
    kill(-getpgrp(), SIGKILL);
  }
  if (WIFSIGNALED(status)) {
    // Ends the way the command did, for whoever waits for the guard.
    int sig = WTERMSIG(status);
    signal(sig, SIG_DFL);
    sigset_t only;
    sigemptyset(&only);
    sigaddset(&only, sig);
    sigprocmask(SIG_UNBLOCK, &only, nullptr);
    raise(sig);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
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

namespace {

// Where this process's command line lies: [arg_start, arg_end) of
// /proc/self/stat (fields 48 and 49); empty when it cannot be read.
std::pair<char*, size_t> CommandLineMemory() {
  auto stat = ReadFile("/proc/self/stat");
  if (!stat.ok()) return {nullptr, 0};
  size_t paren = stat->rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat->size()) {
    return {nullptr, 0};
  }
  // The fields after the command's name start at field 3 (its state).
  std::vector<std::string> fields =
      absl::StrSplit(stat->substr(paren + 2), ' ');
  uint64_t begin = 0, end = 0;
  if (fields.size() < 47 || !absl::SimpleAtoi(fields[45], &begin) ||
      !absl::SimpleAtoi(fields[46], &end) || end <= begin) {
    return {nullptr, 0};
  }
  return {reinterpret_cast<char*>(begin), static_cast<size_t>(end - begin)};
}

}  // namespace

void SetProcessTitle(std::string_view title) {
  static std::mutex mu;
  static std::pair<char*, size_t> memory = CommandLineMemory();
  {
    std::lock_guard<std::mutex> lock(mu);
    auto [start, size] = memory;
    if (start != nullptr) {
      // Ends in NUL, so that the kernel reads the title alone.
      size_t n = std::min(title.size(), size - 1);
      memcpy(start, title.data(), n);
      memset(start + n, 0, size - n);
    }
  }
  std::string name(title.substr(0, 15));
  prctl(PR_SET_NAME, name.c_str());
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
