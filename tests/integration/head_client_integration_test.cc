// HeadClient against a real Head over loopback, end to end: typed calls in
// both forms, the head's own answers and errors, and the calls of a client
// whose head is gone or which was closed. (head_client_test checks the
// client alone, against a peer in memory.)
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "head/head.h"
#include "head/head_testing.h"
#include "head_client/head_client.h"
#include "rpc/event_loop.h"
#include "scheduling/resource_set.h"
#include "shoal/shoal.pb.h"

namespace shoal::rpc {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "head-client-test-token";

class HeadClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HeadOptions options;
    options.token = kToken;
    options.health_timeout_ms = HealthTimeoutMs();
    auto head = testing::TestHead::Start("head_client_test", options);
    ASSERT_TRUE(head.ok()) << head.status();
    head_ = std::move(*head);
    auto loop = EventLoop::Create("head-client");
    ASSERT_TRUE(loop.ok()) << loop.status();
    loop_ = std::move(*loop);
    client_ = std::make_unique<HeadClient>(loop_.get(), head_->address(),
                                           kToken, "head client test");
  }

  // Nodes that registered and were not heard from since are dead after
  // this long.
  virtual int64_t HealthTimeoutMs() const { return 5000; }

  void TearDown() override {
    client_.reset();
    if (loop_ != nullptr) loop_->Stop();
    head_.reset();
  }

  // A placement group of one 1-CPU bundle, named `name` ("" for none).
  absl::StatusOr<proto::PlacementGroupInfo> CreateOneCpuGroup(
      const std::string& name) {
    proto::PlacementGroupSpec spec;
    spec.set_name(name);
    absl::StatusOr<ResourceSet> bundle = ResourceSet::FromDoubles({{"CPU", 1}});
    if (!bundle.ok()) return bundle.status();
    bundle->ToProto(spec.add_bundles());
    return client_->CreatePlacementGroup(spec);
  }

  // Starts `call` on the client's loop and waits for the reply it gets.
  template <typename Reply>
  absl::StatusOr<Reply> OnLoop(
      std::function<void(HeadClient::Callback<Reply>)> call) {
    return RunOnLoopAndWait<absl::StatusOr<Reply>>(
        loop_.get(),
        [&](HeadClient::Callback<Reply> done) { call(std::move(done)); });
  }

  std::unique_ptr<testing::TestHead> head_;
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<HeadClient> client_;
};

TEST_F(HeadClientTest, KeyValueStoreRoundTrip) {
  proto::KvPutRequest put;
  put.set_key("launch/7/port");
  put.set_value("29500");
  absl::StatusOr<proto::KvPutReply> added = client_->KvPut(put);
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_TRUE(added->added());

  put.set_value("29501");
  absl::StatusOr<proto::KvPutReply> kept = client_->KvPut(put);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_FALSE(kept->added());

  proto::KvGetRequest get;
  get.set_key("launch/7/port");
  absl::StatusOr<proto::KvGetReply> value = client_->KvGet(get);
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_TRUE(value->found());
  EXPECT_EQ(value->value(), "29500");

  get.set_key("launch/8/port");
  absl::StatusOr<proto::KvGetReply> missing = client_->KvGet(get);
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_FALSE(missing->found());
}

TEST_F(HeadClientTest, ClusterStatusInBothForms) {
  absl::StatusOr<proto::ClusterStatus> blocking = client_->ClusterStatus();
  ASSERT_TRUE(blocking.ok()) << blocking.status();
  EXPECT_EQ(blocking->nodes_size(), 0);

  absl::StatusOr<proto::ClusterStatus> async = OnLoop<proto::ClusterStatus>(
      [&](auto done) { client_->ClusterStatus(std::move(done)); });
  ASSERT_TRUE(async.ok()) << async.status();
  EXPECT_EQ(async->nodes_size(), 0);
}

TEST_F(HeadClientTest, BlobUploadAndDownload) {
  std::string path = head_->session_dir() + "/payload";
  const std::string data = "the bytes of a driver's binary";
  std::ofstream(path, std::ios::binary) << data;
  absl::StatusOr<std::string> hash = Sha256File(path);
  ASSERT_TRUE(hash.ok()) << hash.status();

  proto::BlobRef ref;
  ref.set_hash(*hash);
  absl::StatusOr<proto::HasBlobReply> before = client_->HasBlob(ref);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_FALSE(before->present());

  proto::BlobChunk chunk;
  chunk.set_hash(*hash);
  chunk.set_data(data);
  chunk.set_last(true);
  chunk.set_total_size(data.size());
  ASSERT_TRUE(client_->PutBlobChunk(chunk).ok());

  absl::StatusOr<proto::HasBlobReply> after = client_->HasBlob(ref);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(after->present());
  EXPECT_EQ(after->size(), static_cast<int64_t>(data.size()));

  proto::GetBlobChunkRequest get;
  get.set_hash(*hash);
  absl::StatusOr<proto::BlobChunk> back = OnLoop<proto::BlobChunk>(
      [&](auto done) { client_->GetBlobChunk(get, std::move(done)); });
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->data(), data);
  EXPECT_TRUE(back->last());

  chunk.set_hash("not-a-hash");
  absl::Status bad = client_->PutBlobChunk(chunk);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
}

// Two drivers of one program upload it at once (after a head took a
// cluster over, each gives it their binary again), chunk by chunk,
// interleaved: one finishing first must not spoil the other's upload.
TEST_F(HeadClientTest, TwoUploadsOfOneBlobAtOnceBothSucceed) {
  std::string path = head_->session_dir() + "/program";
  std::string data;
  for (int i = 0; i < 3000; ++i) absl::StrAppend(&data, "chunk ", i, " ");
  std::ofstream(path, std::ios::binary) << data;
  absl::StatusOr<std::string> hash = Sha256File(path);
  ASSERT_TRUE(hash.ok()) << hash.status();
  HeadClient other(loop_.get(), head_->address(), kToken, "second uploader");
  constexpr size_t kChunks = 4;
  const size_t size = (data.size() + kChunks - 1) / kChunks;
  auto chunk = [&](size_t i) {
    proto::BlobChunk c;
    c.set_hash(*hash);
    c.set_offset(i * size);
    c.set_data(data.substr(i * size, size));
    c.set_last(i + 1 == kChunks);
    c.set_total_size(data.size());
    return c;
  };
  // The first is two chunks ahead: it finishes while the second is midway.
  ASSERT_TRUE(client_->PutBlobChunk(chunk(0)).ok());
  ASSERT_TRUE(client_->PutBlobChunk(chunk(1)).ok());
  ASSERT_TRUE(other.PutBlobChunk(chunk(0)).ok());
  ASSERT_TRUE(client_->PutBlobChunk(chunk(2)).ok());
  ASSERT_TRUE(other.PutBlobChunk(chunk(1)).ok());
  ASSERT_TRUE(client_->PutBlobChunk(chunk(3)).ok());
  ASSERT_TRUE(other.PutBlobChunk(chunk(2)).ok());
  absl::Status last = other.PutBlobChunk(chunk(3));
  EXPECT_TRUE(last.ok()) << last;

  proto::BlobRef ref;
  ref.set_hash(*hash);
  absl::StatusOr<proto::HasBlobReply> has = client_->HasBlob(ref);
  ASSERT_TRUE(has.ok()) << has.status();
  EXPECT_TRUE(has->present());
  EXPECT_EQ(has->size(), static_cast<int64_t>(data.size()));
  // Nothing half-written is left beside it.
  int files = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(head_->session_dir() + "/blobs")) {
    EXPECT_EQ(e.path().filename().string(), *hash);
    ++files;
  }
  EXPECT_EQ(files, 1);
}

// The cluster view in heartbeat replies: the whole view for an agent that
// holds none (or another head's), then only the nodes that changed since
// the version it holds.
TEST_F(HeadClientTest, HeartbeatsBringOnlyWhatChangedSinceTheViewHeld) {
  auto cpus = [](double n) {
    proto::ResourceMap m;
    ResourceSet::FromDoubles({{"CPU", n}})->ToProto(&m);
    return m;
  };
  for (const char* id : {"a", "b", "c"}) {
    proto::RegisterNodeRequest reg;
    reg.mutable_node()->set_node_id(id);
    reg.mutable_node()->set_address(absl::StrCat(id, ".example:1"));
    reg.mutable_node()->set_hostname("not sent to agents");
    *reg.mutable_node()->mutable_total() = cpus(4);
    ASSERT_TRUE(OnLoop<proto::RegisterNodeReply>([&](auto done) {
                  client_->RegisterNode(reg, std::move(done));
                }).ok());
  }
  auto beat = [&](const std::string& id, double available, uint64_t epoch,
                  int64_t version) {
    proto::HeartbeatRequest req;
    req.set_node_id(id);
    *req.mutable_available() = cpus(available);
    *req.mutable_total() = cpus(4);
    req.set_view_epoch(epoch);
    req.set_view_version(version);
    return OnLoop<proto::HeartbeatReply>(
        [&](auto done) { client_->Heartbeat(req, std::move(done)); });
  };
  auto ids = [](const proto::HeartbeatReply& r) {
    std::vector<std::string> out;
    for (const auto& n : r.nodes()) out.push_back(n.node_id());
    return out;
  };
  auto first = beat("a", 4, 0, 0);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->full_view());
  EXPECT_THAT(ids(*first), ::testing::ElementsAre("a", "b", "c"));
  EXPECT_NE(first->view_epoch(), 0u);
  // What spillback reads, not the rest of the record.
  EXPECT_EQ(first->nodes(1).address(), "b.example:1");
  EXPECT_TRUE(first->nodes(1).alive());
  EXPECT_EQ(first->nodes(1).hostname(), "");
  const uint64_t epoch = first->view_epoch();

  auto same = beat("a", 4, epoch, first->view_version());
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_FALSE(same->full_view());
  EXPECT_THAT(ids(*same), ::testing::IsEmpty());
  EXPECT_EQ(same->view_version(), first->view_version());

  // b's available changes: a's next heartbeat brings b, and only b.
  ASSERT_TRUE(beat("b", 1, 0, 0).ok());
  auto changed = beat("a", 4, epoch, same->view_version());
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(changed->full_view());
  ASSERT_THAT(ids(*changed), ::testing::ElementsAre("b"));
  EXPECT_EQ(
      ResourceSet::FromProto(changed->nodes(0).available()).GetDouble("CPU"),
      1);

  // c leaves: it comes as not alive.
  proto::UnregisterNodeRequest bye;
  bye.set_node_id("c");
  ASSERT_TRUE(OnLoop<proto::Empty>([&](auto done) {
                client_->UnregisterNode(bye, std::move(done));
              }).ok());
  auto left = beat("a", 4, epoch, changed->view_version());
  ASSERT_TRUE(left.ok()) << left.status();
  ASSERT_THAT(ids(*left), ::testing::ElementsAre("c"));
  EXPECT_FALSE(left->nodes(0).alive());

  // A view of another head (or a version this head never gave): all of it.
  auto other = beat("a", 4, epoch + 1, left->view_version());
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_TRUE(other->full_view());
  EXPECT_EQ(other->nodes_size(), 3);
  auto ahead = beat("a", 4, epoch, left->view_version() + 100);
  ASSERT_TRUE(ahead.ok()) << ahead.status();
  EXPECT_TRUE(ahead->full_view());
}

// Registering 3,000 nodes one by one takes seconds on a loaded machine
// (a sanitizer build, other tests): none of them may die of silence
// meanwhile.
class HeadClientLargeViewTest : public HeadClientTest {
 protected:
  int64_t HealthTimeoutMs() const override { return 600000; }
};

TEST_F(HeadClientLargeViewTest, ALargeViewComesInPagesThatAddUpToEveryNode) {
  // 3,000 nodes are more than one reply's page: the first reply starts
  // the view (full_view), each next heartbeat from the version it reached
  // brings the following changes, and merged they are every node once.
  constexpr int kNodes = 3000;
  proto::ResourceMap cpus;
  ResourceSet::FromDoubles({{"CPU", 8}})->ToProto(&cpus);
  for (int i = 0; i < kNodes; ++i) {
    proto::RegisterNodeRequest reg;
    reg.mutable_node()->set_node_id(absl::StrCat("node-", i));
    reg.mutable_node()->set_address(
        absl::StrCat("10.0.", i / 250, ".", i % 250, ":41000"));
    *reg.mutable_node()->mutable_total() = cpus;
    ASSERT_TRUE(OnLoop<proto::RegisterNodeReply>([&](auto done) {
                  client_->RegisterNode(reg, std::move(done));
                }).ok());
  }
  std::map<std::string, std::string> view;  // node id -> address
  uint64_t epoch = 0;
  int64_t version = 0;
  int pages = 0;
  for (; pages < 100; ++pages) {
    proto::HeartbeatRequest req;
    req.set_node_id("node-0");
    *req.mutable_available() = cpus;
    *req.mutable_total() = cpus;
    req.set_view_epoch(epoch);
    req.set_view_version(version);
    auto reply = OnLoop<proto::HeartbeatReply>(
        [&](auto done) { client_->Heartbeat(req, std::move(done)); });
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_EQ(reply->full_view(), pages == 0);
    if (reply->full_view()) view.clear();
    for (const auto& n : reply->nodes()) {
      EXPECT_TRUE(view.emplace(n.node_id(), n.address()).second)
          << n.node_id() << " came twice";
    }
    ASSERT_GE(reply->view_version(), version);
    if (reply->nodes_size() == 0) break;  // nothing newer: the view is whole
    EXPECT_LT(reply->ByteSizeLong(), 80u << 10);
    epoch = reply->view_epoch();
    version = reply->view_version();
  }
  EXPECT_GT(pages, 2);
  ASSERT_EQ(view.size(), static_cast<size_t>(kNodes));
  EXPECT_EQ(view["node-2999"], "10.0.11.249:41000");
}

TEST_F(HeadClientTest, PlacementGroups) {
  proto::GetPlacementGroupRequest unknown;
  unknown.set_pg_id("no-such-group");
  absl::StatusOr<proto::PlacementGroupInfo> missing =
      client_->GetPlacementGroup(unknown);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound)
      << missing.status();
  EXPECT_THAT(missing.status().message(), HasSubstr("no-such-group"));
  // Removing what the head does not know is not an error.
  EXPECT_TRUE(client_->RemovePlacementGroup(unknown).ok());

  absl::StatusOr<proto::PlacementGroupInfo> created =
      CreateOneCpuGroup("trainers");
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_FALSE(created->pg_id().empty());

  proto::GetPlacementGroupRequest by_name;
  by_name.set_name("trainers");
  absl::StatusOr<proto::PlacementGroupInfo> found =
      client_->GetPlacementGroup(by_name);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->pg_id(), created->pg_id());
  EXPECT_TRUE(client_->RemovePlacementGroup(by_name).ok());
}

TEST_F(HeadClientTest, PlacementGroupAsynchronously) {
  proto::GetPlacementGroupRequest unknown;
  unknown.set_pg_id("no-such-group");
  absl::StatusOr<proto::PlacementGroupInfo> missing =
      OnLoop<proto::PlacementGroupInfo>([&](auto done) {
        client_->GetPlacementGroup(unknown, std::move(done), 5000);
      });
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound)
      << missing.status();
  EXPECT_THAT(missing.status().message(), HasSubstr("no-such-group"));

  absl::StatusOr<proto::PlacementGroupInfo> created = CreateOneCpuGroup("");
  ASSERT_TRUE(created.ok()) << created.status();
  proto::GetPlacementGroupRequest by_id;
  by_id.set_pg_id(created->pg_id());
  absl::StatusOr<proto::PlacementGroupInfo> found =
      OnLoop<proto::PlacementGroupInfo>([&](auto done) {
        client_->GetPlacementGroup(by_id, std::move(done));
      });
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->pg_id(), created->pg_id());
}

// What a node agent does over its life: register, heartbeat, unregister.
TEST_F(HeadClientTest, NodeRegistersHeartbeatsAndUnregisters) {
  proto::HeartbeatRequest beat;
  beat.set_node_id("node-1");
  absl::StatusOr<ResourceSet> total = ResourceSet::FromDoubles({{"CPU", 2}});
  ASSERT_TRUE(total.ok()) << total.status();
  total->ToProto(beat.mutable_total());
  total->ToProto(beat.mutable_available());
  auto heartbeat = [&] {
    return OnLoop<proto::HeartbeatReply>(
        [&](auto done) { client_->Heartbeat(beat, std::move(done), 5000); });
  };
  absl::StatusOr<proto::HeartbeatReply> before = heartbeat();
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_TRUE(before->unknown_node());

  proto::RegisterNodeRequest join;
  join.mutable_node()->set_node_id("node-1");
  // Never dialed: the head calls an agent only to place bundles.
  join.mutable_node()->set_address("127.0.0.1:1");
  total->ToProto(join.mutable_node()->mutable_total());
  absl::StatusOr<proto::RegisterNodeReply> joined =
      OnLoop<proto::RegisterNodeReply>([&](auto done) {
        client_->RegisterNode(join, std::move(done), 5000);
      });
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->node_id(), "node-1");
  EXPECT_GT(joined->heartbeat_interval_ms(), 0);

  absl::StatusOr<proto::HeartbeatReply> known = heartbeat();
  ASSERT_TRUE(known.ok()) << known.status();
  EXPECT_FALSE(known->unknown_node());
  ASSERT_EQ(known->nodes_size(), 1);
  EXPECT_EQ(known->nodes(0).node_id(), "node-1");

  proto::UnregisterNodeRequest leave;
  leave.set_node_id("node-1");
  leave.set_reason("stopped by the test");
  absl::StatusOr<proto::Empty> left = OnLoop<proto::Empty>([&](auto done) {
    client_->UnregisterNode(leave, std::move(done), 1000);
  });
  ASSERT_TRUE(left.ok()) << left.status();
  absl::StatusOr<proto::ClusterStatus> status = client_->ClusterStatus();
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->nodes_size(), 1);
  EXPECT_FALSE(status->nodes(0).alive());
  EXPECT_EQ(status->nodes(0).death_reason(), "stopped by the test");
  // A node the head declared dead is told to register again.
  absl::StatusOr<proto::HeartbeatReply> after = heartbeat();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(after->unknown_node());
}

TEST_F(HeadClientTest, UnknownActorIsNotFoundInBothForms) {
  proto::GetActorRequest req;
  req.set_actor_id("no-such-actor");
  EXPECT_EQ(client_->GetActor(req).status().code(),
            absl::StatusCode::kNotFound);
  absl::StatusOr<proto::ActorInfo> async = OnLoop<proto::ActorInfo>(
      [&](auto done) { client_->GetActor(req, std::move(done)); });
  EXPECT_EQ(async.status().code(), absl::StatusCode::kNotFound)
      << async.status();
}

TEST_F(HeadClientTest, BlockingCallsFromManyUserThreads) {
  constexpr int kThreads = 4;
  std::vector<absl::Status> results(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      proto::KvPutRequest put;
      put.set_key(absl::StrCat("thread/", i));
      put.set_value(absl::StrCat(i));
      absl::StatusOr<proto::KvPutReply> added = client_->KvPut(put);
      if (!added.ok()) {
        results[i] = added.status();
        return;
      }
      proto::KvGetRequest get;
      get.set_key(put.key());
      absl::StatusOr<proto::KvGetReply> got = client_->KvGet(get);
      if (!got.ok()) {
        results[i] = got.status();
      } else if (got->value() != put.value()) {
        results[i] = absl::InternalError("read back " + got->value());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& st : results) EXPECT_TRUE(st.ok()) << st;
}

TEST_F(HeadClientTest, FailsCleanlyWhenTheHeadIsGone) {
  ASSERT_TRUE(client_->ClusterStatus().ok());
  head_->Stop();
  auto start = std::chrono::steady_clock::now();
  proto::KvGetRequest get;
  get.set_key("anything");
  absl::StatusOr<proto::KvGetReply> reply = client_->KvGet(get, 5000);
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kUnavailable)
      << reply.status();
  // The lost connection fails the call; it does not wait out its deadline.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
  // And so does every later call, without a head to reconnect to.
  absl::StatusOr<proto::ClusterStatus> again = client_->ClusterStatus(5000);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable)
      << again.status();
}

TEST_F(HeadClientTest, ClosedClientCancelsCalls) {
  loop_->RunSync([&] { client_->Close(); });
  absl::StatusOr<proto::ClusterStatus> status = client_->ClusterStatus();
  EXPECT_EQ(status.status().code(), absl::StatusCode::kCancelled)
      << status.status();
  EXPECT_THAT(status.status().message(), HasSubstr("closed"));
}

}  // namespace
}  // namespace shoal::rpc
