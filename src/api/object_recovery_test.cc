#include "api/object_recovery.h"

#include "api/task_error.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::internal {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<TaskEntry> Maker(const std::string& id, int retries,
                                 const std::string& actor = "") {
  auto t = std::make_unique<TaskEntry>();
  t->id = id;
  t->function = "MakeBig";
  t->retries_left = retries;
  t->actor_id = actor;
  return t;
}

TEST(ObjectRecoveryTest, RebuildTakesTheMakerAndChargesARetry) {
  ObjectRecovery recovery;
  recovery.Keep(Maker("o1", 2));
  auto task = recovery.TakeForRebuild("o1");
  ASSERT_TRUE(task.ok()) << task.status();
  EXPECT_EQ((*task)->retries_left, 1);
  EXPECT_EQ((*task)->attempt, 1);
  EXPECT_EQ(recovery.size(), 0u);  // kept again once it completes
}

TEST(ObjectRecoveryTest, PutObjectsCannotBeRebuilt) {
  ObjectRecovery recovery;
  auto task = recovery.TakeForRebuild("put-1");
  ASSERT_FALSE(task.ok());
  EXPECT_EQ(KindOf(task.status()), ErrorKind::kObjectLost);
  EXPECT_THAT(task.status().message(), HasSubstr("shoal::Put"));
}

TEST(ObjectRecoveryTest, NoRetryLeftSaysHowToAllowIt) {
  ObjectRecovery recovery;
  recovery.Keep(Maker("o1", 0));
  auto task = recovery.TakeForRebuild("o1");
  ASSERT_FALSE(task.ok());
  EXPECT_THAT(task.status().message(), HasSubstr("MakeBig"));
  EXPECT_THAT(task.status().message(), HasSubstr("SetMaxRetries"));
  EXPECT_EQ(recovery.size(), 1u);  // still there for the object's life
}

TEST(ObjectRecoveryTest, ActorCallsAreNotKept) {
  ObjectRecovery recovery;
  recovery.Keep(Maker("o1", 3, "actor-1"));
  EXPECT_EQ(recovery.size(), 0u);
}

TEST(ObjectRecoveryTest, ForgottenWithItsObject) {
  ObjectRecovery recovery;
  recovery.Keep(Maker("o1", 3));
  recovery.Keep(Maker("o2", 3));
  recovery.Forget("o1");
  EXPECT_EQ(recovery.size(), 1u);
  EXPECT_FALSE(recovery.TakeForRebuild("o1").ok());
  auto all = recovery.TakeAll();
  EXPECT_EQ(all.size(), 1u);
  EXPECT_EQ(recovery.size(), 0u);
}

}  // namespace
}  // namespace shoal::internal
