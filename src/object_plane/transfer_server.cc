#include "object_plane/transfer_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/constant_time.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "object_plane/transfer_codec.h"
#include "object_plane/transfer_socket.h"
#include "rpc/tls.h"

namespace shoal::object_plane {
namespace {

// A puller that stops reading for this long is dropped by the server.
constexpr int64_t kSendIdleTimeoutUs = 30'000'000;

// The first byte a peer sent, left in the socket; nullopt when it sent none
// within the limits.
std::optional<char> PeekFirstByte(int fd, const IoLimits& limits) {
  int64_t start = MonotonicUs();
  while (true) {
    char first = 0;
    ssize_t n = recv(fd, &first, 1, MSG_PEEK);
    if (n == 1) return first;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ||
        !CheckLimits(limits, start).ok()) {
      return std::nullopt;
    }
  }
}

// A TLS server's side of a new connection: answers a puller without TLS
// with what to do, or runs the handshake. False (logged) when the
// connection is not to be served.
bool StartTls(const rpc::TlsContext& tls, Link& link, const std::string& peer,
              const IoLimits& limits) {
  std::optional<char> first = PeekFirstByte(link.fd, limits);
  if (!first.has_value()) return false;
  if (!rpc::StartsTlsHandshake(*first)) {
    SHOAL_LOG(WARNING) << "object transfer: refused a connection from " << peer
                       << ": it does not use TLS, and this node does";
    SendReply(link, kBadToken, 0, rpc::kPlainClientOnTlsPort, limits)
        .IgnoreError();
    return false;
  }
  auto stream =
      rpc::TlsStream::Create(tls, link.fd, rpc::TlsStream::Role::kServer, peer);
  absl::Status s = stream.status();
  if (s.ok()) {
    link.tls = std::move(*stream);
    s = TlsHandshake(link, limits);
  }
  if (!s.ok()) {
    SHOAL_LOG(WARNING) << "object transfer: refused a TLS connection from "
                       << peer << ": " << s.message();
  }
  return s.ok();
}

}  // namespace

// ---- TransferServer ----

absl::StatusOr<std::unique_ptr<TransferServer>> TransferServer::Create(
    const std::string& host, std::string token, ObjectPins* pins) {
  ASSIGN_OR_RETURN(std::shared_ptr<const rpc::TlsContext> tls,
                   rpc::ProcessTls());
  return Create(host, std::move(token), pins, std::move(tls));
}

absl::StatusOr<std::unique_ptr<TransferServer>> TransferServer::Create(
    const std::string& host, std::string token, ObjectPins* pins,
    std::shared_ptr<const rpc::TlsContext> tls) {
  if (tls != nullptr) RETURN_IF_ERROR(tls->CheckCanServe());
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("cannot serve objects on \"", host,
                     "\": give an IPv4 address of this host"));
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 64) != 0) {
    int err = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat(
        "cannot listen for object transfers on ", host, ": ", strerror(err)));
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::string address = absl::StrCat(host, ":", ntohs(addr.sin_port));
  return std::unique_ptr<TransferServer>(new TransferServer(
      fd, std::move(address), std::move(token), std::move(tls), pins));
}

TransferServer::TransferServer(int listen_fd, std::string address,
                               std::string token,
                               std::shared_ptr<const rpc::TlsContext> tls,
                               ObjectPins* pins)
    : listen_fd_(listen_fd),
      address_(std::move(address)),
      token_(std::move(token)),
      tls_(std::move(tls)),
      pins_(pins) {
  accept_thread_ = std::thread([this] { AcceptLoop(); });
}

TransferServer::~TransferServer() {
  Shutdown();
  close(listen_fd_);
}

void TransferServer::Shutdown() {
  stopping_ = true;
  if (accept_thread_.joinable()) accept_thread_.join();
  shoal::MutexLock lock(&mu_);
  for (auto& c : connections_) {
    if (c->thread.joinable()) c->thread.join();
  }
  connections_.clear();
}

void TransferServer::Reap() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if ((*it)->done) {
      (*it)->thread.join();
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

void TransferServer::AcceptLoop() {
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, kPollMs) <= 0) continue;
    sockaddr_in addr{};
    socklen_t len = sizeof(addr);
    int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len,
                     SOCK_CLOEXEC);
    if (fd < 0) continue;
    char ip[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof(ip));
    std::string peer = absl::StrCat(ip, ":", ntohs(addr.sin_port));
    shoal::MutexLock lock(&mu_);
    Reap();
    auto connection = std::make_unique<Connection>();
    Connection* raw = connection.get();
    int64_t client = next_client_--;
    connection->thread = std::thread([this, fd, peer, client, raw] {
      Serve(fd, peer, client);
      raw->done = true;
    });
    connections_.push_back(std::move(connection));
  }
}

void TransferServer::Serve(int fd, const std::string& peer, int64_t client) {
  SetSocketOptions(fd, 0, /*receive=*/false);
  Link link(fd);
  IoLimits handshake;
  handshake.stop = &stopping_;
  handshake.deadline_us = MonotonicUs() + kHandshakeTimeoutUs;
  if (tls_ != nullptr && !StartTls(*tls_, link, peer, handshake)) return;
  if (!Authenticate(link, peer, handshake)) return;
  ServeRequests(link, client);
}

bool TransferServer::Authenticate(Link& link, const std::string& peer,
                                  const IoLimits& handshake) {
  uint8_t hello[kHelloHeaderSize];
  absl::Status s = RecvAll(link, hello, sizeof(hello), handshake);
  if (s.ok()) {
    if (absl::StatusOr<uint32_t> token_size = DecodeHello(hello);
        token_size.ok()) {
      std::string token(*token_size, '\0');
      s = RecvAll(link, token.data(), token.size(), handshake);
      if (s.ok() && ConstantTimeEquals(token, token_)) return true;
    }
  }
  bool speaks_tls =
      s.ok() && rpc::StartsTlsHandshake(static_cast<char>(hello[0]));
  SHOAL_LOG(WARNING) << "object transfer: refused a connection from " << peer
                     << (speaks_tls
                             ? ": it speaks TLS, and this node does not use "
                               "TLS"
                             : ": it did not present this cluster's token");
  SendReply(link, kBadToken, 0,
            speaks_tls ? rpc::kTlsClientOnPlainPort : kWrongToken, handshake)
      .IgnoreError();
  return false;
}

void TransferServer::ServeRequests(Link& link, int64_t client) {
  IoLimits limits;
  limits.stop = &stopping_;
  absl::Status s = SendReply(link, kOk, 0, "", limits);
  bool pinned_any = false;
  while (s.ok()) {
    uint8_t header[kRequestHeaderSize];
    // Waiting for the next request has no time limit: pullers close their
    // connections when done.
    limits.idle_us = 0;
    s = RecvAll(link, header, sizeof(header), limits);
    if (!s.ok()) break;
    absl::StatusOr<RequestHeader> request = DecodeRequest(header);
    if (!request.ok()) {
      SendReply(link, kBadRequest, 0, std::string(request.status().message()),
                limits)
          .IgnoreError();
      break;
    }
    std::string id(request->id_size, '\0');
    limits.idle_us = kSendIdleTimeoutUs;
    s = RecvAll(link, id.data(), id.size(), limits);
    if (!s.ok()) break;
    pinned_any = true;
    s = SendRange(link, id, request->offset, request->length, client, limits);
  }
  if (pinned_any) pins_->UnpinAll(client);
}

absl::Status TransferServer::SendRange(Link& link, const std::string& id,
                                       uint64_t offset, uint64_t length,
                                       int64_t client, const IoLimits& limits) {
  absl::StatusOr<PinnedObject> pinned = pins_->Pin(id, client);
  if (!pinned.ok()) {
    WireStatus status = absl::IsNotFound(pinned.status())      ? kNotHere
                        : absl::IsUnavailable(pinned.status()) ? kNotSealed
                                                               : kFailed;
    return SendReply(link, status, 0, std::string(pinned.status().message()),
                     limits);
  }
  if (offset > pinned->size || length > pinned->size - offset) {
    pins_->Unpin(id, client);
    return SendReply(link, kBadRequest, pinned->size,
                     absl::StrCat("bytes [", offset, ", ", offset + length,
                                  ") are outside the object's ", pinned->size),
                     limits);
  }
  uint8_t header[kReplyHeaderSize];
  EncodeReplyHeader({kOk, pinned->size, length}, header);
  // Straight from the arena: no copy in user space (with TLS, the session
  // encrypts from there).
  iovec iov[2] = {{header, sizeof(header)},
                  {const_cast<uint8_t*>(pinned->data) + offset, length}};
  absl::Status s = SendAll(link, iov, 2, limits);
  pins_->Unpin(id, client);
  return s;
}

}  // namespace shoal::object_plane
