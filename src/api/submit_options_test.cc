// Task and actor options, checked and turned into shapes and specs.
#include "api/submit_options.h"

#include "api/task_error.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::internal {
namespace {

using ::testing::HasSubstr;

TEST(SubmitOptionsTest, WorkersRunThisProgramOrACommand) {
  EXPECT_TRUE(CheckWorkersRun(true, WorkerCommand(), "f").ok());
  EXPECT_TRUE(CheckWorkersRun(false, {{"python3"}, {}}, "f").ok());
  absl::Status none = CheckWorkersRun(false, WorkerCommand(), "my_fn");
  EXPECT_THAT(none.message(), HasSubstr("cannot run my_fn"));
  EXPECT_THAT(none.message(), HasSubstr("cannot be its workers"));
}

TEST(SubmitOptionsTest, ATaskTakesOneCpuUnlessItSaysOtherwise) {
  auto shape = TaskShape("f", TaskOptions());
  ASSERT_TRUE(shape.ok()) << shape.status();
  EXPECT_EQ(*shape, *ResourceSet::FromDoubles({{"CPU", 1}}));
  TaskOptions gpu;
  gpu.resources = {{"GPU", 1}, {"CPU", 0.5}};
  shape = TaskShape("f", gpu);
  ASSERT_TRUE(shape.ok());
  EXPECT_EQ(*shape, *ResourceSet::FromDoubles({{"GPU", 1}, {"CPU", 0.5}}));
}

TEST(SubmitOptionsTest, InABundleResourcesAreTheBundles) {
  auto shape = ShapeFor({{"CPU", 2}, {"GPU", 0}}, "pg1", 3);
  ASSERT_TRUE(shape.ok());
  EXPECT_EQ(*shape, *ResourceSet::FromDoubles(
                        {{"CPU_group_3_pg1", 2}, {"CPU_group_pg1", 2}}));
  // Any bundle: the group's resources alone.
  shape = ShapeFor({{"CPU", 2}}, "pg1", -1);
  ASSERT_TRUE(shape.ok());
  EXPECT_EQ(*shape, *ResourceSet::FromDoubles({{"CPU_group_pg1", 2}}));
}

TEST(SubmitOptionsTest, BadTaskOptionsSaySo) {
  TaskOptions retries;
  retries.max_retries = -1;
  EXPECT_THAT(TaskShape("f", retries).status().message(),
              HasSubstr("max_retries must be 0 or more"));
  TaskOptions negative;
  negative.resources = {{"CPU", -1}};
  EXPECT_THAT(TaskShape("f", negative).status().message(),
              HasSubstr("bad resources for task f"));
}

TEST(SubmitOptionsTest, AnActorSpecCarriesItsOptions) {
  ActorOptions options;
  options.name = "counter";
  options.max_restarts = 2;
  options.max_task_retries = -1;
  options.max_concurrency = 4;
  options.detached = true;
  options.resources = {{"CPU", 1}};
  auto spec = ActorSpecFor("make_counter", "ns::Counter", options);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "counter");
  EXPECT_EQ(spec->factory(), "make_counter");
  EXPECT_EQ(spec->class_name(), "ns::Counter");
  EXPECT_EQ(spec->max_restarts(), 2);
  EXPECT_EQ(spec->max_task_retries(), -1);
  EXPECT_EQ(spec->max_concurrency(), 4);
  EXPECT_TRUE(spec->detached());
  EXPECT_TRUE(spec->actor_id().empty());
}

// A detached actor needs no name: its creator keeps its handle, and it
// lives on after its job (shoal::Kill ends it).
TEST(SubmitOptionsTest, UnnamedDetachedActor) {
  ActorOptions options;
  options.detached = true;
  auto spec = ActorSpecFor("f", "ns::A", options);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->detached());
  EXPECT_TRUE(spec->name().empty());
}

TEST(SubmitOptionsTest, BadActorOptionsNameTheFix) {
  struct Case {
    ActorOptions options;
    const char* says;
  };
  ActorOptions concurrency;
  concurrency.max_concurrency = 0;
  ActorOptions restarts;
  restarts.max_restarts = -2;
  ActorOptions bundle;
  bundle.placement_group_id = "pg";
  ActorOptions resources;
  resources.resources = {{"CPU", -3}};
  for (const Case& c : {Case{concurrency, "at least 1 call at a time"},
                        Case{restarts, "-1 for no limit"},
                        Case{bundle, "say which with SetResources"},
                        Case{resources, "bad resources for actor ns::A"}}) {
    auto spec = ActorSpecFor("f", "ns::A", c.options);
    ASSERT_FALSE(spec.ok()) << c.says;
    EXPECT_THAT(spec.status().message(), HasSubstr(c.says));
  }
}

}  // namespace
}  // namespace shoal::internal
