// One client connection of the HTTP port (HttpServer), and the stream
// through which httplib reads one request from it and writes the answer.
// Internal to src/dashboard.
//
// A Connection is owned by one thread at a time (the gate, or the worker
// serving it); a RequestStream lives on that worker for one request.
#ifndef SHOAL_DASHBOARD_HTTP_CONNECTION_H_
#define SHOAL_DASHBOARD_HTTP_CONNECTION_H_

#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <string>

namespace shoal::dashboard {

using HttpClock = std::chrono::steady_clock;

inline constexpr size_t kRecvChunk = 16 << 10;

// One client connection, owned by whichever of the gate, the work queue or
// a worker holds it.
struct Connection {
  enum class State {
    kHeaders,  // waiting for the rest of a request's headers
    kIdle,     // kept alive, waiting for the next request's first byte
    kLinger,   // answered without reading the body: draining, then closing
  };
  int fd = -1;
  std::string peer;    // the client's address, without its port
  std::string buffer;  // read, not yet consumed, from `offset` on
  size_t offset = 0;
  size_t scanned = 0;  // where to resume looking for the headers' end
  State state = State::kHeaders;
  HttpClock::time_point deadline;
  size_t served = 0;   // requests answered on this connection
  size_t drained = 0;  // bytes thrown away while lingering

  size_t Buffered() const { return buffer.size() - offset; }
  void Consume(size_t n);
  // Whether the buffered bytes hold a whole request line and headers.
  bool HeadersComplete();
};

// The client's (remote) or our (local) address of `fd`, without the port,
// which goes to `port` when that is not null; "" if unknown.
std::string PeerAddress(int fd, bool remote, int* port);

// An answer the HTTP layer sends by itself, before any handler: JSON that
// says why; the caller closes the connection.
void SendCanned(int fd, int status, const char* reason,
                const std::string& what);

// Milliseconds until `deadline`, 0 once it has passed.
int RemainingMs(HttpClock::time_point deadline);

// A request's view of its connection for httplib: the gate's buffered
// bytes first, then the socket, all before one deadline; it fails at once
// when `stop_fd` becomes readable (the server stopping). At most
// `max_bytes` are read; past them, reads fail and `*over_cap` is set.
class RequestStream : public httplib::Stream {
 public:
  RequestStream(Connection* connection, HttpClock::time_point deadline,
                int stop_fd, size_t max_bytes, bool* over_cap)
      : connection_(connection),
        deadline_(deadline),
        stop_fd_(stop_fd),
        max_bytes_(max_bytes),
        over_cap_(over_cap) {}

  // Whether a read or write failed (deadline, cap, error): what is left
  // on the connection cannot be trusted to start a request.
  bool broken() const { return broken_; }

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return connection_->fd; }

 private:
  // 1: bytes are buffered; 0: the client closed; -1: error, deadline or
  // the server stopping.
  int Fill();
  bool Wait(short events) const;

  Connection* const connection_;
  const HttpClock::time_point deadline_;
  const int stop_fd_;
  const size_t max_bytes_;
  bool* const over_cap_;
  size_t delivered_ = 0;
  bool broken_ = false;
};

}  // namespace shoal::dashboard

#endif  // SHOAL_DASHBOARD_HTTP_CONNECTION_H_
