// Objects moved between node agents: a node pulls another node's object
// into its own store (OBJECT_PULL) over the nodes' transfer ports; a source
// that dies is replaced by another copy; a lost object is named with every
// node tried and why; the port refuses a wrong token; a full store says so.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/net.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "object_plane/transfer_client.h"
#include "object_plane/transfer_server.h"
#include "object_store/shm_arena.h"
#include "rpc/event_loop.h"
#include "shoal/shoal.pb.h"
#include "tests/testing/agent_client.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::object_plane::PullObject;
using ::shoal::object_plane::PullOptions;
using ::shoal::object_plane::TransferServer;
using ::shoal::object_plane::TransferSource;
using ::shoal::testing::AgentClient;
using ::shoal::testing::ClusterSpec;
using ::shoal::testing::RunCli;
using ::shoal::testing::TestCluster;
using ::testing::HasSubstr;

constexpr int64_t kMiB = 1 << 20;
constexpr int64_t kGiB = int64_t{1} << 30;
// Pulls of 1 GiB under the sanitizers on two slow cores take a while.
constexpr int64_t kCallTimeoutMs = 300000;

// Bytes that differ with the seed and the position.
void Fill(uint8_t* p, uint64_t n, uint64_t seed) {
  auto* words = reinterpret_cast<uint64_t*>(p);
  for (uint64_t i = 0; i < n / 8; ++i) {
    words[i] = ((i + 1) * 0x9E3779B97F4A7C15ull) ^ seed;
  }
  for (uint64_t i = n / 8 * 8; i < n; ++i) p[i] = static_cast<uint8_t>(i);
}

class ObjectTransferTest : public ::testing::Test {
 protected:
  struct Node {
    std::string id;
    std::string agent;     // RPC address
    std::string transfer;  // object transfer address
    std::unique_ptr<shoal::object_store::ShmArena> arena;
  };

  // Node i is "n<i>" (n0 is the head node) with stores[i] bytes of store.
  void StartCluster(const std::vector<int64_t>& stores) {
    ClusterSpec spec;
    for (size_t i = 0; i < stores.size(); ++i) {
      spec.nodes.push_back({absl::StrCat("n", i), 1, "", stores[i]});
    }
    auto cluster = TestCluster::Start(spec);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    auto loop = shoal::rpc::EventLoop::Create("test-clients");
    ASSERT_TRUE(loop.ok());
    loop_ = std::move(*loop);
    for (size_t i = 0; i < stores.size(); ++i) {
      Node node;
      node.id = absl::StrCat("n", i);
      auto agent = shoal::ReadFile(cluster_->session_dir(i) + "/agent_address");
      ASSERT_TRUE(agent.ok()) << agent.status();
      node.agent = *agent;
      while (!node.agent.empty() && node.agent.back() == '\n') {
        node.agent.pop_back();
      }
      nodes_.push_back(std::move(node));
      auto info = Client(i)->Info();
      ASSERT_TRUE(info.ok()) << info.status();
      nodes_[i].transfer = info->node().object_transfer_address();
      ASSERT_THAT(nodes_[i].transfer, HasSubstr("127.0.0.1:"));
      auto arena =
          shoal::object_store::ShmArena::Open(info->object_store().path());
      ASSERT_TRUE(arena.ok()) << arena.status();
      nodes_[i].arena = std::move(*arena);
    }
  }

  void TearDown() override {
    clients_.clear();
    loop_.reset();
    if (cluster_) {
      cluster_->Stop();
      EXPECT_EQ(cluster_->sanitizer_reports(), "");
    }
  }

  std::unique_ptr<AgentClient> Client(size_t node) {
    return std::make_unique<AgentClient>(loop_.get(), nodes_[node].agent,
                                         cluster_->token(), kCallTimeoutMs);
  }

  // Writes an object of `size` bytes (data, then 64 bytes of metadata) from
  // `seed` on `node` and seals it; its client is kept (as the owner).
  shoal::proto::StoredObject Make(size_t node, const std::string& id,
                                  uint64_t size, uint64_t seed) {
    auto client = Client(node);
    auto place = client->Create(id, size, 64);
    EXPECT_TRUE(place.ok()) << place.status();
    if (place.ok()) {
      Fill(Bytes(node, place->offset()), size + 64, seed);
      EXPECT_TRUE(client->Seal(id).ok());
    }
    clients_.push_back(std::move(client));
    shoal::proto::StoredObject object;
    object.set_object_id(id);
    object.set_data_size(size);
    object.set_metadata_size(64);
    object.set_owner("test");
    return object;
  }

  void AddSource(shoal::proto::StoredObject* object, size_t node) {
    shoal::proto::ObjectSource* s = object->add_sources();
    s->set_node_id(nodes_[node].id);
    s->set_address(nodes_[node].transfer);
  }

  uint8_t* Bytes(size_t node, uint64_t offset) {
    return nodes_[node].arena->data() + offset;
  }

  // Whether `place` on `node` holds what Fill(seed) wrote.
  ::testing::AssertionResult Holds(size_t node,
                                   const shoal::proto::ObjectPlace& place,
                                   uint64_t seed) {
    uint64_t size = place.data_size() + place.metadata_size();
    std::vector<uint8_t> expected(size);
    Fill(expected.data(), size, seed);
    if (memcmp(Bytes(node, place.offset()), expected.data(), size) != 0) {
      return ::testing::AssertionFailure()
             << "the copy on node " << node << " differs";
    }
    return ::testing::AssertionSuccess();
  }

  shoal::proto::ObjectStoreInfo StoreInfo(size_t node) {
    auto info = Client(node)->Info();
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? info->object_store() : shoal::proto::ObjectStoreInfo();
  }

  // Waits until bytes at `offset` in `node`'s arena are written: a pull
  // into an empty store has received that far.
  void WaitForBytesAt(size_t node, uint64_t offset) {
    const volatile uint8_t* p = Bytes(node, offset);
    for (int i = 0; i < 600000; ++i) {
      for (int j = 0; j < 8; ++j) {
        if (p[j] != 0) return;
      }
      usleep(100);
    }
    ADD_FAILURE() << "the pull never started";
  }

  std::unique_ptr<TestCluster> cluster_;
  std::unique_ptr<shoal::rpc::EventLoop> loop_;
  std::vector<Node> nodes_;
  std::vector<std::unique_ptr<AgentClient>> clients_;
};

TEST_F(ObjectTransferTest, PullsSmallAndLargeObjectsFromAnotherNode) {
  StartCluster({64 * kMiB, 1100 * kMiB, 1100 * kMiB});
  auto small = Make(1, "small", kMiB + 3, 1);
  AddSource(&small, 1);
  auto b = Client(2);
  auto pulled = b->Pull(small);
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  EXPECT_EQ(pulled->data_size(), static_cast<uint64_t>(kMiB + 3));
  EXPECT_EQ(pulled->metadata_size(), 64u);
  EXPECT_TRUE(Holds(2, *pulled, 1));
  ASSERT_TRUE(b->Release("small").ok());
  ASSERT_TRUE(b->Delete("small").ok());

  auto large = Make(1, "large", kGiB - 64, 2);
  AddSource(&large, 1);
  pulled = b->Pull(large);
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  EXPECT_TRUE(Holds(2, *pulled, 2));

  // The node has its copy now: another pull is answered from it.
  auto again = Client(2)->Pull(large);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->offset(), pulled->offset());
  EXPECT_EQ(StoreInfo(2).num_objects(), 1u);
  EXPECT_GE(StoreInfo(2).used_bytes(), static_cast<uint64_t>(kGiB));

  // Both copies count in the cluster's object store use.
  std::string out;
  bool shown = false;
  for (int i = 0; i < 100 && !shown; ++i) {
    RunCli({"status", "--address", cluster_->address(), "--token",
            cluster_->token()},
           &out);
    shown =
        out.find("2.00GiB/2.21GiB object_store_memory") != std::string::npos;
    if (!shown) usleep(100000);
  }
  EXPECT_TRUE(shown) << out;
}

TEST_F(ObjectTransferTest, ConcurrentPullsOfOneObjectShareOneTransfer) {
  StartCluster({64 * kMiB, 512 * kMiB, 512 * kMiB});
  auto object = Make(1, "shared", 256 * kMiB, 3);
  AddSource(&object, 1);
  std::vector<std::unique_ptr<AgentClient>> clients;
  std::vector<std::future<absl::StatusOr<shoal::proto::ObjectPlace>>> pulls;
  for (int i = 0; i < 4; ++i) {
    clients.push_back(Client(2));
    pulls.push_back(clients.back()->PullAsync(object));
  }
  std::vector<uint64_t> offsets;
  for (auto& pull : pulls) {
    auto place = pull.get();
    ASSERT_TRUE(place.ok()) << place.status();
    offsets.push_back(place->offset());
  }
  for (uint64_t offset : offsets) EXPECT_EQ(offset, offsets[0]);
  shoal::proto::ObjectStoreInfo info = StoreInfo(2);
  EXPECT_EQ(info.num_objects(), 1u);
  EXPECT_LT(info.used_bytes(), static_cast<uint64_t>(257 * kMiB));
  shoal::proto::ObjectPlace place;
  place.set_offset(offsets[0]);
  place.set_data_size(256 * kMiB);
  place.set_metadata_size(64);
  EXPECT_TRUE(Holds(2, place, 3));
}

TEST_F(ObjectTransferTest, ASourceThatDiesIsReplacedByAnotherCopy) {
  // n1 and n0 hold the object; n2 pulls from n1 first, which is killed
  // while it sends.
  StartCluster({600 * kMiB, 600 * kMiB, 600 * kMiB});
  auto object = Make(1, "twice", 512 * kMiB, 4);
  Make(0, "twice", 512 * kMiB, 4);
  AddSource(&object, 1);
  AddSource(&object, 0);
  auto b = Client(2);
  auto pull = b->PullAsync(object);
  // Well past the first chunks (4 MiB each, four at a time).
  WaitForBytesAt(2, 64 * kMiB);
  cluster_->KillAgent(1);
  auto place = pull.get();
  ASSERT_TRUE(place.ok()) << place.status();
  EXPECT_TRUE(Holds(2, *place, 4));
}

TEST_F(ObjectTransferTest, AnObjectWhoseOnlySourceDiedIsLost) {
  StartCluster({64 * kMiB, 300 * kMiB, 300 * kMiB});
  auto object = Make(1, "only-once", 256 * kMiB, 5);
  AddSource(&object, 1);
  cluster_->KillAgent(1);
  auto place = Client(2)->Pull(object);
  ASSERT_FALSE(place.ok());
  EXPECT_EQ(place.status().code(), absl::StatusCode::kDataLoss)
      << place.status();
  EXPECT_THAT(std::string(place.status().message()),
              HasSubstr("object only-once is lost: node n1 (" +
                        nodes_[1].transfer + ")"));
  // The failed copy is gone and the node still serves.
  EXPECT_EQ(StoreInfo(2).num_objects(), 0u);
  EXPECT_EQ(StoreInfo(2).used_bytes(), 0u);
}

TEST_F(ObjectTransferTest, ASourceThatNeverHadTheObjectIsNamed) {
  StartCluster({64 * kMiB, 64 * kMiB, 64 * kMiB});
  auto object = Make(1, "elsewhere", kMiB, 6);
  object.clear_sources();
  AddSource(&object, 0);  // never had it
  AddSource(&object, 2);  // the pulling node itself: skipped
  auto place = Client(2)->Pull(object);
  ASSERT_FALSE(place.ok());
  EXPECT_EQ(place.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(
      std::string(place.status().message()),
      HasSubstr("node n0 (" + nodes_[0].transfer + ") does not hold it"));
  // With the right source named, the same node gets it.
  AddSource(&object, 1);
  auto pulled = Client(2)->Pull(object);
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  EXPECT_TRUE(Holds(2, *pulled, 6));
}

// Sends a transfer hello with `token`; returns the reply's status word, or
// -1 when the connection closed without one.
int Hello(const std::string& address, const std::string& token,
          bool* closed_after) {
  std::string host;
  int port = 0;
  EXPECT_TRUE(shoal::SplitHostPort(address, &host, &port).ok());
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  std::string hello = "SHXF";
  uint32_t size = static_cast<uint32_t>(token.size());
  for (int i = 0; i < 4; ++i)
    hello.push_back(static_cast<char>(size >> (8 * i)));
  hello += token;
  EXPECT_EQ(send(fd, hello.data(), hello.size(), 0),
            static_cast<ssize_t>(hello.size()));
  uint8_t reply[20];
  int status = -1;
  if (recv(fd, reply, sizeof(reply), MSG_WAITALL) == sizeof(reply)) {
    status = reply[0];
    uint64_t message = 0;
    for (int i = 0; i < 8; ++i) message |= uint64_t{reply[12 + i]} << (8 * i);
    std::string skip(message, '\0');
    if (message > 0) recv(fd, skip.data(), skip.size(), MSG_WAITALL);
  }
  timeval tv{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char byte;
  *closed_after = recv(fd, &byte, 1, 0) == 0;
  close(fd);
  return status;
}

TEST_F(ObjectTransferTest, TheTransferPortRefusesAWrongToken) {
  StartCluster({64 * kMiB, 64 * kMiB});
  bool closed = false;
  EXPECT_EQ(Hello(nodes_[1].transfer, "not-the-token", &closed), 4);
  EXPECT_TRUE(closed);
  EXPECT_EQ(Hello(nodes_[1].transfer, cluster_->token(), &closed), 0);
  EXPECT_FALSE(closed);  // waits for requests

  auto object = Make(1, "guarded", kMiB, 7);
  std::vector<uint8_t> into(kMiB + 64);
  absl::Status status =
      PullObject("guarded", into.data(), into.size(),
                 {{"n1", nodes_[1].transfer}}, "not-the-token");
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("refused this cluster's token"));
  // The puller a driver uses, into its own memory.
  ASSERT_TRUE(PullObject("guarded", into.data(), into.size(),
                         {{"n1", nodes_[1].transfer}}, cluster_->token())
                  .ok());
  std::vector<uint8_t> expected(into.size());
  Fill(expected.data(), expected.size(), 7);
  EXPECT_EQ(into, expected);
}

TEST_F(ObjectTransferTest, APullIntoAFullStoreFailsAndTheNodeKeepsServing) {
  StartCluster({64 * kMiB, 256 * kMiB, 64 * kMiB});
  auto huge = Make(1, "huge", 128 * kMiB, 8);
  AddSource(&huge, 1);
  auto b = Client(2);
  auto place = b->Pull(huge);
  ASSERT_FALSE(place.ok());
  EXPECT_EQ(place.status().code(), absl::StatusCode::kInvalidArgument)
      << place.status();
  EXPECT_THAT(std::string(place.status().message()), HasSubstr("larger than"));

  // Two 40 MiB objects do not fit beside each other while the first is
  // pinned.
  auto first = Make(1, "first", 40 * kMiB, 9);
  auto second = Make(1, "second", 40 * kMiB, 10);
  AddSource(&first, 1);
  AddSource(&second, 1);
  ASSERT_TRUE(b->Pull(first).ok());
  place = b->Pull(second);
  ASSERT_FALSE(place.ok());
  EXPECT_EQ(place.status().code(), absl::StatusCode::kResourceExhausted)
      << place.status();
  EXPECT_THAT(std::string(place.status().message()),
              HasSubstr("--object-store-memory"));

  // Once the first is released (a secondary copy: evictable), it fits.
  ASSERT_TRUE(b->Release("first").ok());
  place = b->Pull(second);
  ASSERT_TRUE(place.ok()) << place.status();
  EXPECT_TRUE(Holds(2, *place, 10));
}

TEST_F(ObjectTransferTest, DeletingAnObjectWhileItIsPulledIsClean) {
  StartCluster({64 * kMiB, 600 * kMiB, 600 * kMiB});
  auto object = Make(1, "doomed", 512 * kMiB, 11);
  AddSource(&object, 1);
  auto b = Client(2);
  auto pull = b->PullAsync(object);
  WaitForBytesAt(2, 0);
  ASSERT_TRUE(Client(2)->Delete("doomed").ok());
  auto place = pull.get();
  if (!place.ok()) {
    EXPECT_EQ(place.status().code(), absl::StatusCode::kNotFound)
        << place.status();
    EXPECT_THAT(std::string(place.status().message()),
                HasSubstr("deleted by its owner"));
  }
  // The node goes on: the next pull works.
  auto later = Make(1, "later", kMiB, 12);
  AddSource(&later, 1);
  auto pulled = b->Pull(later);
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  EXPECT_TRUE(Holds(2, *pulled, 12));
}

// In-process servers over a buffer: what a source that fails part-way
// leaves to the next one.
class BufferPins : public TransferServer::ObjectPins {
 public:
  BufferPins(std::string id, const std::vector<uint8_t>* bytes, int serve)
      : id_(std::move(id)), bytes_(bytes), serve_(serve) {}
  absl::StatusOr<TransferServer::PinnedObject> Pin(const std::string& id,
                                                   int64_t) override {
    if (id != id_ || served_.fetch_add(1) >= serve_) {
      return absl::NotFoundError("not here");
    }
    ++pinned_;
    return TransferServer::PinnedObject{bytes_->data(), bytes_->size()};
  }
  void Unpin(const std::string&, int64_t) override { --pinned_; }
  void UnpinAll(int64_t) override {}
  int served() const { return std::min(served_.load(), serve_); }
  int pinned() const { return pinned_; }

 private:
  const std::string id_;
  const std::vector<uint8_t>* bytes_;
  const int serve_;
  std::atomic<int> served_{0};
  std::atomic<int> pinned_{0};
};

TEST(ObjectPullTest, OnlyTheChunksStillMissingComeFromTheNextSource) {
  std::vector<uint8_t> bytes(64 * kMiB + 5);
  Fill(bytes.data(), bytes.size(), 13);
  BufferPins failing("obj", &bytes, /*serve=*/10);
  BufferPins full("obj", &bytes, /*serve=*/1 << 20);
  auto a = TransferServer::Create("127.0.0.1", "token", &failing);
  auto b = TransferServer::Create("127.0.0.1", "token", &full);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<uint8_t> into(bytes.size());
  PullOptions options;
  options.chunk_bytes = kMiB;
  options.connections = 4;
  absl::Status status = PullObject(
      "obj", into.data(), into.size(),
      {{"a", (*a)->address()}, {"b", (*b)->address()}}, "token", options);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(into, bytes);
  EXPECT_EQ(failing.served(), 10);
  EXPECT_EQ(full.served(), 65 - 10);
  EXPECT_EQ(failing.pinned(), 0);
  EXPECT_EQ(full.pinned(), 0);

  // Neither holds another object: the error says so for each.
  status = PullObject("other", into.data(), 100,
                      {{"a", (*a)->address()}, {"b", (*b)->address()}}, "token",
                      options);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(status.message(),
            absl::StrCat("object other is lost: node a (", (*a)->address(),
                         ") does not hold it; node b (", (*b)->address(),
                         ") does not hold it"));
}

TEST(ObjectPullTest, ACancelledPullStops) {
  std::vector<uint8_t> bytes(4 * kMiB);
  BufferPins pins("obj", &bytes, 1 << 20);
  auto server = TransferServer::Create("127.0.0.1", "token", &pins);
  ASSERT_TRUE(server.ok());
  std::atomic<bool> cancel{true};
  PullOptions options;
  options.cancel = &cancel;
  std::vector<uint8_t> into(bytes.size());
  absl::Status status =
      PullObject("obj", into.data(), into.size(), {{"s", (*server)->address()}},
                 "token", options);
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
}

}  // namespace
