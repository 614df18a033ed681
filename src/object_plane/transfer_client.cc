#include "object_plane/transfer_client.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/clock.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "common/net.h"
#include "common/status_macros.h"
#include "object_plane/transfer_codec.h"
#include "object_plane/transfer_socket.h"
#include "object_store/format_util.h"
#include "rpc/tls.h"

namespace shoal::object_plane {
namespace {

// A connected socket (with its TLS session when `tls` is set, handshake
// done), or Unavailable naming why not.
absl::StatusOr<std::unique_ptr<Link>> Connect(const std::string& address,
                                              const rpc::TlsContext* tls,
                                              const PullOptions& options,
                                              const IoLimits& limits) {
  sockaddr_in addr;
  if (absl::Status s = ResolveAddress(address, &addr); !s.ok()) return s;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", errno));
  // Set before connecting, so that the window scale covers it.
  SetSocketOptions(fd, options.socket_buffer_bytes, /*receive=*/true);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (errno != EINPROGRESS) {
      int err = errno;
      close(fd);
      return absl::UnavailableError(strerror(err));
    }
    int64_t start = MonotonicUs();
    while (true) {
      pollfd p{fd, POLLOUT, 0};
      int n = poll(&p, 1, kPollMs);
      if (n > 0) break;
      if (n < 0 && errno != EINTR) {
        int err = errno;
        close(fd);
        return absl::UnavailableError(strerror(err));
      }
      if (absl::Status s = CheckLimits(limits, start); !s.ok()) {
        close(fd);
        return s;
      }
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      close(fd);
      return absl::UnavailableError(strerror(err));
    }
  }
  int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  auto link = std::make_unique<Link>(fd);
  if (tls != nullptr) {
    ASSIGN_OR_RETURN(link->tls,
                     rpc::TlsStream::Create(
                         *tls, fd, rpc::TlsStream::Role::kClient, address));
    RETURN_IF_ERROR(TlsHandshake(*link, limits));
  }
  return link;
}

// ---- Puller ----

// Why one source could not supply the object.
struct SourceFailure {
  enum Kind {
    kUnreachable,
    kDied,
    kNotHere,
    kNotSealed,
    kRefused,
    kMismatch,
    kTimedOut,
    kCancelled,
    kBroken,
  };
  Kind kind = kBroken;
  std::string detail;
};

std::string Describe(const TransferSource& source, const SourceFailure& f) {
  std::string node = absl::StrCat(
      "node ", source.node_id.empty() ? std::string("?") : source.node_id);
  if (!source.address.empty())
    absl::StrAppend(&node, " (", source.address, ")");
  switch (f.kind) {
    case SourceFailure::kUnreachable:
      return absl::StrCat(node, " is unreachable (", f.detail, ")");
    case SourceFailure::kDied:
      return absl::StrCat(node, " died mid-transfer (", f.detail, ")");
    case SourceFailure::kNotHere:
      return absl::StrCat(node, " does not hold it");
    case SourceFailure::kNotSealed:
      return absl::StrCat(node, " has not finished writing it");
    case SourceFailure::kRefused:
      // The server says why: the token, or that it uses TLS.
      return absl::StrCat(node, " refused the connection: ",
                          f.detail == kWrongToken
                              ? "it refused this cluster's token"
                              : f.detail);
    case SourceFailure::kMismatch:
      return absl::StrCat(node, " holds ", f.detail);
    case SourceFailure::kTimedOut:
      return absl::StrCat(node, " stalled (", f.detail, ")");
    case SourceFailure::kCancelled:
      return absl::StrCat(node, ": the pull was cancelled");
    case SourceFailure::kBroken:
      break;
  }
  return absl::StrCat(node, " could not serve it: ", f.detail);
}

SourceFailure FromIoError(const absl::Status& s, SourceFailure::Kind kind) {
  if (absl::IsCancelled(s)) return {SourceFailure::kCancelled, ""};
  if (absl::IsDeadlineExceeded(s)) {
    return {SourceFailure::kTimedOut, std::string(s.message())};
  }
  return {kind, std::string(s.message())};
}

SourceFailure FromWire(const ReplyHeader& reply, const std::string& message) {
  switch (reply.status) {
    case kNotHere:
      return {SourceFailure::kNotHere, message};
    case kNotSealed:
      return {SourceFailure::kNotSealed, message};
    case kBadToken:
      return {SourceFailure::kRefused, message};
    default:
      return {SourceFailure::kBroken, message};
  }
}

// One pull from one source: workers share the chunks still missing.
class SourcePull {
 public:
  SourcePull(const std::string& id, uint8_t* dest, uint64_t size,
             uint64_t chunk, const TransferSource& source,
             const std::string& token, const rpc::TlsContext* tls,
             const PullOptions& options, const IoLimits& limits,
             std::vector<char>* done)
      : id_(id),
        dest_(dest),
        size_(size),
        chunk_(chunk),
        source_(source),
        token_(token),
        tls_(tls),
        options_(options),
        limits_(limits),
        done_(*done) {
    for (uint64_t c = 0; c < done_.size(); ++c) {
      if (!done_[c]) missing_chunks_.push_back(c);
    }
  }

  // nullopt when every chunk arrived.
  std::optional<SourceFailure> Run() {
    size_t missing;
    {
      shoal::MutexLock lock(&mu_);
      missing = missing_chunks_.size();
    }
    size_t workers = std::min<size_t>(
        missing, static_cast<size_t>(std::max(1, options_.connections)));
    std::vector<std::thread> threads;
    for (size_t i = 1; i < workers; ++i) {
      threads.emplace_back([this] { Work(); });
    }
    Work();
    for (std::thread& t : threads) t.join();
    {
      shoal::MutexLock lock(&mu_);
      if (failure_.has_value()) return failure_;
    }
    for (char d : done_) {
      if (!d) return SourceFailure{SourceFailure::kBroken, "chunks missing"};
    }
    return std::nullopt;
  }

 private:
  void Fail(SourceFailure f) {
    shoal::MutexLock lock(&mu_);
    if (!failure_.has_value()) failure_ = std::move(f);
  }
  std::optional<uint64_t> Next() {
    shoal::MutexLock lock(&mu_);
    if (failure_.has_value() || missing_chunks_.empty()) return std::nullopt;
    uint64_t c = missing_chunks_.front();
    missing_chunks_.pop_front();
    return c;
  }

  void Work() {
    absl::StatusOr<std::unique_ptr<Link>> link =
        Connect(source_.address, tls_, options_, limits_);
    if (!link.ok()) {
      return Fail(FromIoError(link.status(), SourceFailure::kUnreachable));
    }
    if (auto f = Handshake(**link)) {
      Fail(*f);
      return;
    }
    while (std::optional<uint64_t> c = Next()) {
      if (auto f = Fetch(**link, *c)) {
        Fail(*f);
        break;
      }
      done_[*c] = 1;  // each chunk has one writer
    }
  }

  std::optional<SourceFailure> Handshake(Link& link) {
    const std::string hello = EncodeHello(token_);
    IoLimits limits = limits_;
    limits.idle_us =
        std::min<int64_t>(kHandshakeTimeoutUs, options_.io_timeout_ms * 1000);
    absl::Status s = SendBytes(link, hello.data(), hello.size(), limits);
    if (!s.ok()) return FromIoError(s, SourceFailure::kUnreachable);
    auto reply = RecvReplyHeader(link, limits);
    if (!reply.ok()) {
      return FromIoError(reply.status(), SourceFailure::kUnreachable);
    }
    auto message = RecvMessage(link, *reply, limits);
    if (!message.ok()) {
      return FromIoError(message.status(), SourceFailure::kUnreachable);
    }
    if (reply->status != kOk) return FromWire(*reply, *message);
    return std::nullopt;
  }

  std::optional<SourceFailure> Fetch(Link& link, uint64_t c) {
    uint64_t offset = c * chunk_;
    uint64_t length = std::min(chunk_, size_ - offset);
    if (options_.populate_destination && length > 0) {
      // Whole pages inside the chunk only: a neighbour's edge page may be
      // being received into by another connection.
      PrefaultForWrite(dest_ + offset, length);
    }
    uint8_t request[kRequestHeaderSize];
    EncodeRequestHeader({static_cast<uint32_t>(id_.size()), offset, length},
                        request);
    iovec iov[2] = {{request, sizeof(request)},
                    {const_cast<char*>(id_.data()), id_.size()}};
    IoLimits limits = limits_;
    limits.idle_us = options_.io_timeout_ms * 1000;
    absl::Status s = SendAll(link, iov, 2, limits);
    if (!s.ok()) return FromIoError(s, SourceFailure::kDied);
    auto reply = RecvReplyHeader(link, limits);
    if (!reply.ok()) return FromIoError(reply.status(), SourceFailure::kDied);
    if (reply->status != kOk) {
      auto message = RecvMessage(link, *reply, limits);
      if (!message.ok()) {
        return FromIoError(message.status(), SourceFailure::kDied);
      }
      return FromWire(*reply, *message);
    }
    if (reply->object_size != size_) {
      return SourceFailure{
          SourceFailure::kMismatch,
          absl::StrCat("a different object of ", reply->object_size,
                       " bytes (expected ", size_, ")")};
    }
    if (reply->length != length) {
      return SourceFailure{SourceFailure::kBroken,
                           absl::StrCat("sent ", reply->length,
                                        " bytes for a request of ", length)};
    }
    s = RecvAll(link, dest_ + offset, length, limits);
    if (!s.ok()) return FromIoError(s, SourceFailure::kDied);
    return std::nullopt;
  }

  const std::string& id_;
  uint8_t* const dest_;
  const uint64_t size_;
  const uint64_t chunk_;
  const TransferSource& source_;
  const std::string& token_;
  const rpc::TlsContext* const tls_;  // null: plain TCP
  const PullOptions& options_;
  const IoLimits limits_;
  std::vector<char>& done_;

  shoal::Mutex mu_;
  std::deque<uint64_t> missing_chunks_ ABSL_GUARDED_BY(mu_);
  std::optional<SourceFailure> failure_ ABSL_GUARDED_BY(mu_);
};

// The first byte a peer sent, left in the socket; nullopt when it sent none

}  // namespace

absl::Status PullObject(const std::string& id, uint8_t* dest, uint64_t size,
                        const std::vector<TransferSource>& sources,
                        const std::string& token, const PullOptions& options) {
  if (id.empty()) return absl::InvalidArgumentError("pull of an empty id");
  std::shared_ptr<const rpc::TlsContext> tls;
  if (options.tls.has_value()) {
    tls = *options.tls;
  } else {
    ASSIGN_OR_RETURN(tls, rpc::ProcessTls());
  }
  const std::string shown = object_store::FormatId(id);
  const uint64_t chunk = std::max<uint64_t>(1, options.chunk_bytes);
  // One chunk at least: even an empty object is asked for, so that a
  // source that does not hold it says so.
  const uint64_t num_chunks = std::max<uint64_t>(1, (size + chunk - 1) / chunk);
  std::vector<char> done(num_chunks, 0);
  const int64_t start_us = MonotonicUs();
  IoLimits limits;
  limits.stop = options.cancel;
  limits.deadline_us =
      start_us + std::max<int64_t>(1, options.timeout_ms) * 1000;

  std::vector<std::string> reasons;
  while (true) {
    reasons.clear();
    bool retry = false;  // some source is still writing its copy
    for (const TransferSource& source : sources) {
      if (source.address.empty()) {
        reasons.push_back(absl::StrCat("node ", source.node_id,
                                       " has no object store to serve it"));
        continue;
      }
      if (source.address == options.self_address) {
        reasons.push_back(absl::StrCat("node ", source.node_id, " (",
                                       source.address, ") is this node"));
        continue;
      }
      std::optional<SourceFailure> failure =
          SourcePull(id, dest, size, chunk, source, token, tls.get(), options,
                     limits, &done)
              .Run();
      if (!failure.has_value()) return absl::OkStatus();
      if (failure->kind == SourceFailure::kCancelled) {
        return absl::CancelledError(
            absl::StrCat("the pull of object ", shown, " was cancelled"));
      }
      if (failure->kind == SourceFailure::kNotSealed) retry = true;
      reasons.push_back(Describe(source, *failure));
      SHOAL_LOG(INFO) << "pull of object " << shown << ": " << reasons.back()
                      << "; " << std::count(done.begin(), done.end(), 0)
                      << " of " << num_chunks << " chunks still missing";
      if (MonotonicUs() > limits.deadline_us) break;
    }
    if (sources.empty()) reasons.push_back("no node to pull it from was named");
    if (!retry || MonotonicUs() + 100'000 > limits.deadline_us) break;
    // Wait for a source to seal its copy, but stay cancellable.
    for (int i = 0; i < 5; ++i) {
      if (options.cancel != nullptr && options.cancel->load()) break;
      usleep(20'000);
    }
  }
  if (MonotonicUs() > limits.deadline_us) {
    reasons.push_back(absl::StrCat("gave up after ", options.timeout_ms,
                                   " ms (the pull's timeout)"));
  }
  return absl::DataLossError(absl::StrCat(
      "object ", shown, " is lost: ", absl::StrJoin(reasons, "; ")));
}

}  // namespace shoal::object_plane
