// Objects' bytes: small values in the table, large ones in the node's store
// (a fake here), pulls of copies this node lacks, rebuilds of lost ones, and
// pulls into memory on a host with no store.
#include "api/object_io.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "api/object_client.h"
#include "api/task_error.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shoal/shoal.pb.h"

namespace shoal::internal {
namespace {

using ::testing::HasSubstr;

// A node store in memory. Objects in `elsewhere` are on other nodes: a
// Pull copies them here (or fails with DataLoss when `lost`).
class FakeStore : public NodeStore {
 public:
  const std::string& node_id() const override { return node_; }
  const std::string& transfer_address() const override { return address_; }
  absl::Status Put(const std::string& id, const std::string& owner, size_t size,
                   std::string_view metadata,
                   const std::function<void(uint8_t*)>& fill) override {
    if (full) return absl::ResourceExhaustedError("the store is full");
    std::string bytes(size, '\0');
    fill(reinterpret_cast<uint8_t*>(bytes.data()));
    here[id] = {bytes, std::string(metadata)};
    owners[id] = owner;
    return absl::OkStatus();
  }
  absl::StatusOr<Mapped> Get(const std::string& id) override {
    ++gets;
    auto it = here.find(id);
    if (it == here.end()) return absl::NotFoundError("no copy here");
    return Map(it->second);
  }
  absl::StatusOr<Mapped> Pull(const proto::StoredObject& object) override {
    ++pulls;
    auto it = elsewhere.find(object.object_id());
    if (lost || it == elsewhere.end()) {
      return absl::DataLossError("object " + object.object_id() + " is lost");
    }
    here[object.object_id()] = it->second;
    return Map(it->second);
  }

  std::map<std::string, std::pair<std::string, std::string>> here, elsewhere;
  std::map<std::string, std::string> owners;
  bool full = false, lost = false;
  int gets = 0, pulls = 0;

 private:
  static Mapped Map(const std::pair<std::string, std::string>& object) {
    auto keep = std::make_shared<std::pair<std::string, std::string>>(object);
    return Mapped{keep->first, keep->second, keep};
  }
  std::string node_ = "here", address_ = "10.0.0.1:7001";
};

class ObjectIoTest : public ::testing::Test {
 protected:
  ObjectIoTest()
      : objects_([](const std::string&, bool, std::set<std::string>, bool) {}),
        io_(&objects_, /*inline_threshold=*/100, Hooks()) {}

  ObjectIo::Hooks Hooks() {
    return {
        .new_id = [this] { return "o" + std::to_string(++ids_); },
        .post = [this](std::function<void()> fn) { posted_.push_back(fn); },
        .rebuild =
            [this](const std::string& id, const proto::StoredObject&) {
              rebuilds_.push_back(id);
              return rebuild_error_;
            },
        .pull_into_memory =
            [this](const proto::StoredObject& where, uint8_t* dest,
                   uint64_t size) {
              pulled_into_memory_.push_back(where.object_id());
              std::string bytes = std::string(size - 1, 'm') + "R";
              memcpy(dest, bytes.data(), size);
              return absl::OkStatus();
            },
        .blocked = nullptr,
    };
  }

  FakeStore* UseStore() {
    auto store = std::make_unique<FakeStore>();
    FakeStore* raw = store.get();
    io_.SetStore(std::move(store), "driver of job j");
    return raw;
  }

  // Object `id` made by a task and stored on another node.
  std::shared_ptr<RefHandle> StoredElsewhere(const std::string& id,
                                             size_t size) {
    objects_.AddPending(id);
    auto handle = objects_.NewHandle(id);
    proto::TaskResult result;
    result.set_ok(true);
    proto::StoredObject* so = result.mutable_stored();
    so->set_object_id(id);
    so->set_data_size(size);
    so->set_metadata_size(1);
    proto::ObjectSource* source = so->add_sources();
    source->set_node_id("other");
    source->set_address("10.0.0.2:7001");
    objects_.Complete(id, &result);
    return handle;
  }

  static ObjectValue Raw(const std::string& bytes) {
    auto keep = std::make_shared<std::string>(bytes);
    return ObjectValue{*keep, /*raw=*/true, keep};
  }

  OwnedObjects objects_;
  ObjectIo io_;
  int ids_ = 0;
  std::vector<std::function<void()>> posted_;
  std::vector<std::string> rebuilds_, pulled_into_memory_;
  absl::Status rebuild_error_;
};

TEST_F(ObjectIoTest, SmallValuesStayInTheTable) {
  FakeStore* store = UseStore();
  auto ref = io_.Put(PackValue(std::string("small")), {});
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_TRUE(store->here.empty());
  auto value = io_.Get(**ref, 0);
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(UnpackValue<std::string>(*value), "small");
}

TEST_F(ObjectIoTest, LargeValuesGoToTheStoreAndAreMappedBack) {
  FakeStore* store = UseStore();
  std::string big(1000, 'b');
  auto ref = io_.Put(Raw(big), {});
  ASSERT_TRUE(ref.ok()) << ref.status();
  ASSERT_EQ(store->here.count("o1"), 1u);
  EXPECT_EQ(store->here["o1"].first, big);
  EXPECT_EQ(store->here["o1"].second, std::string(1, kFormatRaw));
  EXPECT_EQ(store->owners["o1"], "driver of job j");
  proto::StoredObject where = objects_.StoredObjectOf("o1");
  ASSERT_EQ(where.sources_size(), 1);
  EXPECT_EQ(where.sources(0).address(), "10.0.0.1:7001");
  auto value = io_.Get(**ref, 0);
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_TRUE(value->raw);
  EXPECT_EQ(value->data, big);
  EXPECT_EQ(store->pulls, 0);
}

TEST_F(ObjectIoTest, WithoutAStoreLargeValuesStayHere) {
  auto ref = io_.Put(Raw(std::string(1000, 'x')), {});
  ASSERT_TRUE(ref.ok());
  auto value = io_.Get(**ref, 0);
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(UnpackValue<Buffer>(*value).size(), 1000u);
}

TEST_F(ObjectIoTest, AFullStoreSaysSo) {
  FakeStore* store = UseStore();
  store->full = true;
  auto ref = io_.Put(Raw(std::string(1000, 'x')), {});
  EXPECT_THAT(ref.status().message(), HasSubstr("Put of 1000 bytes failed"));
  EXPECT_THAT(ref.status().message(), HasSubstr("the store is full"));
}

TEST_F(ObjectIoTest, PiecesMustFitAndGapsAreZeroed) {
  std::vector<BufferPiece> bad = {{8, std::string_view("abc")}};
  EXPECT_THAT(io_.PutPieces(bad, 10).status().message(),
              HasSubstr("does not fit an object of 10 bytes"));
  std::vector<BufferPiece> pieces = {{4, std::string_view("cd")},
                                     {0, std::string_view("ab")}};
  auto ref = io_.PutPieces(pieces, 8);
  ASSERT_TRUE(ref.ok()) << ref.status();
  auto value = io_.Get(**ref, 0);
  ASSERT_TRUE(value.ok());
  Buffer bytes = UnpackValue<Buffer>(*value);
  EXPECT_EQ(
      std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
      std::string("ab\0\0cd\0\0", 8));
}

TEST_F(ObjectIoTest, ACopyThisNodeLacksIsPulledAndRecorded) {
  FakeStore* store = UseStore();
  store->elsewhere["t1"] = {std::string(200, 'p'), std::string(1, kFormatRaw)};
  auto ref = StoredElsewhere("t1", 200);
  auto value = io_.Get(*ref, 0);
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(value->data, std::string(200, 'p'));
  EXPECT_EQ(store->pulls, 1);
  // This node is a source from now on.
  EXPECT_EQ(objects_.StoredObjectOf("t1").sources_size(), 2);
}

TEST_F(ObjectIoTest, AnObjectLostEverywhereIsRebuiltOrSaidLost) {
  FakeStore* store = UseStore();
  store->lost = true;
  auto ref = StoredElsewhere("t2", 200);
  rebuild_error_ = absl::FailedPreconditionError("it was released");
  auto value = io_.Get(*ref, 0);
  ASSERT_FALSE(value.ok());
  EXPECT_EQ(KindOf(value.status()), ErrorKind::kObjectLost);
  EXPECT_THAT(value.status().message(), HasSubstr("object t2 is lost"));
  EXPECT_THAT(value.status().message(), HasSubstr("it was released"));
  EXPECT_EQ(rebuilds_, std::vector<std::string>{"t2"});
}

TEST_F(ObjectIoTest, WithoutAStoreStoredObjectsArePulledIntoMemory) {
  auto ref = StoredElsewhere("t3", 5);
  auto value = io_.Get(*ref, 0);
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(pulled_into_memory_, std::vector<std::string>{"t3"});
  EXPECT_EQ(value->data, "mmmmm");
  EXPECT_TRUE(value->raw);
}

TEST_F(ObjectIoTest, LargeArgumentsBecomeRefsAndSmallOnesAreCopied) {
  UseStore();
  std::vector<TaskArg> args(2);
  args[0].value = Raw(std::string(1000, 'L'));
  args[1].value = Raw("s");
  ASSERT_TRUE(io_.PrepareArgs(args).ok());
  ASSERT_NE(args[0].ref, nullptr);
  EXPECT_TRUE(args[0].value.data.empty());
  EXPECT_EQ(args[1].ref, nullptr);
  EXPECT_FALSE(args[1].value.raw);  // now msgpack this runtime owns
  EXPECT_NE(args[1].value.keepalive, nullptr);
}

TEST_F(ObjectIoTest, ActorArgumentsTravelInTheSpec) {
  UseStore();
  auto small = io_.Put(PackValue(7), {});
  ASSERT_TRUE(small.ok());
  std::vector<TaskArg> args(3);
  args[0].value = PackValue(std::string("v"));
  args[1].ref = *small;
  args[2].value = Raw(std::string(1000, 'B'));
  proto::ActorArgs spec;
  std::vector<std::shared_ptr<RefHandle>> keep;
  EXPECT_TRUE(io_.ArgsReady(args));
  std::atomic<bool> stop{false};
  ASSERT_TRUE(io_.WriteActorArgs(args, &spec, &keep, stop).ok());
  ASSERT_EQ(spec.args_size(), 3);
  EXPECT_EQ(spec.args(1), Pack(7));
  EXPECT_EQ(spec.args(2), "");
  ASSERT_EQ(spec.stored_args().count(2), 1u);
  EXPECT_EQ(keep.size(), 2u);
}

// The constructor's arguments of an actor created while a ref among them
// was pending: written once it is ready, or its error; a stop ends the
// wait (ActorArguments' threads).
TEST_F(ObjectIoTest, ActorArgumentsWaitForPendingRefsUntilStopped) {
  objects_.AddPending("p1");
  std::vector<TaskArg> args(1);
  args[0].ref = objects_.NewHandle("p1");
  EXPECT_FALSE(io_.ArgsReady(args));
  std::atomic<bool> stop{false};
  proto::ActorArgs written;
  std::vector<std::shared_ptr<RefHandle>> keep;
  std::thread complete([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    proto::TaskResult result;
    result.set_ok(true);
    result.set_value(Pack(5));
    objects_.Complete("p1", &result);
  });
  absl::Status status = io_.WriteActorArgs(args, &written, &keep, stop);
  complete.join();
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(written.args_size(), 1);
  EXPECT_EQ(written.args(0), Pack(5));
  EXPECT_TRUE(io_.ArgsReady(args));

  objects_.AddPending("p2");
  args[0].ref = objects_.NewHandle("p2");
  objects_.Fail("p2", absl::InternalError("the task that makes it failed"));
  EXPECT_FALSE(io_.ArgsReady(args));  // a failed one goes the same way
  status = io_.WriteActorArgs(args, &written, &keep, stop);
  EXPECT_THAT(status.message(), HasSubstr("the task that makes it failed"));

  objects_.AddPending("p3");
  args[0].ref = objects_.NewHandle("p3");
  stop = true;
  status = io_.WriteActorArgs(args, &written, &keep, stop);
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
}

TEST_F(ObjectIoTest, RefsInsideAValueAreKeptOnTheLoopUntilForgotten) {
  auto inner = io_.Put(PackValue(1), {});
  ASSERT_TRUE(inner.ok());
  auto outer = io_.Put(PackValue(2), {*inner});
  ASSERT_TRUE(outer.ok());
  ASSERT_EQ(posted_.size(), 1u);
  posted_[0]();
  EXPECT_EQ(io_.TakeContained().size(), 1u);
  EXPECT_TRUE(io_.TakeContained().empty());
}

}  // namespace
}  // namespace shoal::internal
