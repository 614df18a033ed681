#include "api/owned_objects.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "api/task_error.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shoal/errors.h"

namespace shoal::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

struct Forgotten {
  std::string id;
  bool stored;
  std::set<std::string> nodes;
};

class OwnedObjectsTest : public ::testing::Test {
 protected:
  OwnedObjectsTest()
      : objects_([this](const std::string& id, bool stored,
                        std::set<std::string> nodes, bool) {
          std::lock_guard<std::mutex> lock(mu_);
          forgotten_.push_back({id, stored, std::move(nodes)});
        }) {}

  std::vector<std::string> ForgottenIds() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> ids;
    for (const auto& f : forgotten_) ids.push_back(f.id);
    return ids;
  }

  static proto::TaskResult Value(const std::string& v) {
    proto::TaskResult r;
    r.set_ok(true);
    r.set_value(v);
    return r;
  }
  static proto::StoredObject Stored(const std::string& id,
                                    const std::vector<std::string>& nodes) {
    proto::StoredObject so;
    so.set_object_id(id);
    so.set_data_size(100);
    for (const auto& n : nodes) {
      auto* s = so.add_sources();
      s->set_node_id(n);
      s->set_address(n + ":1");
    }
    return so;
  }

  std::mutex mu_;
  std::vector<Forgotten> forgotten_;
  OwnedObjects objects_;
};

TEST_F(OwnedObjectsTest, WaiterWakesWhenTheTaskCompletes) {
  objects_.AddPending("a");
  std::atomic<int> blocked{0};
  std::thread completer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    proto::TaskResult r = Value("hello");
    objects_.Complete("a", &r);
  });
  auto ready = objects_.WaitReady("a", -1, [&](bool b) { blocked += b; });
  completer.join();
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_FALSE(ready->stored);
  EXPECT_EQ(*ready->value, "hello");
  EXPECT_EQ(blocked, 1);  // told once that the thread blocked
}

TEST_F(OwnedObjectsTest, ReadyObjectReturnsWithoutBlocking) {
  objects_.AddValue("v", std::make_shared<const std::string>("x"));
  bool blocked = false;
  auto ready = objects_.WaitReady("v", 0, [&](bool) { blocked = true; });
  ASSERT_TRUE(ready.ok());
  EXPECT_EQ(*ready->value, "x");
  EXPECT_FALSE(blocked);
}

TEST_F(OwnedObjectsTest, TimeoutIsATimeoutError) {
  objects_.AddPending("a");
  auto ready = objects_.WaitReady("a", 20, nullptr);
  ASSERT_FALSE(ready.ok());
  EXPECT_EQ(KindOf(ready.status()), ErrorKind::kTimeout);
  EXPECT_THAT(ready.status().message(), HasSubstr("within 20 ms"));
}

TEST_F(OwnedObjectsTest, UnknownObjectSaysWhy) {
  auto ready = objects_.WaitReady("nope", -1, nullptr);
  ASSERT_FALSE(ready.ok());
  EXPECT_EQ(KindOf(ready.status()), ErrorKind::kOther);
  EXPECT_THAT(ready.status().message(), HasSubstr("not known"));
}

TEST_F(OwnedObjectsTest, FailedObjectGivesItsOwnError) {
  objects_.AddPending("a");
  objects_.Fail("a", RemoteFailure("F", "node-1", "boom"));
  auto ready = objects_.WaitReady("a", -1, nullptr);
  ASSERT_FALSE(ready.ok());
  EXPECT_EQ(KindOf(ready.status()), ErrorKind::kRemote);
  EXPECT_EQ(ready.status().message(), "F raised on node node-1: boom");
}

TEST_F(OwnedObjectsTest, ReleasedWhilePendingIsForgottenOnceDone) {
  objects_.AddPending("a");
  objects_.Release("a");
  EXPECT_TRUE(ForgottenIds().empty());
  proto::TaskResult r = Value("v");
  EXPECT_FALSE(objects_.Complete("a", &r));  // not worth keeping a maker
  // Still readable by what waited for it, until the caller lets it go.
  EXPECT_EQ(objects_.Peek("a", nullptr, nullptr), OwnedObjects::State::kReady);
  objects_.ForgetIfReleased("a");
  EXPECT_THAT(ForgottenIds(), ElementsAre("a"));
  EXPECT_EQ(objects_.size(), 0u);
}

TEST_F(OwnedObjectsTest, ReleaseOfAReadyObjectForgetsItAtOnce) {
  objects_.AddStored("s", Stored("s", {"n1", "n2"}));
  objects_.Release("s");
  ASSERT_EQ(forgotten_.size(), 1u);
  EXPECT_TRUE(forgotten_[0].stored);
  EXPECT_THAT(forgotten_[0].nodes, UnorderedElementsAre("n1", "n2"));
}

TEST_F(OwnedObjectsTest, FailedAndReleasedIsForgottenToo) {
  objects_.AddPending("a");
  objects_.Release("a");
  objects_.Fail("a", TaskError(ErrorKind::kOther, "x"));
  objects_.ForgetIfReleased("a");
  EXPECT_THAT(ForgottenIds(), ElementsAre("a"));
}

TEST_F(OwnedObjectsTest, StoredResultIsWorthAMakerWhileReferenced) {
  objects_.AddPending("a");
  proto::TaskResult r;
  r.set_ok(true);
  *r.mutable_stored() = Stored("a", {"n1"});
  EXPECT_TRUE(objects_.Complete("a", &r));
  OwnedObjects::Ready ready;
  ASSERT_EQ(objects_.Peek("a", &ready, nullptr), OwnedObjects::State::kReady);
  EXPECT_TRUE(ready.stored);
  EXPECT_EQ(ready.stored_object.object_id(), "a");
}

TEST_F(OwnedObjectsTest, CopiesAddNodesAndSources) {
  objects_.SetLocalNode("n2");
  objects_.AddStored("s", Stored("s", {"n1"}));
  auto before = objects_.WaitReady("s", 0, nullptr);
  ASSERT_TRUE(before.ok());
  EXPECT_FALSE(before->local_copy);
  objects_.AddCopy("s", "n2", "n2:9");
  objects_.AddCopy("s", "n2", "n2:9");  // once
  objects_.AddCopy("s", "n3", "");      // freed there, no source
  auto after = objects_.WaitReady("s", 0, nullptr);
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->local_copy);
  EXPECT_EQ(after->stored_object.sources_size(), 2);
  auto copies = objects_.StoredCopies();
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_THAT(copies[0].second, UnorderedElementsAre("n1", "n2", "n3"));
}

TEST_F(OwnedObjectsTest, RebuildDecisions) {
  proto::StoredObject where = Stored("s", {"n1"});
  EXPECT_EQ(objects_.NeedsRebuild("s", where), OwnedObjects::Rebuild::kGone);
  objects_.AddStored("s", where);
  EXPECT_EQ(objects_.NeedsRebuild("s", where), OwnedObjects::Rebuild::kNeeded);
  // Copied elsewhere since that attempt: try again instead.
  objects_.AddCopy("s", "n2", "n2:1");
  EXPECT_EQ(objects_.NeedsRebuild("s", where),
            OwnedObjects::Rebuild::kUnderway);
  objects_.MarkPending("s");
  EXPECT_EQ(objects_.NeedsRebuild("s", where),
            OwnedObjects::Rebuild::kUnderway);
  EXPECT_EQ(objects_.StoredObjectOf("s").object_id(), "");
}

TEST_F(OwnedObjectsTest, WaitAnyReturnsOnceEnoughAreDone) {
  objects_.AddPending("a");
  objects_.AddPending("b");
  objects_.AddPending("c");
  std::thread completer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    proto::TaskResult r = Value("1");
    objects_.Complete("c", &r);
    objects_.Fail("a", TaskError(ErrorKind::kOther, "x"));
  });
  auto ready = objects_.WaitAny({"a", "b", "c"}, 2, 10000, nullptr);
  completer.join();
  EXPECT_THAT(ready, ElementsAre(0, 2));
  // A timeout returns what is done.
  EXPECT_THAT(objects_.WaitAny({"a", "b"}, 2, 10, nullptr), ElementsAre(0));
}

TEST_F(OwnedObjectsTest, AZeroTimeoutWaitOnlyLooks) {
  objects_.AddPending("a");
  objects_.AddValue("v", std::make_shared<const std::string>("x"));
  int blocked_calls = 0;
  auto blocked = [&](bool) { ++blocked_calls; };
  EXPECT_THAT(objects_.WaitAny({"a", "v"}, 2, 0, blocked), ElementsAre(1));
  EXPECT_EQ(blocked_calls, 0);
  // A wait that may block says so, and again when it ends.
  EXPECT_THAT(objects_.WaitAny({"a", "v"}, 2, 1, blocked), ElementsAre(1));
  EXPECT_EQ(blocked_calls, 2);
}

TEST_F(OwnedObjectsTest, HandlesAreFoundWhileAlive) {
  objects_.AddValue("v", std::make_shared<const std::string>("x"));
  auto handle = objects_.NewHandle("v");
  auto found = objects_.HandleFor("v");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->get(), handle.get());
  objects_.Release("v");
  auto gone = objects_.HandleFor("v");
  ASSERT_FALSE(gone.ok());
  EXPECT_THAT(gone.status().message(), HasSubstr("does not reference"));
}

TEST_F(OwnedObjectsTest, ClearWakesNobodyWrongly) {
  objects_.AddPending("a");
  std::thread waiter([&] {
    auto ready = objects_.WaitReady("a", 10000, nullptr);
    EXPECT_FALSE(ready.ok());
    EXPECT_THAT(ready.status().message(), HasSubstr("released"));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  objects_.Clear();
  waiter.join();
}

TEST(TaskErrorTest, EveryKindBecomesItsException) {
  EXPECT_THROW(ThrowStatus(RemoteFailure("F", "n", "m")), RemoteError);
  EXPECT_THROW(ThrowStatus(TaskError(ErrorKind::kWorkerDied, "m")),
               WorkerDiedError);
  EXPECT_THROW(ThrowStatus(TaskError(ErrorKind::kInfeasible, "m")),
               InfeasibleError);
  EXPECT_THROW(ThrowStatus(TaskError(ErrorKind::kObjectLost, "m")),
               ObjectLostError);
  EXPECT_THROW(ThrowStatus(TaskError(ErrorKind::kActorDied, "m")),
               ActorDiedError);
  EXPECT_THROW(ThrowStatus(TaskError(ErrorKind::kTimeout, "m")), TimeoutError);
  try {
    ThrowStatus(RemoteFailure("F", "node-7", "it broke"));
  } catch (const RemoteError& e) {
    EXPECT_EQ(e.function_name(), "F");
    EXPECT_EQ(e.node_id(), "node-7");
    EXPECT_EQ(e.remote_message(), "it broke");
    EXPECT_STREQ(e.what(), "F raised on node node-7: it broke");
  }
  // A plain status (from rpc, say) is a shoal::Error with its message.
  try {
    ThrowStatus(absl::UnavailableError("head down"));
    FAIL();
  } catch (const ActorDiedError&) {
    FAIL() << "no kind: not an ActorDiedError";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "head down");
  }
}

}  // namespace
}  // namespace shoal::internal
