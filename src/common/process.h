// Starting and stopping child processes (the seam the agent and the CLI use).
#ifndef SHOAL_COMMON_PROCESS_H_
#define SHOAL_COMMON_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace shoal {

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is the executable path
  // Added to (or replacing in) this process's environment.
  std::map<std::string, std::string> env;
  std::vector<std::string> unset_env;
  std::string log_path;         // stdout and stderr, appended; empty: inherit
  int output_fd = -1;           // else stdout and stderr go here (e.g. a pipe)
  bool die_with_parent = true;  // PR_SET_PDEATHSIG(parent_death_signal)
  // SIGKILL (9) by default; SIGTERM (15) lets the child clean up first.
  int parent_death_signal = 9;
  bool new_session = false;  // setsid(): survives the caller's terminal
};

// fork + exec. The child only makes async-signal-safe calls before exec.
// Its file mode creation mask is the one this process started with (see
// KeepNewFilesPrivate), so that a user's program creates files as its
// user expects.
absl::StatusOr<pid_t> Spawn(const SpawnOptions& options);

// Makes every file and folder this process creates from now on readable and
// writable by its user only (umask 077): a head's or agent's session folder
// holds the cluster's token, the jobs' environments (secrets) and their
// logs. Call first thing in main, before any thread starts; processes that
// Spawn starts get the mask this process had before. Idempotent.
void KeepNewFilesPrivate();

// The body of a process group's guard (SHOAL_ROLE=group-guard, see
// src/entry.cc): runs `argv` (argv[0] looked up in PATH) as its child in
// the guard's own process group, and exits as the child does (the same
// code, or the same signal). When the guard's parent dies (even by
// SIGKILL), or the guard is asked to stop (SIGTERM, SIGINT, SIGHUP), it
// sends the whole group SIGTERM, and SIGKILL after `grace_ms`: what a job
// started is not left running after the node agent that ran it is gone.
// Start it with Spawn's new_session, so the group is the job's alone.
int RunGroupGuard(char** argv, int grace_ms);

// Runs `argv` (argv[0] looked up in PATH) to its end, its output kept
// aside. OK when it exits 0; else Internal naming the command, how it ended
// and what it printed.
absl::Status RunToEnd(const std::vector<std::string>& argv);

// A new empty file in the temp folder, named `prefix` and a random tail;
// its path. The caller removes it.
absl::StatusOr<std::string> MakeTempFile(const std::string& prefix);

// Sends SIGTERM, waits up to `grace_ms` for the process to go, then SIGKILL.
// Works for children (reaped here) and for other processes (polled).
void TerminateProcess(pid_t pid, int grace_ms);

// For code that writes to sockets without MSG_NOSIGNAL (Gloo, hiredis):
// writing to a peer that went away raises SIGPIPE, whose default action
// ends this process. Ignores SIGPIPE unless the program handles it, so that
// the write fails with EPIPE instead. Thread-safe; does its work once.
void IgnoreSigpipeUnlessHandled();

// Pids of the processes that have `path` open (from /proc/*/fd).
std::vector<int64_t> ProcessesHoldingFile(const std::string& path);

// Pids of the processes whose environment holds `name`=`value` (from
// /proc/*/environ; only processes this one may read).
std::vector<int64_t> ProcessesWithEnvironment(const std::string& name,
                                              const std::string& value);

// True while a process with this pid exists (signal 0).
bool ProcessAlive(int64_t pid);

// "exited with code 3", "killed by signal 9 (Killed)" for a waitpid status.
std::string DescribeWaitStatus(int status);

// This process's title as `ps` and /proc/<pid>/cmdline show it (Ray's
// "ray::f" for a worker running task f): `title` written over the memory
// of the command line it was started with, cut to that length, and the
// calling thread's name (`top`, /proc/<pid>/comm), cut to 15 bytes.
// Thread-safe. The strings of argv are overwritten: call it only in a
// program that copied what it needs of them (an interpreter has).
void SetProcessTitle(std::string_view title);

}  // namespace shoal

#endif  // SHOAL_COMMON_PROCESS_H_
