// The head's RPC port keeps a seat for the cluster while a peer without the
// token holds 3,000 connections to it and opens a new one for each that the
// head drops: `shoal status` answers, a new program connects and runs a
// task, the agent's heartbeats keep its node alive, and a new node joins.
// The strangers either send nothing or stall halfway through their hello.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shoal/api.h"
#include "shoal/init.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::testing::ClusterSpec;
using ::shoal::testing::RunCli;
using ::testing::HasSubstr;

int64_t Add(int64_t a, int64_t b) { return a + b; }
SHOAL_REMOTE(Add);

constexpr int kStrangers = 3000;
// The flood stops by itself after this long, whatever the test does.
constexpr auto kFloodBound = std::chrono::minutes(5);

// The first bytes of a Hello frame whose header promises 200 bytes more: a
// server that reads it waits for the rest, which never comes.
std::string PartialHello() {
  std::string out(9, '\0');
  uint32_t len = 13 + 200;
  memcpy(out.data(), &len, 4);
  out[4] = 1;  // kind: Hello
  return out;
}

// A peer without the token: `connections` TCP connections to `address`,
// each reopened as soon as the server drops it, spread over a few threads,
// until Stop() (or kFloodBound). Each connection sends nothing, or the
// start of a hello.
class StrangerFlood {
 public:
  enum class Kind { kSilent, kPartialHello };

  StrangerFlood(const std::string& address, int connections, Kind kind)
      : kind_(kind) {
    size_t colon = address.rfind(':');
    addr_.sin_family = AF_INET;
    addr_.sin_port =
        htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
    inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr_.sin_addr);
    constexpr int kThreads = 2;
    for (int t = 0; t < kThreads; ++t) {
      int mine = connections / kThreads + (t < connections % kThreads);
      threads_.emplace_back([this, mine] { Hold(mine); });
    }
  }
  ~StrangerFlood() { Stop(); }

  void Stop() {
    stop_ = true;
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

  // Connections open now, opened in all, and seen dropped by the server.
  int64_t held() const { return held_; }
  int64_t opened() const { return opened_; }
  int64_t dropped() const { return dropped_; }

  // Waits (up to `limit`) until `cond` holds.
  template <typename Cond>
  bool AwaitUntil(Cond cond, std::chrono::seconds limit) const {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (cond()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return cond();
  }

 private:
  // A new connection, registered with `epfd`; -1 when the server did not
  // take it within a second.
  int Open(int epfd) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    timeval tv{1, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, reinterpret_cast<const sockaddr*>(&addr_), sizeof(addr_)) !=
        0) {
      close(fd);
      return -1;
    }
    if (kind_ == Kind::kPartialHello) {
      std::string bytes = PartialHello();
      (void)!send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    }
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
    ++opened_;
    ++held_;
    return fd;
  }

  void Hold(int connections) {
    const auto bound = std::chrono::steady_clock::now() + kFloodBound;
    int epfd = epoll_create1(EPOLL_CLOEXEC);
    std::vector<int> fds;
    int missing = connections;  // to open (again)
    epoll_event events[256];
    while (!stop_ && std::chrono::steady_clock::now() < bound) {
      while (missing > 0 && !stop_) {
        int fd = Open(epfd);
        if (fd < 0) break;  // try again after a look at what was dropped
        fds.push_back(fd);
        --missing;
      }
      int n = epoll_wait(epfd, events, 256, missing > 0 ? 10 : 100);
      for (int i = 0; i < n; ++i) {
        int fd = events[i].data.fd;
        char buf[4096];
        ssize_t got;
        while ((got = recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
        }
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        // Dropped: open another in its place.
        epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nullptr);
        close(fd);
        fds.erase(std::find(fds.begin(), fds.end(), fd));
        --held_;
        ++dropped_;
        ++missing;
      }
    }
    for (int fd : fds) close(fd);
    held_ -= static_cast<int64_t>(fds.size());
    close(epfd);
  }

  const Kind kind_;
  sockaddr_in addr_{};
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> held_{0};
  std::atomic<int64_t> opened_{0};
  std::atomic<int64_t> dropped_{0};
  std::vector<std::thread> threads_;
};

class RpcStrangersTest : public shoal::testing::ClusterTest {
 protected:
  void TearDown() override {
    shoal::Shutdown();
    ClusterTest::TearDown();
  }

  void KeepsASeatForTheCluster(StrangerFlood::Kind kind) {
    rlimit limit;
    ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
    limit.rlim_cur = limit.rlim_max;
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &limit), 0);
    ASSERT_GE(limit.rlim_cur, static_cast<rlim_t>(kStrangers + 500))
        << "this test holds " << kStrangers
        << " connections: raise the hard limit of open files (ulimit -Hn)";
    ClusterSpec spec;
    spec.nodes = {{"strangers-head", 2, ""}};
    auto started = shoal::testing::TestCluster::Start(spec);
    ASSERT_TRUE(started.ok()) << started.status();
    cluster_ = std::move(*started);

    StrangerFlood flood(cluster_->address(), kStrangers, kind);
    ASSERT_TRUE(flood.AwaitUntil([&] { return flood.opened() >= kStrangers; },
                                 std::chrono::seconds(120)))
        << "the flood opened " << flood.opened() << " of " << kStrangers
        << " connections";
    // The head drops them as fast as they come back: the flood goes on.
    ASSERT_TRUE(flood.AwaitUntil([&] { return flood.dropped() >= kStrangers; },
                                 std::chrono::seconds(120)))
        << "the head dropped " << flood.dropped() << " connections";

    const int64_t dropped_before = flood.dropped();
    // A CLI opens a new connection each time.
    for (int i = 0; i < 3; ++i) {
      std::string out;
      EXPECT_EQ(RunCli({"status", "--address", cluster_->address(), "--token",
                        cluster_->token()},
                       &out),
                0)
          << out;
      EXPECT_THAT(out, HasSubstr("strangers-head"));
    }
    // A new program connects to the head and runs a task.
    cluster_->Connect();
    EXPECT_EQ(shoal::Get(shoal::Task(Add).Remote(2, 3)), 5);
    // A new node joins; the head node's agent, there from the start, keeps
    // heartbeating through it all (a node missing them for 2 s is dead).
    ASSERT_TRUE(cluster_->AddNode({"strangers-late", 1, ""}).ok());
    std::this_thread::sleep_for(std::chrono::seconds(3));
    std::vector<shoal::NodeInfo> nodes = shoal::Nodes();
    ASSERT_EQ(nodes.size(), 2u);
    for (const shoal::NodeInfo& node : nodes) {
      EXPECT_TRUE(node.alive) << node.node_id << " died under the strangers";
    }
    EXPECT_EQ(shoal::Get(shoal::Task(Add).Remote(40, 2)), 42);
    // The flood was at it all along: the head went on dropping its
    // connections, and the flood opening new ones.
    const int64_t dropped_during = flood.dropped() - dropped_before;
    EXPECT_GE(dropped_during, kStrangers);
    const int64_t held = flood.held();
    flood.Stop();
    // The head said what became of them, without a line per connection.
    auto log = shoal::ReadFile(cluster_->session_dir(0) + "/logs/head.log");
    ASSERT_TRUE(log.ok()) << log.status();
    int lines = 0;
    for (absl::string_view line : absl::StrSplit(*log, '\n')) {
      if (absl::StrContains(line, "presented the cluster token")) {
        ++lines;
      }
    }
    EXPECT_GE(lines, 1);
    EXPECT_LE(lines, 30) << "the head logged " << lines
                         << " lines about strangers";
    printf(
        "strangers: %lld held at the end, %lld opened in all, %lld "
        "dropped by the head while the cluster was used; %d log lines about "
        "them\n",
        static_cast<long long>(held), static_cast<long long>(flood.opened()),
        static_cast<long long>(dropped_during), lines);
    RecordProperty("strangers_opened", std::to_string(flood.opened()));
    RecordProperty("strangers_dropped", std::to_string(dropped_during));
  }
};

TEST_F(RpcStrangersTest, SilentStrangersKeepNobodyOut) {
  KeepsASeatForTheCluster(StrangerFlood::Kind::kSilent);
}

TEST_F(RpcStrangersTest, StrangersStalledInTheirHelloKeepNobodyOut) {
  KeepsASeatForTheCluster(StrangerFlood::Kind::kPartialHello);
}

}  // namespace
