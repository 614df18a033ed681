// For tests and benchmarks of TLS: certificates made on the spot, so that no
// key is ever checked in.
#ifndef SHOAL_RPC_TLS_TESTING_H_
#define SHOAL_RPC_TLS_TESTING_H_

#include <string>

#include "absl/status/statusor.h"
#include "rpc/tls.h"

namespace shoal::rpc {

// PEM files in one folder: the cluster's CA and a certificate it signed
// (serverAuth and clientAuth, IP SANs 127.0.0.1 and this host's primary
// address), and an unrelated CA with a certificate of its own for the
// negative cases.
struct TestCertificates {
  std::string ca, cert, key;
  std::string other_ca, other_cert, other_key;

  // The cluster's config: CA, certificate and key.
  TlsConfig Config(bool mutual = false) const {
    return TlsConfig{cert, key, ca, mutual};
  }
};

// Writes the files into `dir` (which must exist). ECDSA P-256 keys, valid
// for a week.
absl::StatusOr<TestCertificates> MakeTestCertificates(const std::string& dir);

// One set of certificates for a whole test binary, made on first use in a
// fresh folder under /tmp that is removed when the process exits. A failure
// to make them aborts (no test could run without them).
const TestCertificates& SharedTestCertificates();

// The benchmarks' --tls: certificates in a fresh folder under /tmp (removed
// when the process exits), exported
// as this process's TLS (SHOAL_TLS_*, mutual), and so of every process it
// starts. Returns the folder. REQUIRES: nothing in this process has
// connected yet (ProcessTls reads the environment once).
absl::StatusOr<std::string> ExportTestTls();

}  // namespace shoal::rpc

#endif  // SHOAL_RPC_TLS_TESTING_H_
