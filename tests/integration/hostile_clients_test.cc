// Peers that never authenticate cannot take a node down: 1,000 idle
// connections and 100 that trickle a byte at a time, against the head and
// an agent at once, while a driver keeps running tasks. A server keeps at
// most 512 strangers from loopback (64 from any other address) and drops
// the oldest to seat a new one (src/rpc/strangers.h), so most of the idle
// ones are closed at once; the trickling ones are closed once their time to
// say hello is up. (The throughput under the strangers is printed; the
// security tier and bench/rpc_strangers_bench.py measure it.)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "shoal/api.h"
#include "shoal/init.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::testing::ClusterSpec;

int64_t Noop(int64_t x) { return x; }
SHOAL_REMOTE(Noop);

// A TCP connection to host:port (-1 on failure).
int Dial(const std::string& address) {
  size_t colon = address.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port =
      htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Tasks per second, over `n` tasks submitted then gathered.
double TaskRate(int n) {
  auto start = std::chrono::steady_clock::now();
  std::vector<shoal::ObjectRef<int64_t>> refs;
  for (int i = 0; i < n; ++i) refs.push_back(shoal::Task(Noop).Remote(i));
  shoal::Get(refs);
  return n /
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
             .count();
}

class HostileClientsTest : public shoal::testing::DriverClusterTest {};

TEST_F(HostileClientsTest, IdleAndTricklingPeersDoNotStopTheWork) {
  rlimit limit;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  limit.rlim_cur = limit.rlim_max;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &limit), 0);
  ASSERT_GE(limit.rlim_cur, 2600u)
      << "this test holds 2,200 connections: raise the hard limit of open "
         "files (ulimit -Hn)";
  ClusterSpec spec;
  spec.nodes = {{"hostile-head", 2, ""}};
  StartAndConnect(spec);
  TaskRate(2000);  // warm up the workers
  const double normal = TaskRate(10000);

  std::string agent = shoal::Nodes().at(0).address;
  std::vector<int> idle, trickle;
  for (const std::string& target : {cluster_->address(), agent}) {
    for (int i = 0; i < 1000; ++i) {
      int fd = Dial(target);
      ASSERT_GE(fd, 0) << "connection " << i << " to " << target;
      idle.push_back(fd);
    }
    for (int i = 0; i < 100; ++i) {
      int fd = Dial(target);
      ASSERT_GE(fd, 0);
      trickle.push_back(fd);
    }
  }
  // Tasks keep going while the trickling peers send a byte each 100 ms.
  std::atomic<bool> stop{false};
  std::thread dripper([&] {
    while (!stop) {
      for (int fd : trickle) {
        char byte = 1;
        (void)!send(fd, &byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  const double loaded = TaskRate(10000);
  RecordProperty("tasks_per_s_normal", std::to_string(normal));
  RecordProperty("tasks_per_s_hostile", std::to_string(loaded));
  printf("tasks/s: %.0f normally, %.0f with 2,200 unauthenticated peers\n",
         normal, loaded);
  // A new, proper client still gets in.
  EXPECT_FALSE(shoal::Nodes().empty());

  // Their time to say hello is 10 s: after it, both servers have closed
  // every one of them.
  std::this_thread::sleep_for(std::chrono::seconds(11));
  stop = true;
  dripper.join();
  int closed = 0;
  for (int fd : trickle) {
    pollfd p{fd, POLLIN, 0};
    char buf[64];
    if (poll(&p, 1, 2000) == 1 && recv(fd, buf, sizeof(buf), 0) <= 0) ++closed;
  }
  EXPECT_EQ(closed, static_cast<int>(trickle.size()));
  for (int fd : idle) close(fd);
  for (int fd : trickle) close(fd);
  EXPECT_GT(TaskRate(2000), 0);
}

}  // namespace
