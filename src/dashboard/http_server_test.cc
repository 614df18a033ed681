#include "dashboard/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace shoal::dashboard {
namespace {

using Clock = std::chrono::steady_clock;
using httplib::Server;

// A server with small limits on 127.0.0.1: GET /hello, POST /echo; the
// admission handler refuses requests without `X-Ok`.
class HttpServerTest : public ::testing::Test {
 protected:
  void Start(HttpLimits limits) {
    auto server = HttpServer::Create(limits);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    server_->Get("/hello", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("hello", "text/plain");
    });
    server_->Post("/echo",
                  [this](const httplib::Request& req, httplib::Response& res) {
                    ++bodies_read_;
                    res.set_content(req.body, "text/plain");
                  });
    server_->set_admission_handler(
        [](const httplib::Request& req, httplib::Response& res) {
          if (req.has_header("X-Ok")) return Server::HandlerResponse::Unhandled;
          res.status = 401;
          res.set_content("no X-Ok", "text/plain");
          return Server::HandlerResponse::Handled;
        });
    port_ = server_->bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    while (!server_->is_running()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  void TearDown() override {
    if (server_ == nullptr) return;
    server_->stop();
    thread_.join();
  }

  int Connect() {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port_);
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    timeval wait{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    return fd;
  }

  // What arrives on `fd` until the server closes it (or 10 s pass).
  static std::string ReadAll(int fd) {
    std::string all;
    char buf[4096];
    for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) all.append(buf, n);
    return all;
  }

  static void Send(int fd, const std::string& bytes) {
    ASSERT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }

  httplib::Client Client() {
    httplib::Client client("127.0.0.1", port_);
    client.set_default_headers({{"X-Ok", "1"}});
    return client;
  }

  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<int> bodies_read_ = 0;
};

TEST_F(HttpServerTest, ASecondServerCannotShareItsPort) {
  Start(HttpLimits());
  auto other = HttpServer::Create(HttpLimits());
  ASSERT_TRUE(other.ok()) << other.status();
  // Every connection to port_ stays this server's.
  EXPECT_FALSE((*other)->bind_to_port("127.0.0.1", port_));
  // Nor may a plain socket that asks to share it.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int yes = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &yes, sizeof(yes));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port_);
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  EXPECT_NE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  close(fd);
}

TEST_F(HttpServerTest, ClientsThatSendHeadersSlowlyHoldNoWorker) {
  Start({.workers = 1, .header_timeout = std::chrono::milliseconds(1000)});
  std::vector<int> slow;
  for (int i = 0; i < 10; ++i) {
    slow.push_back(Connect());
    Send(slow.back(), "GET /hello HTTP/1.1\r\nHost: x\r\n");
  }
  auto hello = Client().Get("/hello");  // the one worker is free
  ASSERT_TRUE(hello);
  EXPECT_EQ(hello->body, "hello");
  auto begin = Clock::now();
  for (int fd : slow) {
    std::string answer = ReadAll(fd);
    EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 408")) << answer;
    EXPECT_TRUE(absl::StrContains(answer, "send the whole request at once"));
    close(fd);
  }
  EXPECT_LT(Clock::now() - begin, std::chrono::seconds(5));
}

TEST_F(HttpServerTest, ConnectionsOverThePeerCapAreClosedAtOnce) {
  Start({.max_connections_per_peer = 3});
  std::vector<int> open;
  for (int i = 0; i < 3; ++i) open.push_back(Connect());
  int extra = Connect();
  std::string answer = ReadAll(extra);
  close(extra);
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 503")) << answer;
  EXPECT_TRUE(absl::StrContains(answer, "too many connections from 127.0.0.1"));
  close(open.back());
  open.pop_back();
  // The server notices the close at its next poll.
  bool served = false;
  for (int i = 0; i < 50 && !served; ++i) {
    auto hello = Client().Get("/hello");
    served = hello && hello->status == 200;
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(served);
  for (int fd : open) close(fd);
}

TEST_F(HttpServerTest, ARefusedRequestsBodyIsNeverRead) {
  Start({});
  // The headers claim 100 MB; none of it is sent, and the answer comes.
  int fd = Connect();
  Send(fd,
       "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n");
  std::string answer = ReadAll(fd);
  close(fd);
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 401")) << answer;
  EXPECT_TRUE(absl::StrContains(answer, "Connection: close")) << answer;
  // Expect: 100-continue is not told to continue.
  fd = Connect();
  Send(fd,
       "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n"
       "Expect: 100-continue\r\n\r\n");
  answer = ReadAll(fd);
  close(fd);
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 401")) << answer;
  EXPECT_EQ(bodies_read_, 0);
}

TEST_F(HttpServerTest, BodiesOverTheCapAre413) {
  Start({.max_body_bytes = 1024});
  int fd = Connect();
  Send(fd,
       "POST /echo HTTP/1.1\r\nHost: x\r\nX-Ok: 1\r\n"
       "Content-Length: 100000000\r\n\r\n");
  std::string answer = ReadAll(fd);
  close(fd);
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 413")) << answer;
  // Chunked: stopped once past the cap.
  auto r =
      Client().Post("/echo", std::string(1024 * 1024 * 2, 'a'), "text/plain");
  EXPECT_TRUE(!r || r->status == 413);
  size_t sent = 0;
  r = Client().Post(
      "/echo",
      [&](size_t, httplib::DataSink& sink) {
        std::string chunk(64 << 10, 'b');
        sink.write(chunk.data(), chunk.size());
        sent += chunk.size();
        if (sent >= (5 << 20)) sink.done();
        return true;
      },
      "text/plain");
  EXPECT_TRUE(!r || r->status == 413);
  auto small = Client().Post("/echo", "fits", "text/plain");
  ASSERT_TRUE(small);
  EXPECT_EQ(small->body, "fits");
  EXPECT_EQ(bodies_read_, 1);
}

TEST_F(HttpServerTest, ABodyMustArriveWithinTheTransferDeadline) {
  Start({.transfer_timeout = std::chrono::milliseconds(1000)});
  int fd = Connect();
  Send(fd,
       "POST /echo HTTP/1.1\r\nHost: x\r\nX-Ok: 1\r\nContent-Length: 100\r\n"
       "\r\n");
  auto begin = Clock::now();
  for (int i = 0; i < 40; ++i) {  // a byte every 100 ms: 4 s in all
    if (send(fd, "a", 1, MSG_NOSIGNAL) < 0) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) > 0) break;
  }
  std::string answer = ReadAll(fd);
  close(fd);
  EXPECT_LT(Clock::now() - begin, std::chrono::milliseconds(3000));
  EXPECT_EQ(bodies_read_, 0);
  EXPECT_FALSE(absl::StartsWith(answer, "HTTP/1.1 200")) << answer;
}

TEST_F(HttpServerTest, KeptAliveConnectionsServeManyRequests) {
  Start({.workers = 1});
  httplib::Client client = Client();
  client.set_keep_alive(true);
  for (int i = 0; i < 20; ++i) {
    auto hello = client.Get("/hello");
    ASSERT_TRUE(hello) << i;
    EXPECT_EQ(hello->body, "hello");
  }
  // Two requests in one write: both answered, in order.
  int fd = Connect();
  Send(fd,
       "GET /hello HTTP/1.1\r\nHost: x\r\nX-Ok: 1\r\n\r\n"
       "GET /hello HTTP/1.1\r\nHost: x\r\nX-Ok: 1\r\nConnection: close\r\n"
       "\r\n");
  std::string answer = ReadAll(fd);
  close(fd);
  EXPECT_EQ(answer.find("HTTP/1.1 200", 1) != std::string::npos, true)
      << answer;
}

TEST_F(HttpServerTest, StopsPromptlyWithClientsConnected) {
  Start({});
  std::vector<int> held;
  for (int i = 0; i < 5; ++i) {
    held.push_back(Connect());
    Send(held.back(),
         "POST /echo HTTP/1.1\r\nX-Ok: 1\r\nContent-Length: 9\r\n");
  }
  int body = Connect();
  Send(body, "POST /echo HTTP/1.1\r\nX-Ok: 1\r\nContent-Length: 9\r\n\r\nab");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto begin = Clock::now();
  server_->stop();
  thread_.join();
  server_.reset();
  EXPECT_LT(Clock::now() - begin, std::chrono::seconds(2));
  for (int fd : held) close(fd);
  close(body);
}

}  // namespace
}  // namespace shoal::dashboard
