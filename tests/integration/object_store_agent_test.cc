// The node agent's object store, driven as processes on the node drive it:
// clients on their own connections create, write (through the mapped
// arena), seal and read objects; a full store says what holds it; a client
// that goes away gives back what it pinned; `shoal status` shows the use.
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <future>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "object_store/shm_arena.h"
#include "rpc/event_loop.h"
#include "rpc/rpc.h"
#include "shoal/shoal.pb.h"
#include "tests/testing/agent_client.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::testing::ClusterSpec;
using Client = ::shoal::testing::AgentClient;
using ::shoal::testing::RunCli;
using ::shoal::testing::TestCluster;
using ::testing::HasSubstr;

constexpr int64_t kStoreBytes = 8 << 20;

class ObjectStoreAgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ClusterSpec spec;
    spec.nodes = {{"store-node", 2, "", kStoreBytes}};
    auto cluster = TestCluster::Start(spec);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    auto agent = shoal::ReadFile(cluster_->session_dir(0) + "/agent_address");
    ASSERT_TRUE(agent.ok()) << agent.status();
    agent_ = *agent;
    while (!agent_.empty() && (agent_.back() == '\n')) agent_.pop_back();
    auto loop = shoal::rpc::EventLoop::Create("test-clients");
    ASSERT_TRUE(loop.ok());
    loop_ = std::move(*loop);
  }
  void TearDown() override {
    loop_.reset();
    if (cluster_) {
      cluster_->Stop();
      EXPECT_EQ(cluster_->sanitizer_reports(), "");
    }
  }

  std::unique_ptr<Client> NewClient() {
    return std::make_unique<Client>(loop_.get(), agent_, cluster_->token());
  }

  shoal::proto::ObjectStoreInfo Info() {
    auto client = NewClient();
    auto info = client->Call<shoal::proto::AgentInfo>(
        shoal::proto::GET_AGENT_INFO, shoal::proto::Empty());
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? info->object_store() : shoal::proto::ObjectStoreInfo();
  }

  std::unique_ptr<TestCluster> cluster_;
  std::string agent_;
  std::unique_ptr<shoal::rpc::EventLoop> loop_;
};

TEST_F(ObjectStoreAgentTest,
       ObjectsWrittenByOneProcessAreReadInPlaceByAnother) {
  shoal::proto::ObjectStoreInfo info = Info();
  EXPECT_EQ(info.capacity(), static_cast<uint64_t>(kStoreBytes));
  auto arena = shoal::object_store::ShmArena::Open(info.path());
  ASSERT_TRUE(arena.ok()) << arena.status();

  auto producer = NewClient();
  auto place = producer->Create("obj-1", 1 << 20);
  ASSERT_TRUE(place.ok()) << place.status();
  uint8_t* bytes = (*arena)->data() + place->offset();
  for (int i = 0; i < (1 << 20); ++i) bytes[i] = static_cast<uint8_t>(i * 7);
  // Not readable until sealed.
  auto reader = NewClient();
  EXPECT_FALSE(reader->Get("obj-1").ok());
  ASSERT_TRUE(producer->Seal("obj-1").ok());

  auto seen = reader->Get("obj-1");
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(seen->offset(), place->offset());  // the same memory, no copy
  EXPECT_EQ(seen->data_size(), 1u << 20);
  const uint8_t* read = (*arena)->data() + seen->offset();
  for (int i = 0; i < (1 << 20); i += 4099) {
    ASSERT_EQ(read[i], static_cast<uint8_t>(i * 7)) << i;
  }
  EXPECT_GE(Info().used_bytes(), 1u << 20);
  EXPECT_GE(Info().pinned_bytes(), 1u << 20);

  ASSERT_TRUE(reader->Release("obj-1").ok());
  ASSERT_TRUE(producer->Delete("obj-1").ok());
  EXPECT_EQ(Info().used_bytes(), 0u);
  EXPECT_EQ(Info().num_objects(), 0u);
}

TEST_F(ObjectStoreAgentTest, AFullStoreSaysWhatHoldsItAndAGoneClientFreesIt) {
  auto too_big = NewClient()->Create("huge", 2 * kStoreBytes);
  ASSERT_FALSE(too_big.ok());
  EXPECT_THAT(std::string(too_big.status().message()),
              HasSubstr("larger than"));

  // A reader pins three 2 MiB objects, leaving no room for a fourth.
  auto producer = NewClient();
  auto reader = NewClient();
  for (int i = 0; i < 3; ++i) {
    std::string id = absl::StrCat("pinned-", i);
    ASSERT_TRUE(producer->Create(id, 2 << 20).ok());
    ASSERT_TRUE(producer->Seal(id).ok());
    ASSERT_TRUE(reader->Get(id).ok());
  }
  auto full = producer->Create("one-more", 3 << 20);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted)
      << full.status();
  EXPECT_THAT(std::string(full.status().message()),
              HasSubstr("--object-store-memory"));

  // The reader's process goes away: its pins go with it, and the store
  // spills or evicts to make room.
  reader.reset();
  absl::StatusOr<shoal::proto::ObjectPlace> made;
  for (int i = 0; i < 100; ++i) {
    made = producer->Create("one-more", 3 << 20);
    if (made.ok()) break;
    usleep(20000);
  }
  EXPECT_TRUE(made.ok()) << made.status();
}

TEST_F(ObjectStoreAgentTest, StatusShowsTheStoresUse) {
  auto producer = NewClient();
  ASSERT_TRUE(producer->Create("shown", 4 << 20).ok());
  ASSERT_TRUE(producer->Seal("shown").ok());
  std::string out;
  bool shown = false;
  for (int i = 0; i < 50 && !shown; ++i) {
    RunCli({"status", "--address", cluster_->address(), "--token",
            cluster_->token()},
           &out);
    shown =
        out.find("4.00MiB/8.00MiB object_store_memory") != std::string::npos;
    if (!shown) usleep(100000);
  }
  EXPECT_TRUE(shown) << out;
}

TEST_F(ObjectStoreAgentTest, AnAgentRemovesArenasOfAgentsThatDied) {
  // An arena left by an agent that was killed (kill -9 leaves it behind).
  pid_t gone = fork();
  if (gone == 0) _exit(0);
  waitpid(gone, nullptr, 0);
  std::string stale = absl::StrCat("/dev/shm/shoal-node-killed-", gone);
  ASSERT_TRUE(shoal::WriteFile(stale, "leftover", 0600).ok());
  ASSERT_TRUE(cluster_->AddNode({"second-node", 1, "", 1 << 20}).ok());
  EXPECT_FALSE(std::filesystem::exists(stale));
}

}  // namespace
