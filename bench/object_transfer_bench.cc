// Object transfer between nodes, printed as `name value unit` lines:
//
//   transfer_GBps            OBJECT_PULL of a 1 GiB object from node a to
//                            node b (a head and two node agents on this
//                            host, loopback): best of 3, fresh ids
//   transfer_median_GBps     the median of those 3
//   tcp_loopback_GBps        the ceiling: one thread sends 1 GiB over a
//                            127.0.0.1 socket to another (1 MiB writes,
//                            default options), best of 3
//   memcpy_GBps              single-thread memcpy of 1 GiB, best of 3
//   transfer_vs_tcp          transfer_GBps / tcp_loopback_GBps
//
// Then, with --sweep, the puller alone (PullObject into this process's
// memory from node a) for a few chunk sizes and connection counts. --tls
// runs it all with mutual TLS (certificates made for the run; the TCP and
// memcpy ceilings stay plain). GB = 1e9 bytes.
//
//   ./build/bin/object_transfer_bench [--sweep] [--tls]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "object_plane/transfer_client.h"
#include "object_store/shm_arena.h"
#include "rpc/event_loop.h"
#include "rpc/tls_testing.h"
#include "shoal/shoal.pb.h"
#include "tests/testing/agent_client.h"
#include "tests/testing/test_cluster.h"

namespace {

constexpr uint64_t kSize = uint64_t{1} << 30;

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since)
      .count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

uint8_t* MapPopulated(uint64_t size) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

double MemcpyGBps() {
  uint8_t* a = MapPopulated(kSize);
  uint8_t* b = MapPopulated(kSize);
  if (a == nullptr || b == nullptr) return 0;
  memset(a, 1, kSize);
  memset(b, 2, kSize);
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    memcpy(b, a, kSize);
    best = std::max(best, kSize / Seconds(t0) / 1e9);
  }
  munmap(a, kSize);
  munmap(b, kSize);
  return best;
}

// One thread sends 1 GiB to another over 127.0.0.1.
double TcpLoopbackGBps() {
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (bind(ls, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        listen(ls, 1) != 0 ||
        getsockname(ls, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      close(ls);
      return 0;
    }
    std::thread sender([addr] {
      std::vector<char> buf(1 << 20, 'x');
      int s = socket(AF_INET, SOCK_STREAM, 0);
      if (connect(s, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) ==
          0) {
        for (uint64_t sent = 0; sent < kSize;) {
          ssize_t w = write(s, buf.data(), buf.size());
          if (w <= 0) break;
          sent += static_cast<uint64_t>(w);
        }
      }
      close(s);
    });
    int c = accept(ls, nullptr, nullptr);
    std::vector<char> buf(1 << 20);
    auto t0 = std::chrono::steady_clock::now();
    uint64_t got = 0;
    for (ssize_t r; (r = read(c, buf.data(), buf.size())) > 0;) {
      got += static_cast<uint64_t>(r);
    }
    double s = Seconds(t0);
    sender.join();
    close(c);
    close(ls);
    if (got == kSize) best = std::max(best, kSize / s / 1e9);
  }
  return best;
}

std::string AgentAddress(const shoal::testing::TestCluster& cluster,
                         size_t node) {
  auto address = shoal::ReadFile(cluster.session_dir(node) + "/agent_address");
  std::string a = address.ok() ? *address : "";
  while (!a.empty() && a.back() == '\n') a.pop_back();
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  bool sweep = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--sweep") sweep = true;
    if (std::string(argv[i]) == "--tls") {
      auto dir = shoal::rpc::ExportTestTls();
      if (!dir.ok()) return 1;
      printf("# mutual TLS on every connection (certificates in %s)\n",
             dir->c_str());
    }
  }
  const double memcpy_gbps = MemcpyGBps();
  const double tcp_gbps = TcpLoopbackGBps();

  shoal::testing::ClusterSpec spec;
  const auto store = static_cast<int64_t>(kSize + (64 << 20));
  spec.nodes = {{"bench-a", 1, "", store}, {"bench-b", 1, "", store}};
  auto cluster = shoal::testing::TestCluster::Start(spec);
  if (!cluster.ok()) {
    fprintf(stderr, "cannot start the cluster: %s\n",
            std::string(cluster.status().message()).c_str());
    return 1;
  }
  auto loop = shoal::rpc::EventLoop::Create("bench");
  if (!loop.ok()) return 1;
  const std::string token = (*cluster)->token();
  shoal::testing::AgentClient a((*loop).get(), AgentAddress(**cluster, 0),
                                token, 600000);
  shoal::testing::AgentClient b((*loop).get(), AgentAddress(**cluster, 1),
                                token, 600000);
  auto info = a.Info();
  if (!info.ok()) return 1;
  auto arena = shoal::object_store::ShmArena::Open(info->object_store().path());
  if (!arena.ok()) return 1;
  const std::string source = info->node().object_transfer_address();

  std::vector<double> rates;
  for (int round = 0; round < 3; ++round) {
    std::string id = absl::StrCat("bench-object-", round);
    auto place = a.Create(id, kSize);
    if (!place.ok()) {
      fprintf(stderr, "create: %s\n", place.status().ToString().c_str());
      return 1;
    }
    memset((*arena)->data() + place->offset(), round + 1, kSize);
    if (!a.Seal(id).ok()) return 1;
    shoal::proto::StoredObject object;
    object.set_object_id(id);
    object.set_data_size(kSize);
    shoal::proto::ObjectSource* s = object.add_sources();
    s->set_node_id("bench-a");
    s->set_address(source);
    auto t0 = std::chrono::steady_clock::now();
    auto pulled = b.Pull(object);
    double seconds = Seconds(t0);
    if (!pulled.ok()) {
      fprintf(stderr, "pull: %s\n", pulled.status().ToString().c_str());
      return 1;
    }
    rates.push_back(kSize / seconds / 1e9);
    printf("# round %d: %.2f GB/s%s\n", round, rates.back(),
           round == 0 ? " (destination pages touched for the first time)" : "");
    b.Release(id).IgnoreError();
    b.Delete(id).IgnoreError();
    a.Delete(id).IgnoreError();
  }

  if (sweep) {
    // The puller alone, into this process's (already faulted) memory.
    auto place = a.Create("sweep", kSize);
    if (!place.ok() || !a.Seal("sweep").ok()) return 1;
    uint8_t* into = MapPopulated(kSize);
    if (into == nullptr) return 1;
    for (uint64_t chunk_mib : {4, 16, 64}) {
      for (int connections : {1, 2, 4}) {
        shoal::object_plane::PullOptions options;
        options.chunk_bytes = chunk_mib << 20;
        options.connections = connections;
        double best = 0;
        for (int i = 0; i < 2; ++i) {
          auto t0 = std::chrono::steady_clock::now();
          absl::Status st = shoal::object_plane::PullObject(
              "sweep", into, kSize, {{"bench-a", source}}, token, options);
          if (!st.ok()) {
            fprintf(stderr, "%s\n", st.ToString().c_str());
            return 1;
          }
          best = std::max(best, kSize / Seconds(t0) / 1e9);
        }
        printf("# PullObject chunk %3lu MiB x %d connections: %.2f GB/s\n",
               static_cast<unsigned long>(chunk_mib), connections, best);
      }
    }
    munmap(into, kSize);
  }

  double best = *std::max_element(rates.begin(), rates.end());
  printf("transfer_GBps %.2f GB/s\n", best);
  printf("transfer_median_GBps %.2f GB/s\n", Median(rates));
  printf("tcp_loopback_GBps %.2f GB/s\n", tcp_gbps);
  printf("memcpy_GBps %.2f GB/s\n", memcpy_gbps);
  printf("transfer_vs_tcp %.2f x\n", tcp_gbps > 0 ? best / tcp_gbps : 0);
  fflush(stdout);
  (*cluster)->Stop();
  return 0;
}
