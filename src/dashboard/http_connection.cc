#include "dashboard/http_connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace shoal::dashboard {

void Connection::Consume(size_t n) {
  offset += n;
  if (offset == buffer.size()) {
    buffer.clear();
    offset = 0;
    scanned = 0;
  }
}

bool Connection::HeadersComplete() {
  size_t from = std::max(offset, scanned > 3 ? scanned - 3 : size_t{0});
  bool found = buffer.find("\r\n\r\n", from) != std::string::npos ||
               buffer.find("\n\n", from) != std::string::npos;
  scanned = buffer.size();
  return found;
}

std::string PeerAddress(int fd, bool remote, int* port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  int got = remote ? getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
                   : getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  char text[INET6_ADDRSTRLEN] = "";
  if (port != nullptr) *port = 0;
  if (got != 0) return "";
  if (addr.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    if (port != nullptr) *port = ntohs(in->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
    if (port != nullptr) *port = ntohs(in6->sin6_port);
  }
  return text;
}

void SendCanned(int fd, int status, const char* reason,
                const std::string& what) {
  std::string body = absl::StrCat("{\"error\": \"", what, "\"}\n");
  std::string out = absl::StrCat(
      "HTTP/1.1 ", status, " ", reason,
      "\r\nContent-Type: application/json\r\nContent-Length: ", body.size(),
      "\r\nConnection: close\r\n\r\n", body);
  // Best effort: a client that does not read loses it.
  (void)send(fd, out.data(), out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

int RemainingMs(HttpClock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                  deadline - HttpClock::now())
                  .count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

bool RequestStream::is_readable() const {
  return connection_->Buffered() > 0 || Wait(POLLIN);
}

bool RequestStream::is_writable() const { return Wait(POLLOUT); }

ssize_t RequestStream::read(char* ptr, size_t size) {
  if (connection_->Buffered() == 0) {
    int filled = Fill();
    broken_ |= filled < 0;
    if (filled <= 0) return filled;
  }
  size_t n = std::min(size, connection_->Buffered());
  if (delivered_ + n > max_bytes_) {
    broken_ = true;
    if (over_cap_ != nullptr) *over_cap_ = true;
    return -1;
  }
  std::memcpy(ptr, connection_->buffer.data() + connection_->offset, n);
  connection_->Consume(n);
  delivered_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t RequestStream::write(const char* ptr, size_t size) {
  while (true) {
    ssize_t n = send(connection_->fd, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    if ((errno != EAGAIN && errno != EWOULDBLOCK) || !Wait(POLLOUT)) {
      broken_ = true;
      return -1;
    }
  }
}

void RequestStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  ip = PeerAddress(connection_->fd, /*remote=*/true, &port);
}

void RequestStream::get_local_ip_and_port(std::string& ip, int& port) const {
  ip = PeerAddress(connection_->fd, /*remote=*/false, &port);
}

int RequestStream::Fill() {
  char chunk[kRecvChunk];
  while (true) {
    ssize_t n = recv(connection_->fd, chunk, sizeof(chunk), MSG_DONTWAIT);
    if (n > 0) {
      connection_->buffer.append(chunk, static_cast<size_t>(n));
      return 1;
    }
    if (n == 0) return 0;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    if (!Wait(POLLIN)) return -1;
  }
}

bool RequestStream::Wait(short events) const {
  while (true) {
    int left = RemainingMs(deadline_);
    if (left == 0) return false;
    pollfd fds[2] = {{connection_->fd, events, 0}, {stop_fd_, POLLIN, 0}};
    int n = poll(fds, 2, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || fds[1].revents != 0) return false;
    if (fds[0].revents != 0) return true;
  }
}

}  // namespace shoal::dashboard
