// Objects through the C++ API on a real cluster: large values and buffers go
// into the node's shared-memory store and come back mapped, not copied; task
// arguments and results above the inline threshold travel through the
// stores of the nodes involved; the last reference frees them on every node;
// a small store spills; an object lost with its node is rebuilt by its task.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shoal/api.h"
#include "shoal/shoal.pb.h"
#include "tests/testing/agent_info.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/store_mapping.h"

namespace {

using ::shoal::testing::ClusterSpec;
using ::shoal::testing::ClusterTest;
using ::shoal::testing::InStoreMapping;
using ::shoal::testing::TestCluster;
using ::testing::HasSubstr;

constexpr size_t kBig = 4 << 20;  // well above the 100 KiB threshold

// Bytes that say where and how they were made.
std::vector<uint8_t> Pattern(size_t size, uint8_t seed) {
  std::vector<uint8_t> out(size);
  for (size_t i = 0; i < size; ++i) {
    out[i] = static_cast<uint8_t>(i * 131 + seed + (i >> 12));
  }
  return out;
}

// A large result made on the node that runs it; its first bytes name the
// node.
shoal::Buffer MakeOnNode(int64_t size, int64_t seed) {
  std::vector<uint8_t> bytes = Pattern(size, static_cast<uint8_t>(seed));
  std::string node = shoal::CurrentNodeId();
  memcpy(bytes.data(), node.data(), std::min(node.size(), bytes.size()));
  bytes[node.size()] = 0;
  return shoal::Buffer::Copy(bytes.data(), bytes.size());
}
// Sums a large argument, where it runs.
int64_t SumBytes(shoal::Buffer in) {
  return std::accumulate(in.data(), in.data() + in.size(), int64_t{0});
}
double SumDoubles(std::vector<double> values) {
  return std::accumulate(values.begin(), values.end(), 0.0);
}
std::vector<double> Doubles(int64_t n) {
  std::vector<double> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = 0.5 * static_cast<double>(i);
  return out;
}
// Whether the argument's bytes lie in this process's mapping of the node's
// store (no copy was made to pass it).
bool ArgumentIsMapped(shoal::Buffer in);
SHOAL_REMOTE(MakeOnNode, SumBytes, SumDoubles, Doubles, ArgumentIsMapped);

bool ArgumentIsMapped(shoal::Buffer in) {
  return InStoreMapping(in.data(), in.size());
}

std::string NodeOf(const shoal::Buffer& b) {
  return std::string(reinterpret_cast<const char*>(b.data()));
}

// Node i's store as its agent reports it.
shoal::proto::ObjectStoreInfo StoreInfo(const std::string& node_id) {
  for (const auto& n : shoal::Nodes()) {
    if (n.node_id != node_id) continue;
    auto info =
        shoal::testing::FetchAgentInfo(n.address, getenv("SHOAL_TOKEN"));
    EXPECT_TRUE(info.ok()) << info.status();
    if (!info.ok()) break;
    return info->object_store();
  }
  ADD_FAILURE() << "no node " << node_id;
  return {};
}

// Waits until node `node_id`'s store holds no object (frees are sent
// without waiting for them).
void ExpectStoreEmpties(const std::string& node_id) {
  shoal::proto::ObjectStoreInfo info;
  for (int i = 0; i < 200; ++i) {
    info = StoreInfo(node_id);
    if (info.num_objects() == 0 && info.used_bytes() == 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ADD_FAILURE() << "node " << node_id << " still holds " << info.num_objects()
                << " objects, " << info.used_bytes() << " bytes";
}

class ObjectApiTest : public ClusterTest {
 protected:
  // "obj-a" (the head's, the driver's node), "obj-b" and "obj-c"; tasks
  // asking for "remote" run on b or c, "only_b" on b.
  void StartNodes(int64_t store_bytes = 256 << 20,
                  int64_t driver_node_store_bytes = 256 << 20) {
    ClusterSpec spec;
    spec.nodes = {{"obj-a", 1, "", driver_node_store_bytes},
                  {"obj-b", 1, R"({"remote": 1, "only_b": 1})", store_bytes},
                  {"obj-c", 1, R"({"remote": 1})", store_bytes}};
    auto cluster = TestCluster::Start(spec);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    cluster_->ExportEnvironment();  // StoreInfo reads the token
    cluster_->Connect();
  }
  void TearDown() override {
    shoal::Shutdown();
    ClusterTest::TearDown();
  }
};

TEST_F(ObjectApiTest, LargePutIsStoredAndGetMapsItWithoutACopy) {
  StartNodes();
  std::vector<uint8_t> bytes = Pattern(kBig, 7);
  auto ref = shoal::PutBuffer(bytes.data(), bytes.size());
  EXPECT_EQ(StoreInfo("obj-a").num_objects(), 1u);
  shoal::Buffer got = shoal::Get(ref);
  ASSERT_EQ(got.size(), bytes.size());
  EXPECT_EQ(memcmp(got.data(), bytes.data(), bytes.size()), 0);
  EXPECT_TRUE(InStoreMapping(got.data(), got.size()));
  EXPECT_EQ(got.data(), shoal::Get(ref).data()) << "each Get maps, not copies";
  EXPECT_GT(StoreInfo("obj-a").pinned_bytes(), 0u);

  // Typed values above the threshold go there too.
  std::vector<double> values(1 << 18);
  std::iota(values.begin(), values.end(), 1.0);
  auto typed = shoal::Put(values);
  EXPECT_EQ(StoreInfo("obj-a").num_objects(), 2u);
  EXPECT_EQ(shoal::Get(typed), values);

  // Small ones stay in the driver.
  auto small = shoal::Put(std::string("hello"));
  EXPECT_EQ(StoreInfo("obj-a").num_objects(), 2u);
  EXPECT_EQ(shoal::Get(small), "hello");
  shoal::Buffer small_buffer = shoal::Get(shoal::PutBuffer("abc", 3));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(small_buffer.data()), 3),
            "abc");

  // A raw object read as another type says how to read it.
  {
    shoal::ObjectRef<std::vector<double>> wrong(ref.handle());
    EXPECT_THAT([&] { shoal::Get(wrong); },
                ::testing::ThrowsMessage<std::invalid_argument>(
                    HasSubstr("read it as shoal::Buffer")));
  }

  // The last reference frees it; a Buffer still held keeps it pinned.
  ref = {};
  typed = {};
  EXPECT_EQ(memcmp(got.data(), bytes.data(), 64), 0);
  got = {};
  ExpectStoreEmpties("obj-a");
}

// PutPieces (the Python frontend's put): pieces copied once to their
// offsets, the gaps zero, in the store when large and inline when small.
TEST_F(ObjectApiTest, PiecesMakeOneObjectWithZeroGaps) {
  StartNodes();
  std::vector<uint8_t> big = Pattern(kBig, 3);
  for (size_t size : {size_t{64}, kBig + 8192}) {
    SCOPED_TRACE(size);
    std::string head = "head";
    size_t at = size - std::min(size - 16, big.size());
    std::string_view tail(reinterpret_cast<const char*>(big.data()), size - at);
    auto ref = shoal::ObjectRef<shoal::Buffer>(
        shoal::internal::PutPieces({{at, tail}, {0, head}}, size));
    shoal::Buffer got = shoal::Get(ref);
    ASSERT_EQ(got.size(), size);
    EXPECT_EQ(memcmp(got.data(), "head", 4), 0);
    EXPECT_TRUE(std::all_of(got.data() + 4, got.data() + at,
                            [](uint8_t b) { return b == 0; }));
    EXPECT_EQ(memcmp(got.data() + at, tail.data(), tail.size()), 0);
    EXPECT_EQ(InStoreMapping(got.data(), got.size()), size > kBig);
  }
  EXPECT_THAT(
      [] {
        shoal::internal::PutPieces({{8, "too long"}}, 10);
      },
      ::testing::ThrowsMessage<shoal::Error>(
          HasSubstr("does not fit an object of 10 bytes")));
}

TEST_F(ObjectApiTest, TaskArgumentsAndResultsTravelThroughTheStores) {
  StartNodes();
  // A large result stays on the node that made it...
  auto made = shoal::Task(MakeOnNode)
                  .SetResource("only_b", 1)
                  .Remote(int64_t{kBig}, int64_t{3});
  shoal::Buffer got = shoal::Get(made);
  EXPECT_EQ(NodeOf(got), "obj-b");
  // ...and the driver's Get pulled it to its own node and mapped it.
  EXPECT_TRUE(InStoreMapping(got.data(), got.size()));
  std::vector<uint8_t> want = Pattern(kBig, 3);
  EXPECT_EQ(memcmp(got.data() + 64, want.data() + 64, kBig - 64), 0);
  EXPECT_EQ(StoreInfo("obj-b").num_objects(), 1u);
  EXPECT_EQ(StoreInfo("obj-a").num_objects(), 1u);

  // A ref to it passed to a task on another node is pulled there, mapped.
  auto mapped = shoal::Task(ArgumentIsMapped).SetResource("remote", 1);
  EXPECT_TRUE(shoal::Get(
      shoal::Task(ArgumentIsMapped).SetResource("only_b", 1).Remote(made)));
  int64_t sum =
      std::accumulate(got.data(), got.data() + got.size(), int64_t{0});
  EXPECT_EQ(
      shoal::Get(shoal::Task(SumBytes).SetResource("remote", 1).Remote(made)),
      sum);

  // A large value passed by value goes through the store by itself.
  std::vector<double> values(1 << 18, 0.25);
  EXPECT_DOUBLE_EQ(
      shoal::Get(
          shoal::Task(SumDoubles).SetResource("remote", 1).Remote(values)),
      0.25 * values.size());
  EXPECT_TRUE(
      shoal::Get(mapped.Remote(shoal::Buffer::Copy(want.data(), kBig))));

  // A large typed result chains into another task without visiting the
  // driver.
  auto doubles =
      shoal::Task(Doubles).SetResource("only_b", 1).Remote(int64_t{1 << 18});
  EXPECT_DOUBLE_EQ(
      shoal::Get(
          shoal::Task(SumDoubles).SetResource("remote", 1).Remote(doubles)),
      0.5 * (double{1 << 18} - 1) * (1 << 18) / 2);

  // Dropping every reference frees every copy on every node.
  made = {};
  doubles = {};
  got = {};
  for (const char* node : {"obj-a", "obj-b", "obj-c"}) ExpectStoreEmpties(node);
}

TEST_F(ObjectApiTest, ADriverWhoseHostHasNoStoreReadsObjectsOverTheNetwork) {
  StartNodes(256 << 20, /*driver_node_store_bytes=*/-1);
  auto made = shoal::Task(MakeOnNode)
                  .SetResource("only_b", 1)
                  .Remote(int64_t{kBig}, int64_t{9});
  shoal::Buffer got = shoal::Get(made);
  EXPECT_EQ(NodeOf(got), "obj-b");
  EXPECT_FALSE(InStoreMapping(got.data(), got.size()));
  std::vector<uint8_t> want = Pattern(kBig, 9);
  EXPECT_EQ(memcmp(got.data() + 64, want.data() + 64, kBig - 64), 0);
  // Its own large values stay in its memory and still reach tasks.
  std::vector<double> values(1 << 18, 0.5);
  EXPECT_DOUBLE_EQ(
      shoal::Get(
          shoal::Task(SumDoubles).SetResource("remote", 1).Remote(values)),
      0.5 * values.size());
  made = {};
  got = {};
  ExpectStoreEmpties("obj-b");
}

struct Shards {
  std::string name;
  std::vector<shoal::ObjectRef<shoal::Buffer>> parts;
  MSGPACK_DEFINE(name, parts);
};

int64_t CountParts(Shards shards) {
  return static_cast<int64_t>(shards.parts.size());
}
SHOAL_REMOTE(CountParts);

TEST_F(ObjectApiTest, RefsInsideAnObjectKeepTheirObjectsAlive) {
  StartNodes();
  std::vector<uint8_t> bytes = Pattern(kBig, 2);
  auto part = shoal::PutBuffer(bytes.data(), bytes.size());
  const std::string part_id = part.id();
  auto shards = shoal::Put(Shards{"train", {part, {}}});
  part = {};  // only the Shards object refers to it now
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(StoreInfo("obj-a").num_objects(), 1u);

  Shards got = shoal::Get(shards);
  EXPECT_EQ(got.name, "train");
  ASSERT_EQ(got.parts.size(), 2u);
  EXPECT_EQ(got.parts[0].id(), part_id);
  EXPECT_FALSE(got.parts[1].valid());
  shoal::Buffer data = shoal::Get(got.parts[0]);
  ASSERT_EQ(data.size(), bytes.size());
  EXPECT_EQ(memcmp(data.data(), bytes.data(), bytes.size()), 0);

  // Another process cannot resolve them, and says why.
  EXPECT_THAT([&] { shoal::Get(shoal::Task(CountParts).Remote(shards)); },
              ::testing::ThrowsMessage<shoal::RemoteError>(
                  HasSubstr("refs inside values can be read back only by "
                            "the process that owns the objects")));

  // With the last ref to the Shards gone, the part goes too.
  got = {};
  data = {};
  shards = {};
  ExpectStoreEmpties("obj-a");
}

// Run by ObjectsOfADriverThatDiesAreFreed as a driver of its own: puts an
// object, says so in the file SHOAL_TEST_MARKER, and waits to be killed.
TEST(ObjectApiHelper, DISABLED_PutThenWaitToBeKilled) {
  shoal::Init();
  std::vector<uint8_t> bytes = Pattern(kBig, 1);
  auto ref = shoal::PutBuffer(bytes.data(), bytes.size());
  std::ofstream(getenv("SHOAL_TEST_MARKER")) << ref.id();
  std::this_thread::sleep_for(std::chrono::seconds(60));
}

TEST_F(ObjectApiTest, ObjectsOfADriverThatDiesAreFreed) {
  StartNodes();
  std::string marker = cluster_->root() + "/put-done";
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setenv("SHOAL_TEST_MARKER", marker.c_str(), 1);
    execl("/proc/self/exe", "object_api_test",
          "--gtest_filter=ObjectApiHelper.DISABLED_PutThenWaitToBeKilled",
          "--gtest_also_run_disabled_tests", static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int i = 0; i < 600 && !std::ifstream(marker).good(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(StoreInfo("obj-a").num_objects(), 1u);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  ExpectStoreEmpties("obj-a");
}

TEST_F(ObjectApiTest, HundredThousandPutGetFreeCyclesLeaveNothingBehind) {
  StartNodes();
  std::vector<uint8_t> bytes = Pattern(128 << 10, 1);
  for (int i = 0; i < 100000; ++i) {
    bytes[0] = static_cast<uint8_t>(i);
    auto ref = shoal::PutBuffer(bytes.data(), bytes.size());
    shoal::Buffer got = shoal::Get(ref);
    ASSERT_EQ(got.data()[0], static_cast<uint8_t>(i));
  }
  ExpectStoreEmpties("obj-a");
}

TEST_F(ObjectApiTest, ASmallStoreSpillsAndRestores) {
  StartNodes(/*store_bytes=*/64 << 20, /*driver_node_store_bytes=*/64 << 20);
  // 8 x 16 MiB held at once: twice the store.
  std::vector<shoal::ObjectRef<shoal::Buffer>> refs;
  for (int i = 0; i < 8; ++i) {
    std::vector<uint8_t> bytes = Pattern(16 << 20, static_cast<uint8_t>(i));
    refs.push_back(shoal::PutBuffer(bytes.data(), bytes.size()));
  }
  EXPECT_GT(StoreInfo("obj-a").num_spilled(), 0u);
  for (int i = 0; i < 8; ++i) {
    shoal::Buffer got = shoal::Get(refs[i]);
    std::vector<uint8_t> want = Pattern(16 << 20, static_cast<uint8_t>(i));
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(memcmp(got.data(), want.data(), want.size()), 0) << i;
  }
  // Too big for the store at all: the error gives its size.
  std::vector<uint8_t> huge(80 << 20, 1);
  EXPECT_THAT([&] { shoal::PutBuffer(huge.data(), huge.size()); },
              ::testing::ThrowsMessage<shoal::Error>(HasSubstr("store")));
  // Everything pinned: the error says what holds the store.
  std::vector<shoal::Buffer> held;
  for (int i = 0; i < 3; ++i) held.push_back(shoal::Get(refs[i]));
  std::vector<uint8_t> more(24 << 20, 2);
  EXPECT_THAT([&] { shoal::PutBuffer(more.data(), more.size()); },
              ::testing::ThrowsMessage<shoal::Error>(HasSubstr("pinned")));
  held.clear();
  refs.clear();
  ExpectStoreEmpties("obj-a");
}

TEST_F(ObjectApiTest, AnObjectLostWithItsNodeIsRebuiltByItsTask) {
  StartNodes();
  auto made = shoal::Task(MakeOnNode)
                  .SetResource("remote", 1)
                  .SetMaxRetries(2)
                  .Remote(int64_t{kBig}, int64_t{5});
  ASSERT_TRUE(shoal::Wait(std::vector{made}, 1, 60000).not_ready.empty());
  // Where the only copy is: the task's node (not the driver's, which has
  // not read it).
  std::string first;
  for (const char* node : {"obj-b", "obj-c"}) {
    if (StoreInfo(node).num_objects() == 1) first = node;
  }
  ASSERT_FALSE(first.empty());
  cluster_->KillAgent(first == "obj-b" ? 1 : 2);
  shoal::Buffer got = shoal::Get(made, 60000);
  EXPECT_NE(NodeOf(got), first);
  std::vector<uint8_t> want = Pattern(kBig, 5);
  EXPECT_EQ(memcmp(got.data() + 64, want.data() + 64, kBig - 64), 0);
}

TEST_F(ObjectApiTest, ALostObjectThatCannotBeRebuiltIsNamed) {
  StartNodes();
  auto made = shoal::Task(MakeOnNode)
                  .SetResource("only_b", 1)
                  .SetMaxRetries(0)
                  .Remote(int64_t{kBig}, int64_t{5});
  ASSERT_TRUE(shoal::Wait(std::vector{made}, 1, 60000).not_ready.empty());
  cluster_->KillAgent(1);
  try {
    shoal::Get(made, 60000);
    ADD_FAILURE() << "Get of a lost object returned";
  } catch (const shoal::ObjectLostError& e) {
    EXPECT_THAT(e.what(), HasSubstr(made.id()));
    EXPECT_THAT(e.what(), HasSubstr("obj-b"));
    EXPECT_THAT(e.what(), HasSubstr("SetMaxRetries"));
  }
}

}  // namespace
