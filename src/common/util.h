// Small operating-system helpers shared by every Shoal process.
#ifndef SHOAL_COMMON_UTIL_H_
#define SHOAL_COMMON_UTIL_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct sockaddr_in;

namespace shoal {

// `bytes` random bytes from the kernel, hex encoded (2 * bytes characters).
std::string RandomHex(int bytes);
// A random non-zero 64-bit number from the kernel.
uint64_t RandomU64();
// `ms` give or take 10% (at least 1 ms), at random: periodic work of many
// processes started together (heartbeats) spreads out instead of coming in
// lockstep.
int64_t JitteredMs(int64_t ms);

int64_t NowMs();        // wall clock, milliseconds since the epoch
int64_t MonotonicUs();  // steady clock, microseconds

std::string Hostname();
// What tells apart hosts whose files differ: the kernel's boot id and the
// root file system's device and inode. Processes in network namespaces of
// one host share it (they see the same files); containers with their own
// root file system do not. "" when it cannot be read.
// SHOAL_HOST_ID, when set, is what this process calls its host instead:
// processes with one id must see the same files (e.g. containers on one
// machine, each with a root of its own, each given its own id).
std::string HostId();

// The IPv4 address of the interface that holds the default route, else the
// first non-loopback address that is up, else 127.0.0.1. Reads /proc and the
// interface list only: nothing is sent.
std::string PrimaryIpAddress();
// True when `ip` is assigned to an interface of this host (or is loopback).
bool IsLocalAddress(const std::string& ip);
// The name of this host's interface holding IPv4 address `ip` ("lo" for
// 127/8), or "" when none does.
std::string InterfaceOf(const std::string& ip);

// Splits "host:port". Fails with a message naming the expected form.
absl::Status SplitHostPort(const std::string& address, std::string* host,
                           int* port);

// Resolves "host:port" to an IPv4 socket address. InvalidArgument for a
// malformed address, Unavailable when the host does not resolve.
absl::Status ResolveAddress(const std::string& address, sockaddr_in* out);

// Faults in the whole pages inside [p, p + size) for writing, in one call
// (MADV_POPULATE_WRITE): about twice as fast on fresh shared memory as a
// fault per page while copying. Does nothing where the kernel lacks it.
void PrefaultForWrite(void* p, uint64_t size);

absl::StatusOr<std::string> ReadFile(const std::string& path);
// Writes atomically (temp file + rename) with the given mode.
absl::Status WriteFile(const std::string& path, const std::string& contents,
                       int mode = 0644);
absl::Status MakeDirs(const std::string& path, int mode = 0755);
bool PathExists(const std::string& path);

// Hex SHA-256 of a file's contents.
absl::StatusOr<std::string> Sha256File(const std::string& path);
// The SHA-256 of `bytes`, in hex.
std::string Sha256Hex(std::string_view bytes);

// Absolute path of the running executable.
std::string SelfExecutable();

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

}  // namespace shoal

#endif  // SHOAL_COMMON_UTIL_H_
