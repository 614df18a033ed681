// How a `shoal` command names the cluster it talks to (--address, --token,
// --token-file, --temp-dir, --tls-*), and finds it by the one rule every
// command and program uses (common/session.h, ResolveClusterAddress).
#ifndef SHOAL_CLI_CONNECTION_H_
#define SHOAL_CLI_CONNECTION_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "rpc/tls.h"

namespace CLI {
class App;
}  // namespace CLI

namespace shoal::cli {

class ClusterApi;
struct Context;

// --tls-cert, --tls-key, --tls-ca and --tls-mutual, for every command that
// connects: they set SHOAL_TLS_* (rpc/tls.h) for the command and what it
// starts (ApplyTls).
void AddTlsOptions(CLI::App* cmd, rpc::TlsConfig* tls);
// The command's TLS: its flags over SHOAL_TLS_*, exported for the processes
// it starts, and loaded now, so that a bad file fails the command at once.
absl::Status ApplyTls(const rpc::TlsConfig& flags);

// --token TOKEN, and --token-file PATH, which reads it from a file so that
// it is in no process's arguments (a trailing newline is ignored).
void AddTokenOptions(CLI::App* cmd, std::string* token,
                     const std::string& what = "Cluster token");

// The flags of a command that talks to a running cluster.
struct ConnectionFlags {
  std::string address;   // --address; "": SHOAL_ADDRESS, else the local one
  std::string token;     // --token or --token-file
  std::string temp_dir;  // --temp-dir of a local head; "": the default
  rpc::TlsConfig tls;
};
// --address, --token, --token-file, --tls-* and --temp-dir.
void AddConnectionOptions(CLI::App* cmd, ConnectionFlags* flags);

// Where the head that `flags` name is, and the token it takes, by the one
// rule. A bad SHOAL_ADDRESS is a usage error; no cluster to be found is a
// failure whose message says how to name one.
struct ClusterAddress {
  std::string address;  // HOST:PORT
  std::string token;
};
absl::StatusOr<ClusterAddress> ResolveCluster(const ConnectionFlags& flags);

// A connection to the head that `flags` name, by the one rule. A bad
// SHOAL_ADDRESS is a usage error; no cluster to be found is a failure whose
// message says how to name one.
absl::StatusOr<std::unique_ptr<ClusterApi>> ConnectToCluster(
    const ConnectionFlags& flags, Context& ctx);

}  // namespace shoal::cli

#endif  // SHOAL_CLI_CONNECTION_H_
