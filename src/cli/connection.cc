#include "cli/connection.h"

#include <CLI/CLI.hpp>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "cli/cluster_api.h"
#include "cli/context.h"
#include "cli/exit_status.h"
#include "cli/flag_checks.h"
#include "common/files.h"
#include "common/session.h"
#include "common/status_macros.h"

namespace shoal::cli {

void AddTlsOptions(CLI::App* cmd, rpc::TlsConfig* tls) {
  cmd->add_option("--tls-cert", tls->cert,
                  "TLS: this process's certificate, PEM (SHOAL_TLS_CERT)");
  cmd->add_option("--tls-key", tls->key,
                  "TLS: the certificate's private key, PEM (SHOAL_TLS_KEY)");
  cmd->add_option("--tls-ca", tls->ca,
                  "TLS: the CA certificate that signed the cluster's, PEM "
                  "(SHOAL_TLS_CA)");
  cmd->add_flag("--tls-mutual", tls->mutual,
                "TLS: servers refuse clients without a certificate signed by "
                "the CA (SHOAL_TLS_MUTUAL=1)");
}

absl::Status ApplyTls(const rpc::TlsConfig& flags) {
  rpc::TlsConfig tls = rpc::TlsConfig::FromEnvironment();
  for (auto [flag, field] :
       {std::pair{&flags.cert, &tls.cert}, std::pair{&flags.key, &tls.key},
        std::pair{&flags.ca, &tls.ca}}) {
    if (!flag->empty()) *field = *flag;
  }
  tls.mutual = tls.mutual || flags.mutual;
  if (!tls.enabled()) return absl::OkStatus();
  tls.ExportToEnvironment();
  return rpc::ProcessTls().status();
}

void AddTokenOptions(CLI::App* cmd, std::string* token,
                     const std::string& what) {
  cmd->add_option("--token", *token, what);
  cmd->add_option_function<std::string>(
         "--token-file",
         [token](const std::string& path) {
           absl::StatusOr<std::string> text = ReadFile(path);
           if (!text.ok()) {
             throw CLI::ValidationError("--token-file",
                                        absl::StrCat("cannot read ", path, ": ",
                                                     text.status().message()));
           }
           std::string t = std::string(absl::StripAsciiWhitespace(*text));
           if (t.empty()) {
             throw CLI::ValidationError("--token-file", path + " is empty");
           }
           *token = t;
         },
         what + ", read from this file (keeps it out of `ps`)")
      ->excludes("--token");
}

void AddConnectionOptions(CLI::App* cmd, ConnectionFlags* flags) {
  cmd->add_option("--address", flags->address, "Head, HOST:PORT")
      ->check(HostPort());
  AddTokenOptions(cmd, &flags->token);
  AddTlsOptions(cmd, &flags->tls);
  cmd->add_option("--temp-dir", flags->temp_dir, "Temp dir of a local head");
}

absl::StatusOr<ClusterAddress> ResolveCluster(const ConnectionFlags& flags) {
  if (absl::Status st = CheckAddressEnvironment(flags.address); !st.ok()) {
    return UsageError(st.message());
  }
  ClusterAddress found{flags.address, flags.token};
  absl::Status st = ResolveClusterAddress(
      flags.temp_dir.empty() ? DefaultTempDir() : flags.temp_dir,
      &found.address, &found.token);
  if (!st.ok()) return absl::FailedPreconditionError(st.message());
  return found;
}

absl::StatusOr<std::unique_ptr<ClusterApi>> ConnectToCluster(
    const ConnectionFlags& flags, Context& ctx) {
  ASSIGN_OR_RETURN(ClusterAddress found, ResolveCluster(flags));
  return ctx.connect(found.address, found.token);
}

}  // namespace shoal::cli
