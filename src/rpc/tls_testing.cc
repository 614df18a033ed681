#include "rpc/tls_testing.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/net.h"

namespace shoal::rpc {
namespace {

struct KeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
struct CertFree {
  void operator()(X509* cert) const { X509_free(cert); }
};
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;
using Cert = std::unique_ptr<X509, CertFree>;

// A certificate for `key` named `cn`, signed by `issuer` (self-signed when
// null): a CA, or a leaf for both TLS roles with the IP SANs `ips`.
Cert MakeCert(EVP_PKEY* key, const std::string& cn, X509* issuer,
              EVP_PKEY* issuer_key, long serial, const std::string& ips) {
  Cert cert(X509_new());
  X509* x = cert.get();
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), serial);
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), 7 * 24 * 3600);
  X509_set_pubkey(x, key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()),
                             -1, -1, 0);
  X509_set_issuer_name(
      x, issuer != nullptr ? X509_get_subject_name(issuer) : name);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer != nullptr ? issuer : x, x, nullptr, nullptr, 0);
  auto add = [&](int nid, const std::string& value) {
    X509_EXTENSION* ext =
        X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
  };
  if (issuer == nullptr) {
    add(NID_basic_constraints, "critical,CA:TRUE");
    add(NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    add(NID_basic_constraints, "CA:FALSE");
    add(NID_ext_key_usage, "serverAuth,clientAuth");
    add(NID_subject_alt_name, ips);
  }
  X509_sign(x, issuer_key != nullptr ? issuer_key : key, EVP_sha256());
  return cert;
}

absl::Status WritePem(const std::string& path, X509* cert, EVP_PKEY* key) {
  FILE* f = fopen(path.c_str(), "w");
  if (f == nullptr) {
    return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  bool ok = cert != nullptr ? PEM_write_X509(f, cert) == 1
                            : PEM_write_PrivateKey(f, key, nullptr, nullptr, 0,
                                                   nullptr, nullptr) == 1;
  fclose(f);
  if (key != nullptr) chmod(path.c_str(), 0600);
  return ok ? absl::OkStatus()
            : absl::InternalError(absl::StrCat("cannot write ", path));
}

}  // namespace

absl::StatusOr<TestCertificates> MakeTestCertificates(const std::string& dir) {
  std::string ips = "IP:127.0.0.1";
  std::string primary = PrimaryIpAddress();
  if (primary != "127.0.0.1") absl::StrAppend(&ips, ",IP:", primary);
  TestCertificates out;
  auto make = [&](const std::string& prefix, long serial, std::string* ca,
                  std::string* cert, std::string* key) -> absl::Status {
    Key ca_key(EVP_EC_gen("P-256"));
    Key leaf_key(EVP_EC_gen("P-256"));
    if (ca_key == nullptr || leaf_key == nullptr) {
      return absl::InternalError("cannot make an EC key");
    }
    Cert ca_cert =
        MakeCert(ca_key.get(), prefix + " CA", nullptr, nullptr, serial, "");
    Cert leaf = MakeCert(leaf_key.get(), prefix + " node", ca_cert.get(),
                         ca_key.get(), serial + 1, ips);
    *ca = absl::StrCat(dir, "/", prefix, "-ca.pem");
    *cert = absl::StrCat(dir, "/", prefix, "-cert.pem");
    *key = absl::StrCat(dir, "/", prefix, "-key.pem");
    if (auto s = WritePem(*ca, ca_cert.get(), nullptr); !s.ok()) return s;
    if (auto s = WritePem(*cert, leaf.get(), nullptr); !s.ok()) return s;
    return WritePem(*key, nullptr, leaf_key.get());
  };
  if (auto s = make("cluster", 1, &out.ca, &out.cert, &out.key); !s.ok()) {
    return s;
  }
  if (auto s =
          make("other", 100, &out.other_ca, &out.other_cert, &out.other_key);
      !s.ok()) {
    return s;
  }
  return out;
}

namespace {

// Certificates in a fresh folder, removed at exit.
absl::StatusOr<TestCertificates> MakeTemporaryCertificates() {
  static std::vector<std::string>* folders = [] {
    std::atexit([] {
      std::error_code error;
      for (const std::string& f : *folders) {
        std::filesystem::remove_all(f, error);
      }
    });
    return new std::vector<std::string>;
  }();
  char dir[] = "/tmp/shoal-tls-XXXXXX";
  if (mkdtemp(dir) == nullptr) {
    return absl::InternalError("cannot make a folder under /tmp");
  }
  folders->push_back(dir);
  return MakeTestCertificates(dir);
}

}  // namespace

const TestCertificates& SharedTestCertificates() {
  static const TestCertificates* certs = [] {
    absl::StatusOr<TestCertificates> made = MakeTemporaryCertificates();
    if (!made.ok()) {
      fprintf(stderr, "cannot make test certificates: %s\n",
              std::string(made.status().message()).c_str());
      abort();
    }
    return new TestCertificates(*std::move(made));
  }();
  return *certs;
}

absl::StatusOr<std::string> ExportTestTls() {
  absl::StatusOr<TestCertificates> certs = MakeTemporaryCertificates();
  if (!certs.ok()) return certs.status();
  certs->Config(/*mutual=*/true).ExportToEnvironment();
  return certs->ca.substr(0, certs->ca.rfind('/'));
}

}  // namespace shoal::rpc
