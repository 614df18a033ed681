// This host's name, id and addresses, and "host:port" addresses.
#ifndef SHOAL_COMMON_NET_H_
#define SHOAL_COMMON_NET_H_

#include <string>

#include "absl/status/status.h"

struct sockaddr_in;

namespace shoal {

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

}  // namespace shoal

#endif  // SHOAL_COMMON_NET_H_
