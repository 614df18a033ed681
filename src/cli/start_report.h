// What `shoal start` prints once its processes are up: where they are, and
// the commands that add a host, connect a program, show and stop the
// cluster, each working as printed in another shell on this host. Pure:
// everything printed comes in the arguments.
#ifndef SHOAL_CLI_START_REPORT_H_
#define SHOAL_CLI_START_REPORT_H_

#include <iosfwd>
#include <string>

#include "rpc/tls.h"

namespace shoal::cli {

struct StartedNode {
  std::string session_dir;
  std::string head_address;
  std::string node_id;
  std::string agent_address;
  // The temp dir given with --temp-dir, absolute ("": none given).
  std::string temp_dir;
  // The TLS the command runs with (its flags over SHOAL_TLS_*).
  rpc::TlsConfig tls;
};

// The dashboard line of `shoal start --head`: its URL with the token (""
// address: it did not start).
std::string DashboardLine(const std::string& dashboard_address,
                          const std::string& token);

void ReportHeadStarted(const StartedNode& node, const std::string& token,
                       const std::string& dashboard_line, std::ostream& out);
void ReportAgentStarted(const StartedNode& node, std::ostream& out);

// " --temp-dir DIR" for a temp dir given (absolute), "" for none.
std::string TempDirFlag(const std::string& given_temp_dir);
// " --tls-ca PATH ..." for the commands printed; "" without TLS.
std::string TlsFlags(const rpc::TlsConfig& tls);

}  // namespace shoal::cli

#endif  // SHOAL_CLI_START_REPORT_H_
