// An httplib::Server that slow or hostile clients cannot starve, for the
// head's HTTP port (and an agent's metrics port).
//
// cpp-httplib (0.11) gives each connection a pool thread from accept to
// close, and its read timeout is per recv(): a client that sends one byte
// every few seconds keeps a thread forever, and ten of them stall the
// server. It also reads a request's whole body (discarding one over the
// cap) before the handlers see it. This server keeps httplib's parsing,
// routing and handlers, and replaces what happens around them:
//
//  - Connections wait for their request's headers in one poll() loop (the
//    gate), not on a worker: a slow client costs a descriptor and a buffer,
//    never a thread. Headers must be complete within `header_timeout` of
//    the connection (or of a kept-alive connection's first new byte) and
//    fit in `max_header_bytes`, else the client gets 408 / 431 and is
//    closed. An idle kept-alive connection goes back to the gate, and is
//    closed after `keep_alive_timeout`.
//  - A complete request goes to one of `workers` threads. Its body and its
//    answer together must pass within `transfer_timeout` (a deadline for
//    the whole exchange, not per recv).
//  - At most `max_connections_per_peer` connections from one address (and
//    `max_connections` in all) are open at once; the excess is answered
//    503 and closed on accept.
//  - The admission handler runs once the headers are in and before any
//    byte of the body is read; when it answers, the body is never read
//    (the connection is closed after a short lingering drain, so that the
//    client sees the answer rather than a reset). A Content-Length over
//    `max_body_bytes` is refused with 413 from the header alone, and a
//    chunked body stops being read once it passes the cap.
//
// Threading: the accept loop is httplib's listen_after_bind(); the gate and
// the workers start with it and are joined before it returns (after
// stop()). Handlers run on the workers, as httplib's pool threads before.
#ifndef SHOAL_DASHBOARD_HTTP_SERVER_H_
#define SHOAL_DASHBOARD_HTTP_SERVER_H_

#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"

namespace shoal::dashboard {

struct HttpLimits {
  int workers = 16;
  int max_connections = 512;
  int max_connections_per_peer = 64;
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds keep_alive_timeout{5000};
  std::chrono::milliseconds transfer_timeout{60000};
  // After an answer that left the body unread: how long, and how many
  // bytes, to drain before closing.
  std::chrono::milliseconds linger_timeout{2000};
  size_t linger_bytes = 1 << 20;
  size_t max_header_bytes = 64 << 10;
  size_t max_body_bytes = 16 << 20;
  size_t keep_alive_max_requests = 100;
};

class HttpServer : public httplib::Server {
 public:
  // The error says why it cannot (no descriptors left).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Create(
      const HttpLimits& limits);
  ~HttpServer() override;

  // Runs after the headers, before the body (see above); Handled answers
  // with what it put in `res`. Use this, not set_pre_routing_handler(),
  // which this class owns. Set it before listening.
  void set_admission_handler(HandlerWithResponse handler);

  // Runs on every answer of status >= 400 that httplib writes, as
  // httplib::Server::set_error_handler (which this hides: a chunked body
  // over the cap gets 413 rather than httplib's 400).
  void set_error_handler(HandlerWithResponse handler);

  const HttpLimits& limits() const { return limits_; }

 private:
  class Core;
  HttpServer(const HttpLimits& limits, int stop_fd, int wake_fd);
  bool process_and_close_socket(socket_t sock) override;
  // Whether `req` has body bytes that a refusal leaves unread.
  static bool ExpectsBody(const httplib::Request& req);
  HandlerResponse Admit(const httplib::Request& req, httplib::Response& res);

  const HttpLimits limits_;
  HandlerWithResponse admission_;
  HandlerWithResponse error_handler_;
  std::unique_ptr<Core> core_;
};

}  // namespace shoal::dashboard

#endif  // SHOAL_DASHBOARD_HTTP_SERVER_H_
