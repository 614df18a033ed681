// TLS for every Shoal connection: the RPC ports (rpc::Server, rpc::Channel,
// BlockingChannel), the object-transfer ports and the launch report server.
//
// A process's TLS material is a few PEM files, named by SHOAL_TLS_CERT,
// SHOAL_TLS_KEY and SHOAL_TLS_CA (the `--tls-*` flags of the CLI set them),
// and SHOAL_TLS_MUTUAL=1 makes servers ask clients for a certificate too.
// Children (head, agents, workers, jobs, launched ranks) inherit them, so one
// `shoal start --tls-...` covers a node. TLS is in addition to the cluster
// token: the Hello frame still carries it, inside the TLS session.
//
// Clients always verify the server's certificate chain against the CA; the
// host name is checked too when the address is a DNS name (not for an IP
// address: the cluster's CA is the trust boundary). TLS 1.3 only.
//
// Threading: TlsContext is immutable once created and thread-safe;
// ProcessTls() is thread-safe; a TlsStream belongs to one connection and is
// used by one thread at a time.
#ifndef SHOAL_RPC_TLS_H_
#define SHOAL_RPC_TLS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct ssl_ctx_st;  // OpenSSL's SSL_CTX
struct ssl_st;      // OpenSSL's SSL

namespace shoal::rpc {

struct TlsConfig {
  std::string cert;  // this process's certificate (chain), PEM
  std::string key;   // its private key, PEM
  std::string ca;    // the CA certificate(s) that sign the cluster's, PEM
  // Servers refuse clients without a certificate signed by `ca`.
  bool mutual = false;

  bool enabled() const {
    return !cert.empty() || !key.empty() || !ca.empty() || mutual;
  }
  // From SHOAL_TLS_CERT, SHOAL_TLS_KEY, SHOAL_TLS_CA and SHOAL_TLS_MUTUAL
  // (1, true or yes).
  static TlsConfig FromEnvironment();
  // Sets those variables (paths made absolute) in this process, so that
  // ProcessTls() and every child process started later use this config.
  void ExportToEnvironment() const;
};

// The OpenSSL contexts of one TlsConfig: a server role (its certificate;
// client verification with mutual TLS) and a client role (verifies servers
// against the CA; presents the certificate when there is one).
class TlsContext {
 public:
  // Loads and checks the files: each must exist and be PEM, the key must
  // match the certificate, and the certificate must be signed by the CA.
  // Errors name the file and the flag that sets it.
  static absl::StatusOr<std::shared_ptr<const TlsContext>> Create(
      const TlsConfig& config);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  const TlsConfig& config() const { return config_; }
  // Whether this process may accept TLS connections: it has a certificate.
  // A server without one fails to start with a message saying so.
  absl::Status CheckCanServe() const;

 private:
  friend class TlsStream;
  explicit TlsContext(TlsConfig config) : config_(std::move(config)) {}

  const TlsConfig config_;
  ssl_ctx_st* server_ = nullptr;  // null without a certificate
  ssl_ctx_st* client_ = nullptr;
};

// This process's TLS, from the environment, loaded on first use: null when
// TLS is off, the same error on every call when the config is wrong.
absl::StatusOr<std::shared_ptr<const TlsContext>> ProcessTls();

// One connection's TLS session over a connected socket, blocking (with
// SO_RCVTIMEO/SO_SNDTIMEO) or not. Handshake, Recv and Send answer as
// recv(2)/send(2) do: bytes moved, 0 when the peer closed (Recv), or -1 with
// errno EAGAIN (call again once the socket is readable, or writable when
// wants_write()) or EPROTO (the session failed; error() says why and what
// to do). Writes never raise SIGPIPE.
class TlsStream {
 public:
  enum class Role { kClient, kServer };
  // `peer` is host:port, for messages and (client, DNS name) verification.
  static absl::StatusOr<std::unique_ptr<TlsStream>> Create(
      const TlsContext& context, int fd, Role role, std::string_view peer);
  ~TlsStream();
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  // 1 once the handshake is complete, else -1 as above.
  int Handshake();
  ssize_t Recv(void* buf, size_t size);
  ssize_t Send(const void* buf, size_t size);

  bool established() const { return established_; }
  bool wants_write() const { return wants_write_; }
  // Bytes already taken from the socket that Recv has not returned yet (a
  // poll(2) on the socket would not see them).
  bool HasPending() const;
  // Whether a Recv that just returned data left nothing to read: the session
  // holds no more, and its last read of the socket got all there was. (A
  // caller that reads until EAGAIN may stop here, one recv(2) sooner.)
  bool Drained() const;
  // After EPROTO: Unauthenticated, with a message for the user.
  const absl::Status& error() const { return error_; }

 private:
  TlsStream(ssl_st* ssl, Role role, std::string peer)
      : ssl_(ssl), role_(role), peer_(std::move(peer)) {}
  // recv(2)'s answer for an SSL call that returned `ret`.
  ssize_t Outcome(int ret);

  ssl_st* const ssl_;
  const Role role_;
  const std::string peer_;
  bool established_ = false;
  bool wants_write_ = false;
  absl::Status error_;
};

// Whether `first_byte`, the first a peer sent, opens a TLS handshake (a
// handshake record) rather than a Shoal frame or transfer hello. Servers look
// at it to answer a peer of the other kind with what to do.
inline bool StartsTlsHandshake(char first_byte) {
  return static_cast<unsigned char>(first_byte) == 0x16;
}

// What a TLS server answers a plain client, and a plain server a TLS client.
extern const char kPlainClientOnTlsPort[];
extern const char kTlsClientOnPlainPort[];

}  // namespace shoal::rpc

#endif  // SHOAL_RPC_TLS_H_
