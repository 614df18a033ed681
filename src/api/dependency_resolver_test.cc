#include "api/dependency_resolver.h"

#include <map>
#include <memory>

#include "api/task_error.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class DependencyResolverTest : public ::testing::Test {
 protected:
  TaskArg Ref(const std::string& id) {
    TaskArg arg;
    arg.ref = objects_.NewHandle(id);
    return arg;
  }
  static TaskArg Value(const std::string& v) {
    TaskArg arg;
    arg.value = ObjectValue::Owned(v);
    return arg;
  }
  TaskArgs& Task(const std::string& id, std::vector<TaskArg> args) {
    auto& t = tasks_[id];
    t = std::make_unique<TaskArgs>();
    t->args = std::move(args);
    return *t;
  }
  void Complete(const std::string& id, const std::string& value) {
    proto::TaskResult r;
    r.set_ok(true);
    r.set_value(value);
    objects_.Complete(id, &r);
  }
  void Done(const std::string& id) {
    ready_.clear();
    failed_.clear();
    resolver_.ObjectDone(
        id,
        [this](const std::string& t) -> TaskArgs* {
          auto it = tasks_.find(t);
          return it == tasks_.end() ? nullptr : it->second.get();
        },
        &ready_, &failed_);
  }

  OwnedObjects objects_{nullptr};
  DependencyResolver resolver_{&objects_};
  std::map<std::string, std::unique_ptr<TaskArgs>> tasks_;
  std::vector<std::string> ready_;
  std::vector<std::pair<std::string, absl::Status>> failed_;
};

TEST_F(DependencyResolverTest, ValuesAndReadyRefsResolveAtOnce) {
  objects_.AddValue("x", std::make_shared<const std::string>("X"));
  proto::StoredObject so;
  so.set_object_id("s");
  objects_.AddStored("s", so);
  TaskArgs& t = Task("t", {Value("v"), Ref("x"), Ref("s")});
  ASSERT_TRUE(resolver_.Resolve("t", &t).ok());
  EXPECT_EQ(t.pending, 0);
  EXPECT_THAT(t.values, ElementsAre("v", "X", ""));
  ASSERT_EQ(t.stored.count(2), 1u);
  EXPECT_EQ(t.stored[2].object_id(), "s");
  EXPECT_EQ(resolver_.waited_objects(), 0u);
}

TEST_F(DependencyResolverTest, TaskIsReadyOnceEveryArgumentIs) {
  objects_.AddPending("a");
  objects_.AddPending("b");
  TaskArgs& t = Task("t", {Ref("a"), Ref("b"), Ref("a")});
  ASSERT_TRUE(resolver_.Resolve("t", &t).ok());
  EXPECT_EQ(t.pending, 3);
  Complete("a", "A");
  Done("a");
  EXPECT_THAT(ready_, IsEmpty());
  EXPECT_EQ(t.pending, 1);
  Complete("b", "B");
  Done("b");
  EXPECT_THAT(ready_, ElementsAre("t"));
  EXPECT_THAT(t.values, ElementsAre("A", "B", "A"));
  EXPECT_EQ(resolver_.waited_objects(), 0u);
}

TEST_F(DependencyResolverTest, FailedArgumentFailsTheTaskWithItsError) {
  objects_.AddPending("a");
  TaskArgs& t = Task("t", {Ref("a")});
  ASSERT_TRUE(resolver_.Resolve("t", &t).ok());
  objects_.Fail("a", RemoteFailure("F", "n1", "boom"));
  Done("a");
  ASSERT_EQ(failed_.size(), 1u);
  EXPECT_EQ(failed_[0].first, "t");
  EXPECT_EQ(KindOf(failed_[0].second), ErrorKind::kRemote);
  // A task submitted after the failure fails at once, the same way.
  TaskArgs& u = Task("u", {Ref("a")});
  absl::Status st = resolver_.Resolve("u", &u);
  EXPECT_EQ(KindOf(st), ErrorKind::kRemote);
  EXPECT_EQ(resolver_.waited_objects(), 0u);
}

TEST_F(DependencyResolverTest, UnknownArgumentIsRefused) {
  TaskArgs& t = Task("t", {Ref("elsewhere")});
  absl::Status st = resolver_.Resolve("t", &t);
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("not owned by this driver"));
}

TEST_F(DependencyResolverTest, RefusedTaskIsNotWokenLater) {
  objects_.AddPending("a");
  TaskArgs& t = Task("t", {Ref("a"), Ref("elsewhere")});
  EXPECT_FALSE(resolver_.Resolve("t", &t).ok());
  EXPECT_EQ(resolver_.waited_objects(), 0u);
}

TEST_F(DependencyResolverTest, GoneTasksAreSkipped) {
  objects_.AddPending("a");
  TaskArgs& t = Task("t", {Ref("a")});
  ASSERT_TRUE(resolver_.Resolve("t", &t).ok());
  tasks_.erase("t");  // failed meanwhile for another reason
  Complete("a", "A");
  Done("a");
  EXPECT_THAT(ready_, IsEmpty());
  EXPECT_THAT(failed_, IsEmpty());
}

TEST_F(DependencyResolverTest, WaitAgainForARebuiltArgument) {
  proto::StoredObject so;
  so.set_object_id("s");
  objects_.AddStored("s", so);
  TaskArgs& t = Task("t", {Ref("s")});
  ASSERT_TRUE(resolver_.Resolve("t", &t).ok());
  EXPECT_EQ(t.pending, 0);
  // Every copy was lost and its maker runs again.
  objects_.MarkPending("s");
  EXPECT_TRUE(resolver_.WaitAgain("t", &t, "s"));
  EXPECT_EQ(t.pending, 1);
  Complete("s", "rebuilt inline");
  Done("s");
  EXPECT_THAT(ready_, ElementsAre("t"));
  EXPECT_THAT(t.values, ElementsAre("rebuilt inline"));
  EXPECT_TRUE(t.stored.empty());
  // Already back: taken at once.
  EXPECT_FALSE(resolver_.WaitAgain("t", &t, "s"));
}

}  // namespace
}  // namespace shoal::internal
