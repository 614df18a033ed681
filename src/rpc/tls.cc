#include "rpc/tls.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/environment.h"

namespace shoal::rpc {

const char kPlainClientOnTlsPort[] =
    "the cluster uses TLS and this process connected without it: pass "
    "--tls-ca (and, if the cluster uses mutual TLS, --tls-cert and "
    "--tls-key), or set SHOAL_TLS_CA (SHOAL_TLS_CERT, SHOAL_TLS_KEY)";
const char kTlsClientOnPlainPort[] =
    "this Shoal port does not use TLS and the peer speaks TLS: connect "
    "without --tls-* and SHOAL_TLS_*, or restart the cluster with TLS";

namespace {

// The reasons OpenSSL queued on this thread, oldest first; clears them.
std::string OpenSslErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    const char* reason = ERR_reason_error_string(e);
    char text[256];
    if (reason == nullptr) {
      ERR_error_string_n(e, text, sizeof(text));
      reason = text;
    }
    absl::StrAppend(&out, out.empty() ? "" : "; ", reason);
  }
  return out.empty() ? "no reason given" : out;
}

// OpenSSL's socket BIO writes with write(2), which raises SIGPIPE when the
// peer has gone; this one sends with MSG_NOSIGNAL (as the plain path does),
// so that a process using TLS need not ignore SIGPIPE. It also remembers
// whether its last read emptied the socket (TlsStream::Drained).
struct Socket {
  int fd = -1;
  bool drained = false;  // the last recv(2) got less than it asked, or none
};

Socket& SocketOf(BIO* bio) { return *static_cast<Socket*>(BIO_get_data(bio)); }

int SocketWrite(BIO* bio, const char* data, int size) {
  BIO_clear_retry_flags(bio);
  ssize_t n;
  do {
    n = send(SocketOf(bio).fd, data, static_cast<size_t>(size), MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    BIO_set_retry_write(bio);
  }
  return static_cast<int>(n);
}

int SocketRead(BIO* bio, char* data, int size) {
  BIO_clear_retry_flags(bio);
  Socket& socket = SocketOf(bio);
  ssize_t n;
  do {
    n = recv(socket.fd, data, static_cast<size_t>(size), 0);
  } while (n < 0 && errno == EINTR);
  socket.drained = n >= 0 && n < size;
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    socket.drained = true;
    BIO_set_retry_read(bio);
  }
  return static_cast<int>(n);
}

long SocketCtrl(BIO*, int cmd, long, void*) {
  return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

int SocketCreate(BIO* bio) {
  BIO_set_data(bio, new Socket);
  BIO_set_init(bio, 1);
  return 1;
}

int SocketDestroy(BIO* bio) {
  delete &SocketOf(bio);
  return 1;
}

BIO_METHOD* SocketMethod() {
  static BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK,
                                 "shoal socket");
    BIO_meth_set_write(m, SocketWrite);
    BIO_meth_set_read(m, SocketRead);
    BIO_meth_set_ctrl(m, SocketCtrl);
    BIO_meth_set_create(m, SocketCreate);
    BIO_meth_set_destroy(m, SocketDestroy);
    return m;
  }();
  return method;
}

// ---- loading the files ----

struct FileFlag {
  const char* flag;
  const char* env;
};
constexpr FileFlag kCertFlag{"--tls-cert", "SHOAL_TLS_CERT"};
constexpr FileFlag kKeyFlag{"--tls-key", "SHOAL_TLS_KEY"};
constexpr FileFlag kCaFlag{"--tls-ca", "SHOAL_TLS_CA"};

absl::Status CheckReadable(const FileFlag& f, const std::string& path) {
  if (access(path.c_str(), R_OK) == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("cannot read ", f.flag, " ", path, ": ", strerror(errno),
                   "; give the path of a PEM file (", f.env, " sets it too)"));
}

absl::Status NotPem(const FileFlag& f, const std::string& path,
                    const char* what, const char* begin) {
  return absl::InvalidArgumentError(absl::StrCat(
      f.flag, " ", path, " is not ", what, " (", OpenSslErrors(),
      "); give the PEM file that starts with -----BEGIN ", begin, "-----"));
}

// A context for one role with TLS 1.3, partial writes (a write returns
// after each record, and may be retried from a buffer that moved) and
// read-ahead (one recv(2) takes several records).
absl::StatusOr<SSL_CTX*> NewContext() {
  SSL_CTX* ctx = SSL_CTX_new(TLS_method());
  if (ctx == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot set up TLS: ", OpenSslErrors()));
  }
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_mode(
      ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_read_ahead(ctx, 1);
  // AES-128-GCM first: ~15% faster than AES-256 here, and as safe for
  // a cluster's traffic.
  SSL_CTX_set_ciphersuites(ctx,
                           "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
                           "TLS_CHACHA20_POLY1305_SHA256");
  // A peer that closes without close_notify has closed, not failed.
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
  return ctx;
}

absl::Status LoadCa(SSL_CTX* ctx, const std::string& ca) {
  if (SSL_CTX_load_verify_locations(ctx, ca.c_str(), nullptr) != 1) {
    return NotPem(kCaFlag, ca, "a PEM certificate", "CERTIFICATE");
  }
  return absl::OkStatus();
}

// The certificate and its key, checked against each other and the CA.
absl::Status LoadIdentity(SSL_CTX* ctx, const TlsConfig& c) {
  if (SSL_CTX_use_certificate_chain_file(ctx, c.cert.c_str()) != 1) {
    return NotPem(kCertFlag, c.cert, "a PEM certificate", "CERTIFICATE");
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, c.key.c_str(), SSL_FILETYPE_PEM) != 1) {
    int reason = ERR_GET_REASON(ERR_peek_last_error());
    if (reason != X509_R_KEY_VALUES_MISMATCH &&
        reason != X509_R_KEY_TYPE_MISMATCH) {
      return NotPem(kKeyFlag, c.key, "a PEM private key", "PRIVATE KEY");
    }
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-key ", c.key, " does not match --tls-cert ", c.cert,
                     " (", OpenSslErrors(),
                     "): give the private key the certificate was made "
                     "for"));
  }
  STACK_OF(X509)* chain = nullptr;
  SSL_CTX_get0_chain_certs(ctx, &chain);
  X509_STORE_CTX* verify = X509_STORE_CTX_new();
  int ok = X509_STORE_CTX_init(verify, SSL_CTX_get_cert_store(ctx),
                               SSL_CTX_get0_certificate(ctx), chain) == 1 &&
           X509_verify_cert(verify) == 1;
  int error = X509_STORE_CTX_get_error(verify);
  X509_STORE_CTX_free(verify);
  ERR_clear_error();
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls-cert ", c.cert, " is not signed by --tls-ca ", c.ca, " (",
        X509_verify_cert_error_string(error),
        "): its peers would refuse it; give a certificate that the "
        "cluster's CA signed, or the CA that signed it"));
  }
  return absl::OkStatus();
}

}  // namespace

// ---- TlsConfig ----

TlsConfig TlsConfig::FromEnvironment() {
  TlsConfig c;
  c.cert = env::Get(env::Var::kTlsCert);
  c.key = env::Get(env::Var::kTlsKey);
  c.ca = env::Get(env::Var::kTlsCa);
  c.mutual = env::IsOn(env::Var::kTlsMutual);
  return c;
}

void TlsConfig::ExportToEnvironment() const {
  auto set = [](const char* name, const std::string& path) {
    if (path.empty()) {
      unsetenv(name);
      return;
    }
    std::error_code error;
    std::filesystem::path absolute = std::filesystem::absolute(path, error);
    setenv(name, error ? path.c_str() : absolute.c_str(), 1);
  };
  set("SHOAL_TLS_CERT", cert);
  set("SHOAL_TLS_KEY", key);
  set("SHOAL_TLS_CA", ca);
  if (mutual) {
    setenv("SHOAL_TLS_MUTUAL", "1", 1);
  } else {
    unsetenv("SHOAL_TLS_MUTUAL");
  }
}

// ---- TlsContext ----

absl::StatusOr<std::shared_ptr<const TlsContext>> TlsContext::Create(
    const TlsConfig& config) {
  if (config.ca.empty()) {
    return absl::InvalidArgumentError(
        "TLS is on but no CA was given: pass --tls-ca (or set SHOAL_TLS_CA) "
        "with the certificate of the CA that signed the cluster's "
        "certificates; every process checks its peers against it");
  }
  if (config.cert.empty() != config.key.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert and --tls-key go together (SHOAL_TLS_CERT, "
        "SHOAL_TLS_KEY): give both the certificate and its private key");
  }
  if (config.mutual && config.cert.empty()) {
    return absl::InvalidArgumentError(
        "mutual TLS (--tls-mutual, SHOAL_TLS_MUTUAL) needs this process's own "
        "certificate: pass --tls-cert and --tls-key");
  }
  const bool has_identity = !config.cert.empty();
  if (auto s = CheckReadable(kCaFlag, config.ca); !s.ok()) return s;
  if (has_identity) {
    if (auto s = CheckReadable(kCertFlag, config.cert); !s.ok()) return s;
    if (auto s = CheckReadable(kKeyFlag, config.key); !s.ok()) return s;
  }
  ERR_clear_error();
  std::shared_ptr<TlsContext> tls(new TlsContext(config));
  absl::StatusOr<SSL_CTX*> client = NewContext();
  if (!client.ok()) return client.status();
  tls->client_ = *client;
  if (auto s = LoadCa(tls->client_, config.ca); !s.ok()) return s;
  SSL_CTX_set_verify(tls->client_, SSL_VERIFY_PEER, nullptr);
  if (has_identity) {
    if (auto s = LoadIdentity(tls->client_, config); !s.ok()) return s;
    absl::StatusOr<SSL_CTX*> server = NewContext();
    if (!server.ok()) return server.status();
    tls->server_ = *server;
    if (auto s = LoadCa(tls->server_, config.ca); !s.ok()) return s;
    if (auto s = LoadIdentity(tls->server_, config); !s.ok()) return s;
    // Clients connect afresh each time: tickets would only cost a write.
    SSL_CTX_set_num_tickets(tls->server_, 0);
    SSL_CTX_set_verify(tls->server_,
                       config.mutual
                           ? SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT
                           : SSL_VERIFY_NONE,
                       nullptr);
  }
  return std::shared_ptr<const TlsContext>(std::move(tls));
}

TlsContext::~TlsContext() {
  SSL_CTX_free(server_);
  SSL_CTX_free(client_);
}

absl::Status TlsContext::CheckCanServe() const {
  if (server_ != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(
      "TLS is on and this process serves connections, so it needs a "
      "certificate: pass --tls-cert and --tls-key (or set SHOAL_TLS_CERT and "
      "SHOAL_TLS_KEY) with one signed by the cluster's CA");
}

absl::StatusOr<std::shared_ptr<const TlsContext>> ProcessTls() {
  static const auto* const tls =
      new absl::StatusOr<std::shared_ptr<const TlsContext>>([] {
        TlsConfig config = TlsConfig::FromEnvironment();
        if (!config.enabled()) {
          return absl::StatusOr<std::shared_ptr<const TlsContext>>(
              std::shared_ptr<const TlsContext>());
        }
        return TlsContext::Create(config);
      }());
  return *tls;
}

// ---- TlsStream ----

absl::StatusOr<std::unique_ptr<TlsStream>> TlsStream::Create(
    const TlsContext& context, int fd, Role role, std::string_view peer) {
  SSL_CTX* ctx = role == Role::kServer ? context.server_ : context.client_;
  if (ctx == nullptr) return context.CheckCanServe();
  SSL* ssl = SSL_new(ctx);
  BIO* bio = ssl != nullptr ? BIO_new(SocketMethod()) : nullptr;
  if (bio == nullptr) {
    SSL_free(ssl);
    return absl::InternalError(
        absl::StrCat("cannot set up TLS: ", OpenSslErrors()));
  }
  SocketOf(bio).fd = fd;
  SSL_set_bio(ssl, bio, bio);
  if (role == Role::kServer) {
    SSL_set_accept_state(ssl);
  } else {
    SSL_set_connect_state(ssl);
    // A DNS name is checked against the certificate (and sent as SNI); an
    // IP address is not: the CA is what the cluster trusts.
    std::string host(peer.substr(0, peer.rfind(':')));
    in_addr ip;
    if (!host.empty() && inet_pton(AF_INET, host.c_str(), &ip) != 1) {
      SSL_set_tlsext_host_name(ssl, host.c_str());
      SSL_set1_host(ssl, host.c_str());
    }
  }
  return std::unique_ptr<TlsStream>(
      new TlsStream(ssl, role, std::string(peer)));
}

TlsStream::~TlsStream() { SSL_free(ssl_); }

int TlsStream::Handshake() {
  if (established_) return 1;
  ERR_clear_error();
  int r = SSL_do_handshake(ssl_);
  if (r == 1) {
    established_ = true;
    wants_write_ = false;
    return 1;
  }
  ssize_t n = Outcome(r);
  if (n < 0 && errno == EAGAIN) return -1;
  if (n == 0 || errno != EPROTO) {
    int err = errno;
    error_ = absl::UnauthenticatedError(absl::StrCat(
        role_ == Role::kClient ? peer_ : "the client",
        " closed the connection during the TLS handshake (",
        n == 0 ? "end of stream" : strerror(err),
        "): it may not use TLS, or it refused this process's certificate"));
    errno = EPROTO;
  }
  return -1;
}

ssize_t TlsStream::Recv(void* buf, size_t size) {
  ERR_clear_error();
  size_t n = 0;
  if (SSL_read_ex(ssl_, buf, size, &n) == 1) return static_cast<ssize_t>(n);
  return Outcome(0);
}

ssize_t TlsStream::Send(const void* buf, size_t size) {
  ERR_clear_error();
  size_t n = 0;
  if (SSL_write_ex(ssl_, buf, size, &n) == 1) return static_cast<ssize_t>(n);
  return Outcome(0);
}

bool TlsStream::HasPending() const { return SSL_has_pending(ssl_) == 1; }

bool TlsStream::Drained() const {
  return !HasPending() && SocketOf(SSL_get_rbio(ssl_)).drained;
}

ssize_t TlsStream::Outcome(int ret) {
  const int saved_errno = errno;
  switch (SSL_get_error(ssl_, ret)) {
    case SSL_ERROR_WANT_READ:
      wants_write_ = false;
      errno = EAGAIN;
      return -1;
    case SSL_ERROR_WANT_WRITE:
      wants_write_ = true;
      errno = EAGAIN;
      return -1;
    case SSL_ERROR_ZERO_RETURN:
      return 0;
    case SSL_ERROR_SYSCALL:
      ERR_clear_error();
      if (saved_errno == 0) return 0;
      errno = saved_errno;
      return -1;
    default:
      break;
  }
  const unsigned long first = ERR_peek_error();
  const int reason = ERR_GET_REASON(first);
  const bool client = role_ == Role::kClient;
  const std::string who = client ? peer_ : "the client";
  std::string detail = OpenSslErrors();
  std::string message;
  switch (reason) {
    case SSL_R_CERTIFICATE_VERIFY_FAILED: {
      long v = SSL_get_verify_result(ssl_);
      const char* why = X509_verify_cert_error_string(v);
      if (client && v == X509_V_ERR_HOSTNAME_MISMATCH) {
        message = absl::StrCat("the TLS certificate of ", peer_,
                               " does not name that host: connect to it by "
                               "a name its certificate holds, or by IP");
      } else {
        message = absl::StrCat(
            "the TLS certificate of ", who, " is not trusted (", why,
            "): it is not signed by the CA in ",
            client ? "--tls-ca (SHOAL_TLS_CA); give the CA that signed the "
                     "cluster's certificates"
                   : "this server's --tls-ca");
      }
      break;
    }
    case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE:
      message = absl::StrCat(
          who,
          " presented no certificate, and this cluster uses mutual TLS: "
          "it needs --tls-cert and --tls-key (SHOAL_TLS_CERT, "
          "SHOAL_TLS_KEY)");
      break;
    case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
      message = absl::StrCat(
          peer_,
          " requires a client certificate (the cluster uses mutual TLS): "
          "pass --tls-cert and --tls-key (or set SHOAL_TLS_CERT and "
          "SHOAL_TLS_KEY) with a certificate signed by the cluster's CA");
      break;
    case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
    case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
    case SSL_R_TLSV1_ALERT_DECRYPT_ERROR:
      message = absl::StrCat(
          who, " refused this process's TLS certificate (", detail,
          client ? "): give --tls-cert and --tls-key signed by the CA that "
                   "the cluster trusts"
                 : "): the client trusts another CA than the one that "
                   "signed this server's certificate");
      break;
    case SSL_R_WRONG_VERSION_NUMBER:
    case SSL_R_PACKET_LENGTH_TOO_LONG:
    case SSL_R_HTTP_REQUEST:
      message = client ? absl::StrCat(
                             peer_,
                             " does not use TLS and this process does: connect "
                             "without --tls-* and SHOAL_TLS_*, or restart the "
                             "cluster with TLS (shoal start --tls-cert ... "
                             "--tls-key ... --tls-ca ...)")
                       : "the client does not speak TLS";
      break;
    default:
      message = absl::StrCat("TLS with ", who, " failed: ", detail);
  }
  error_ = absl::UnauthenticatedError(message);
  errno = EPROTO;
  return -1;
}

}  // namespace shoal::rpc
