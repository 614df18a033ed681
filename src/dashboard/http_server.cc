#include "dashboard/http_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "dashboard/http_connection.h"

namespace shoal::dashboard {
namespace {

using Clock = HttpClock;

// What one request's handling tells the worker that runs it.
struct Exchange {
  bool body_unread = false;
  bool over_cap = false;  // a chunked body passed max_body_bytes (the stream)
};
thread_local Exchange* current_exchange = nullptr;

// httplib's accept loop hands each socket to a task queue; this one runs
// the hand-off at once (it only registers the socket with the gate) and
// stops the gate and workers when the loop ends.
class HandOffQueue : public httplib::TaskQueue {
 public:
  explicit HandOffQueue(std::function<void()> on_shutdown)
      : on_shutdown_(std::move(on_shutdown)) {}
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override { on_shutdown_(); }

 private:
  std::function<void()> on_shutdown_;
};

}  // namespace

// The gate (one thread, poll()), the work queue and the workers. Counts
// and queues are guarded by mu_; a connection the gate took from
// `incoming_` belongs to the gate thread alone, one taken from `work_` to
// its worker alone.
class HttpServer::Core {
 public:
  Core(HttpServer* server, int stop_fd, int wake_fd)
      : server_(server),
        limits_(server->limits()),
        stop_fd_(stop_fd),
        wake_fd_(wake_fd) {}

  ~Core() {
    Stop();
    close(stop_fd_);
    close(wake_fd_);
  }

  void Start() {
    {
      shoal::MutexLock lock(&mu_);
      if (running_) return;
      running_ = true;
      stopping_ = false;
    }
    uint64_t drain;
    while (::read(stop_fd_, &drain, sizeof(drain)) > 0) {
    }
    gate_ = std::thread([this] { RunGate(); });
    for (int i = 0; i < limits_.workers; ++i) {
      workers_.emplace_back([this] { RunWorker(); });
    }
  }

  // Closes every connection; a request being handled ends when its
  // handler returns (its reads and writes fail at once).
  void Stop() {
    {
      shoal::MutexLock lock(&mu_);
      if (!running_) return;
      stopping_ = true;
    }
    uint64_t one = 1;
    (void)::write(stop_fd_, &one, sizeof(one));
    work_ready_.SignalAll();
    if (gate_.joinable()) gate_.join();
    for (std::thread& worker : workers_) worker.join();
    workers_.clear();
    std::deque<std::unique_ptr<Connection>> left;
    {
      shoal::MutexLock lock(&mu_);
      left.swap(work_);
      for (auto& c : incoming_) left.push_back(std::move(c));
      incoming_.clear();
      running_ = false;
    }
    for (auto& c : left) Close(std::move(c));
  }

  // On httplib's accept thread: admits the socket to the gate, or answers
  // 503 and closes it when its address (or the server) has too many open.
  void Accept(int fd) {
    std::string peer = PeerAddress(fd, /*remote=*/true, nullptr);
    std::string refusal;
    {
      shoal::MutexLock lock(&mu_);
      int& mine = per_peer_[peer];
      if (mine >= limits_.max_connections_per_peer) {
        refusal = absl::StrCat("too many connections from ", peer,
                               " are open: close some, or reuse one "
                               "(keep-alive), and retry");
      } else if (stopping_ || open_ >= limits_.max_connections) {
        refusal = "the server has too many connections open: retry later";
      } else {
        ++mine;
        ++open_;
      }
      if (mine == 0) per_peer_.erase(peer);
    }
    if (!refusal.empty()) {
      SendCanned(fd, 503, "Service Unavailable", refusal);
      close(fd);
      NoteRefusal(peer, "too many connections");
      return;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    // httplib writes an answer's head and body apart: without this, the
    // body waits for the client's delayed ACK (40 ms a request).
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto c = std::make_unique<Connection>();
    c->fd = fd;
    c->peer = std::move(peer);
    c->state = Connection::State::kHeaders;
    c->deadline = Clock::now() + limits_.header_timeout;
    ToGate(std::move(c));
  }

 private:
  void ToGate(std::unique_ptr<Connection> c) {
    {
      shoal::MutexLock lock(&mu_);
      incoming_.push_back(std::move(c));
    }
    uint64_t one = 1;
    (void)::write(wake_fd_, &one, sizeof(one));
  }

  void ToWorkers(std::unique_ptr<Connection> c) {
    {
      shoal::MutexLock lock(&mu_);
      work_.push_back(std::move(c));
    }
    work_ready_.Signal();
  }

  void Close(std::unique_ptr<Connection> c) {
    close(c->fd);
    shoal::MutexLock lock(&mu_);
    --open_;
    auto it = per_peer_.find(c->peer);
    if (it != per_peer_.end() && --it->second <= 0) per_peer_.erase(it);
  }

  // At most one line every 10 s, with how many were refused meanwhile: a
  // flood must not flood the log too.
  void NoteRefusal(const std::string& peer, const char* why) {
    shoal::MutexLock lock(&log_mu_);
    ++refused_since_log_;
    Clock::time_point now = Clock::now();
    if (now - last_log_ < std::chrono::seconds(10)) return;
    SHOAL_LOG(WARNING) << "dashboard: closed a connection from " << peer << " ("
                       << why << "); " << refused_since_log_
                       << " refused in the last 10 s";
    refused_since_log_ = 0;
    last_log_ = now;
  }

  // Reads what the socket has. False when the connection is done with
  // (closed by the client, or refused here).
  bool ReadSome(Connection& c) {
    char chunk[kRecvChunk];
    while (true) {
      ssize_t n = recv(c.fd, chunk, sizeof(chunk), MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      if (n <= 0) return false;
      if (c.state == Connection::State::kLinger) {
        c.drained += static_cast<size_t>(n);
        if (c.drained >= limits_.linger_bytes) return false;
        continue;
      }
      if (c.state == Connection::State::kIdle) {
        c.state = Connection::State::kHeaders;
        c.deadline = Clock::now() + limits_.header_timeout;
      }
      c.buffer.append(chunk, static_cast<size_t>(n));
      return true;
    }
  }

  // What the gate does with a connection it holds now: hands it to the
  // workers, closes it, or keeps waiting (false).
  enum class Verdict { kWait, kReady, kClose };
  Verdict Judge(Connection& c, Clock::time_point now) {
    if (c.state != Connection::State::kLinger && c.Buffered() > 0) {
      if (c.state == Connection::State::kIdle) {
        c.state = Connection::State::kHeaders;
        c.deadline = now + limits_.header_timeout;
      }
      if (c.HeadersComplete()) return Verdict::kReady;
      if (c.Buffered() > limits_.max_header_bytes) {
        SendCanned(c.fd, 431, "Request Header Fields Too Large",
                   absl::StrCat("the request line and headers are over ",
                                limits_.max_header_bytes >> 10,
                                " KiB: send fewer or shorter headers"));
        NoteRefusal(c.peer, "its headers were too long");
        return Verdict::kClose;
      }
    }
    if (now < c.deadline) return Verdict::kWait;
    if (c.state == Connection::State::kHeaders) {
      SendCanned(
          c.fd, 408, "Request Timeout",
          absl::StrCat("the request's headers did not arrive within ",
                       limits_.header_timeout.count() / 1000,
                       " s of the connection (or of its first byte): send "
                       "the whole request at once"));
      NoteRefusal(c.peer, "its headers came too slowly");
    }
    return Verdict::kClose;
  }

  void RunGate() {
    std::vector<std::unique_ptr<Connection>> waiting;
    std::vector<pollfd> fds;
    while (true) {
      {
        shoal::MutexLock lock(&mu_);
        if (stopping_) break;
        for (auto& c : incoming_) waiting.push_back(std::move(c));
        incoming_.clear();
      }
      Clock::time_point now = Clock::now();
      Clock::time_point next = now + std::chrono::seconds(1);
      for (auto& c : waiting) {
        Verdict verdict = Judge(*c, now);
        if (verdict == Verdict::kReady) {
          ToWorkers(std::move(c));
        } else if (verdict == Verdict::kClose) {
          Close(std::move(c));
        } else {
          next = std::min(next, c->deadline);
        }
      }
      std::erase(waiting, nullptr);
      fds.assign({{stop_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}});
      for (auto& c : waiting) fds.push_back({c->fd, POLLIN, 0});
      int n = poll(fds.data(), fds.size(), RemainingMs(next) + 1);
      if (n < 0 && errno != EINTR) {
        SHOAL_LOG(ERROR) << "dashboard: poll failed: " << strerror(errno);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (n <= 0) continue;
      if (fds[1].revents != 0) {
        uint64_t drain;
        (void)::read(wake_fd_, &drain, sizeof(drain));
      }
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        if (!ReadSome(*waiting[i - 2])) Close(std::move(waiting[i - 2]));
      }
      std::erase(waiting, nullptr);
    }
    for (auto& c : waiting) Close(std::move(c));
  }

  void RunWorker() {
    while (true) {
      std::unique_ptr<Connection> c;
      {
        shoal::MutexLock lock(&mu_);
        while (!stopping_ && work_.empty()) work_ready_.Wait(&mu_);
        if (stopping_) return;
        c = std::move(work_.front());
        work_.pop_front();
      }
      Serve(std::move(c));
    }
  }

  // One request of `c`, then where the connection goes next.
  void Serve(std::unique_ptr<Connection> c) {
    Exchange exchange;
    current_exchange = &exchange;
    RequestStream stream(
        c.get(), Clock::now() + limits_.transfer_timeout, stop_fd_,
        limits_.max_header_bytes + limits_.max_body_bytes + (1 << 20),
        &exchange.over_cap);
    bool last = ++c->served >= limits_.keep_alive_max_requests;
    bool closed = false;
    bool ok = server_->process_request(stream, last, closed, nullptr);
    current_exchange = nullptr;
    Clock::time_point now = Clock::now();
    if (exchange.body_unread || exchange.over_cap) {
      // Closing with unread bytes would reset the connection and could
      // lose the answer: stop sending, drain a little, then close.
      shutdown(c->fd, SHUT_WR);
      c->state = Connection::State::kLinger;
      c->deadline = now + limits_.linger_timeout;
      c->buffer.clear();
      c->offset = 0;
      return ToGate(std::move(c));
    }
    if (!ok || closed || last || stream.broken()) return Close(std::move(c));
    c->state = Connection::State::kIdle;
    c->deadline = now + limits_.keep_alive_timeout;
    c->scanned = 0;  // a pipelined request may be buffered already
    ToGate(std::move(c));
  }

  HttpServer* const server_;
  const HttpLimits& limits_;
  const int stop_fd_;  // readable once stopping (never drained until Start)
  const int wake_fd_;  // new connections for the gate

  shoal::Mutex mu_;
  shoal::CondVar work_ready_;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int open_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int> per_peer_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Connection>> incoming_ ABSL_GUARDED_BY(mu_);
  std::deque<std::unique_ptr<Connection>> work_ ABSL_GUARDED_BY(mu_);

  shoal::Mutex log_mu_;
  Clock::time_point last_log_ ABSL_GUARDED_BY(log_mu_);
  int refused_since_log_ ABSL_GUARDED_BY(log_mu_) = 0;

  std::thread gate_;
  std::vector<std::thread> workers_;
};

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Create(
    const HttpLimits& limits) {
  int stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  int wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (stop_fd < 0 || wake_fd < 0) {
    std::string why = strerror(errno);
    if (stop_fd >= 0) close(stop_fd);
    if (wake_fd >= 0) close(wake_fd);
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot make the HTTP server's event descriptors (", why,
                     "): raise the open-file limit (ulimit -n)"));
  }
  return std::unique_ptr<HttpServer>(new HttpServer(limits, stop_fd, wake_fd));
}

HttpServer::HttpServer(const HttpLimits& limits, int stop_fd, int wake_fd)
    : limits_(limits), core_(std::make_unique<Core>(this, stop_fd, wake_fd)) {
  new_task_queue = [this] {
    // httplib listens with a backlog of 5: a burst of connections (slow
    // ones among them) would make others wait out a SYN retransmission.
    // Listening again on the bound socket raises it.
    ::listen(svr_sock_, SOMAXCONN);
    core_->Start();
    return new HandOffQueue([this] { core_->Stop(); });
  };
  // httplib binds with SO_REUSEPORT by default, which lets a second
  // server of the same user (another cluster's dashboard, a stranger's
  // process) bind the same port and take half of its connections.
  // SO_REUSEADDR alone still binds again past a closed port's TIME_WAIT; a
  // port in use is refused, and the dashboard moves to a free one, saying
  // so.
  set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  set_pre_routing_handler(
      [this](const httplib::Request& req, httplib::Response& res) {
        return Admit(req, res);
      });
  // Without this, httplib answers "100 Continue" before any check, and the
  // client sends the body the handlers would refuse.
  set_expect_100_continue_handler(
      [this](const httplib::Request& req, httplib::Response& res) {
        return Admit(req, res) == HandlerResponse::Handled ? res.status : 100;
      });
  httplib::Server::set_error_handler(HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) {
        if (current_exchange != nullptr && current_exchange->over_cap) {
          res.status = 413;
        }
        return error_handler_ ? error_handler_(req, res)
                              : HandlerResponse::Unhandled;
      }));
  set_payload_max_length(limits.max_body_bytes);
  set_keep_alive_max_count(limits.keep_alive_max_requests);
  set_keep_alive_timeout(std::chrono::duration_cast<std::chrono::seconds>(
                             limits.keep_alive_timeout)
                             .count());
}

HttpServer::~HttpServer() { core_->Stop(); }

void HttpServer::set_admission_handler(HandlerWithResponse handler) {
  admission_ = std::move(handler);
}

void HttpServer::set_error_handler(HandlerWithResponse handler) {
  error_handler_ = std::move(handler);
}

bool HttpServer::process_and_close_socket(socket_t sock) {
  core_->Accept(sock);
  return true;
}

bool HttpServer::ExpectsBody(const httplib::Request& req) {
  if (req.has_header("Transfer-Encoding")) return true;
  uint64_t length = 0;
  return absl::SimpleAtoi(req.get_header_value("Content-Length"), &length) &&
         length > 0;
}

httplib::Server::HandlerResponse HttpServer::Admit(const httplib::Request& req,
                                                   httplib::Response& res) {
  // The request is the server's own, not const: only the handler's view
  // is.
  httplib::Headers& headers = const_cast<httplib::Headers&>(req.headers);
  // A request with neither Content-Length nor chunked encoding has no
  // body (RFC 9112, 6.3), but cpp-httplib reads one "until the connection
  // closes": `curl -X POST .../stop` would wait out the deadline. Saying
  // the length is 0 makes it read none.
  if ((req.method == "POST" || req.method == "PUT" || req.method == "PATCH" ||
       req.method == "DELETE") &&
      !req.has_header("Content-Length") &&
      !req.has_header("Transfer-Encoding")) {
    headers.emplace("Content-Length", "0");
  }
  // The admission handler first: a client without the token learns
  // nothing else, not even the cap.
  HandlerResponse answer =
      admission_ ? admission_(req, res) : HandlerResponse::Unhandled;
  uint64_t length = 0;
  if (answer == HandlerResponse::Unhandled) {
    if (req.has_header("Content-Length") &&
        (!absl::SimpleAtoi(req.get_header_value("Content-Length"), &length) ||
         req.get_header_value_count("Content-Length") > 1)) {
      res.status = 400;  // the error handler says why
      answer = HandlerResponse::Handled;
    } else if (length > limits_.max_body_bytes) {
      res.status = 413;
      answer = HandlerResponse::Handled;
    }
  }
  if (answer == HandlerResponse::Handled && ExpectsBody(req)) {
    if (current_exchange != nullptr) current_exchange->body_unread = true;
    headers.erase("Connection");
    headers.emplace("Connection", "close");
  }
  return answer;
}

}  // namespace shoal::dashboard
