#include "cli/start_report.h"

#include <ostream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/flag_checks.h"
#include "common/shell_quote.h"

namespace shoal::cli {

std::string DashboardLine(const std::string& dashboard_address,
                          const std::string& token) {
  if (dashboard_address.empty()) return "not started (see the head's log)";
  std::string query;
  for (unsigned char c : token) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' ||
        c == '~') {
      query.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&query, absl::StrFormat("%%%02X", c));
    }
  }
  return absl::StrCat(
      "http://", dashboard_address, "/?token=", query,
      " (REST API and /metrics: Authorization: Bearer <token>)");
}

std::string TempDirFlag(const std::string& given_temp_dir) {
  return given_temp_dir.empty()
             ? ""
             : absl::StrCat(" --temp-dir ", ShellQuote(given_temp_dir));
}

std::string TlsFlags(const rpc::TlsConfig& tls) {
  std::string out;
  for (auto [flag, path] :
       {std::pair{"--tls-ca", &tls.ca}, std::pair{"--tls-cert", &tls.cert},
        std::pair{"--tls-key", &tls.key}}) {
    if (!path->empty()) {
      absl::StrAppend(&out, " ", flag, " ", ShellQuote(*path));
    }
  }
  if (tls.mutual) absl::StrAppend(&out, " --tls-mutual");
  return out;
}

namespace {

// The environment a program connects with: SHOAL_ADDRESS, the temp dir
// where it finds the token, and the TLS files.
std::string ProgramEnvironment(const StartedNode& node) {
  std::string env = ShellAssignment("SHOAL_ADDRESS", node.head_address);
  if (!node.temp_dir.empty()) {
    absl::StrAppend(&env, " ",
                    ShellAssignment("SHOAL_TEMP_DIR", node.temp_dir));
  }
  for (auto [name, path] : {std::pair{"SHOAL_TLS_CA", &node.tls.ca},
                            std::pair{"SHOAL_TLS_CERT", &node.tls.cert},
                            std::pair{"SHOAL_TLS_KEY", &node.tls.key}}) {
    if (!path->empty())
      absl::StrAppend(&env, " ", ShellAssignment(name, *path));
  }
  if (node.tls.mutual) absl::StrAppend(&env, " SHOAL_TLS_MUTUAL=1");
  return env;
}

}  // namespace

void ReportHeadStarted(const StartedNode& node, const std::string& token,
                       const std::string& dashboard_line, std::ostream& out) {
  const std::string temp_dir_flag = TempDirFlag(node.temp_dir);
  const std::string tls_flags = TlsFlags(node.tls);
  out << "Shoal head started.\n"
      << "  Session folder: " << node.session_dir << "\n"
      << "  Head address:   " << node.head_address << "\n"
      << "  Node:           " << node.node_id << " at " << node.agent_address
      << "\n"
      << "  Dashboard:      " << dashboard_line << "\n\n"
      << "To add another host to this cluster, run there:\n"
      << "  "
      << ShellCommand({"shoal", "start", "--address=" + node.head_address,
                       "--token=" + token})
      << tls_flags << "\n"
      << "(or set " << ShellAssignment("SHOAL_TOKEN", token)
      << (temp_dir_flag.empty()
              ? "; on this host the token is found automatically)"
              : ")")
      << "\n\n"
      << "To connect a program:  " << ProgramEnvironment(node)
      << " ./your_program\n"
      << "To see the cluster:    shoal status" << temp_dir_flag << tls_flags
      << "\n"
      << "To stop:               shoal stop" << temp_dir_flag << "\n";
}

void ReportAgentStarted(const StartedNode& node, std::ostream& out) {
  const std::string temp_dir_flag = TempDirFlag(node.temp_dir);
  out << "Shoal node agent started: node " << node.node_id << " at "
      << node.agent_address << " joined " << node.head_address
      << ".\n  Session folder: " << node.session_dir
      << "\nTo see the cluster: shoal status" << temp_dir_flag
      << TlsFlags(node.tls) << "\nTo stop:            shoal stop"
      << temp_dir_flag << "\n";
}

}  // namespace shoal::cli
