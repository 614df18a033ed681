#include "head/actor_table.h"

#include <functional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "head/head_testing.h"
#include "shoal/shoal.pb.h"

namespace shoal {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

constexpr char kSignal9[] = "killed by signal 9 (Killed)";

proto::ActorSpec Spec(const std::string& id, int max_restarts = 0,
                      const std::string& name = "",
                      const std::string& job = "job1", bool detached = false) {
  proto::ActorSpec spec =
      testing::CounterActorSpec(id, max_restarts, name, job);
  spec.set_detached(detached);
  return spec;
}

ActorPlacement On(const std::string& node, const std::string& worker = "w1") {
  return {worker, "127.0.0.1:4000", node, 1234};
}

// Creates `id` and places it on `node`.
void CreateAlive(ActorTable& table, const proto::ActorSpec& spec,
                 const std::string& node = "n1") {
  ASSERT_TRUE(table.Create(spec, 0).ok());
  table.Placed(spec.actor_id(), On(node));
  ASSERT_EQ(table.Find(spec.actor_id())->state(), proto::ActorInfo::ALIVE);
}

std::vector<std::string> Ids(const std::vector<ActorAction>& actions) {
  std::vector<std::string> ids;
  for (const auto& a : actions) ids.push_back(a.actor_id);
  return ids;
}

TEST(ActorTableTest, CreateIsPendingAndAsksForAWorker) {
  ActorTable table;
  absl::StatusOr<ActorAction> action = table.Create(Spec("a1"), 5000);
  ASSERT_TRUE(action.ok()) << action.status();
  EXPECT_EQ(action->actor_id, "a1");
  EXPECT_TRUE(action->changed);
  EXPECT_TRUE(action->lease_worker);
  EXPECT_FALSE(action->release_worker);
  const ActorTable::Entry* e = table.FindEntry("a1");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->info.state(), proto::ActorInfo::PENDING);
  EXPECT_EQ(e->info.version(), 1);
  EXPECT_EQ(e->info.spec().class_name(), "Counter");
  EXPECT_EQ(e->created_us, 5000);
}

// An actor whose arguments are still coming is registered (its name held)
// but not placed; it is once they come, with them in its spec.
TEST(ActorTableTest, AnActorWhoseArgumentsAreComingIsPlacedOnceTheyCome) {
  ActorTable table;
  proto::ActorSpec spec = Spec("a1", 0, "named");
  spec.clear_args();
  spec.set_args_pending(true);
  absl::StatusOr<ActorAction> created = table.Create(spec, 0);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_TRUE(created->changed);
  EXPECT_FALSE(created->lease_worker);
  EXPECT_EQ(table.FindByName("named")->spec().actor_id(), "a1");

  proto::ActorArgs args;
  args.set_actor_id("a1");
  args.add_args("first");
  (*args.mutable_stored_args())[1].set_object_id("o1");
  args.add_args("");
  absl::StatusOr<ActorAction> ready = table.ArgsReady(args);
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_TRUE(ready->changed);
  EXPECT_TRUE(ready->lease_worker);
  const proto::ActorInfo* info = table.Find("a1");
  EXPECT_FALSE(info->spec().args_pending());
  ASSERT_EQ(info->spec().args_size(), 2);
  EXPECT_EQ(info->spec().args(0), "first");
  EXPECT_EQ(info->spec().stored_args().at(1).object_id(), "o1");
  EXPECT_EQ(info->state(), proto::ActorInfo::PENDING);

  // Told twice (a retry): nothing more.
  ready = table.ArgsReady(args);
  ASSERT_TRUE(ready.ok());
  EXPECT_FALSE(ready->changed);
  EXPECT_FALSE(ready->lease_worker);
  args.set_actor_id("nobody");
  EXPECT_EQ(table.ArgsReady(args).status().code(), absl::StatusCode::kNotFound);
}

TEST(ActorTableTest, AnArgumentThatFailedKillsTheActorWaitingForIt) {
  ActorTable table;
  proto::ActorSpec spec = Spec("a1");
  spec.set_args_pending(true);
  ASSERT_TRUE(table.Create(spec, 0).ok());
  proto::ActorArgs args;
  args.set_actor_id("a1");
  args.set_failed("f raised on node n1: ValueError: no");
  absl::StatusOr<ActorAction> failed = table.ArgsReady(args);
  ASSERT_TRUE(failed.ok());
  EXPECT_FALSE(failed->lease_worker);
  EXPECT_EQ(table.Find("a1")->state(), proto::ActorInfo::DEAD);
  EXPECT_THAT(table.Find("a1")->death_cause(),
              AllOf(HasSubstr("an argument of its constructor failed"),
                    HasSubstr("ValueError: no")));
}

// Nobody is left to send them: even a detached actor waiting for its
// arguments ends with its creator (job or actor).
TEST(ActorTableTest, AnActorWaitingForItsArgumentsEndsWithItsCreator) {
  ActorTable table;
  proto::ActorSpec by_job = Spec("a1", 0, "", "job1", /*detached=*/true);
  by_job.set_args_pending(true);
  ASSERT_TRUE(table.Create(by_job, 0).ok());
  CreateAlive(table, Spec("kept", 0, "", "job1", /*detached=*/true));
  EXPECT_THAT(Ids(table.OwnerJobEnded("job1")), UnorderedElementsAre("a1"));
  EXPECT_THAT(table.Find("a1")->death_cause(),
              HasSubstr("before the arguments of its constructor were ready"));

  proto::ActorSpec by_actor = Spec("a2", 0, "", "job2", /*detached=*/true);
  by_actor.set_owner_actor_id("owner");
  by_actor.set_args_pending(true);
  ASSERT_TRUE(table.Create(by_actor, 0).ok());
  EXPECT_THAT(Ids(table.OwnerActorEnded("owner")), UnorderedElementsAre("a2"));
  EXPECT_EQ(table.Find("kept")->state(), proto::ActorInfo::ALIVE);
}

TEST(ActorTableTest, PlacedIsAliveThere) {
  ActorTable table;
  ASSERT_TRUE(table.Create(Spec("a1"), 0).ok());
  ActorAction action = table.Placed("a1", On("n2", "w7"));
  EXPECT_TRUE(action.changed);
  EXPECT_FALSE(action.lease_worker || action.release_worker);
  const proto::ActorInfo* info = table.Find("a1");
  EXPECT_EQ(info->state(), proto::ActorInfo::ALIVE);
  EXPECT_EQ(info->node_id(), "n2");
  EXPECT_EQ(info->worker_id(), "w7");
  EXPECT_EQ(info->address(), "127.0.0.1:4000");
  EXPECT_EQ(info->pid(), 1234);
  EXPECT_EQ(info->version(), 2);
}

TEST(ActorTableTest, RetriedCreateChangesNothing) {
  ActorTable table;
  ASSERT_TRUE(table.Create(Spec("a1", 0, "counter"), 0).ok());
  absl::StatusOr<ActorAction> again = table.Create(Spec("a1", 0, "counter"), 0);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->changed || again->lease_worker || again->release_worker);
  EXPECT_EQ(table.Find("a1")->version(), 1);
}

TEST(ActorTableTest, RefusesBadSpecs) {
  struct Case {
    std::string what;
    proto::ActorSpec spec;
    std::string message;
  };
  proto::ActorSpec no_factory = Spec("a2");
  no_factory.clear_factory();
  std::vector<Case> cases = {
      {"no id", Spec(""), "an id"},
      {"no factory", no_factory, "SHOAL_REMOTE"},
      {"max_restarts -2", Spec("a3", -2), "use -1 for no limit"},
  };
  for (const Case& c : cases) {
    ActorTable table;
    absl::StatusOr<ActorAction> action = table.Create(c.spec, 0);
    EXPECT_EQ(action.status().code(), absl::StatusCode::kInvalidArgument)
        << c.what;
    EXPECT_THAT(action.status().message(), HasSubstr(c.message)) << c.what;
  }
}

TEST(ActorTableTest, ANameIsHeldByOneLiveActor) {
  ActorTable table;
  CreateAlive(table, Spec("a1", 0, "counter"));
  absl::StatusOr<ActorAction> taken = table.Create(Spec("a2", 0, "counter"), 0);
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(taken.status().message(),
              AllOf(HasSubstr("\"counter\""), HasSubstr("actor a1"),
                    HasSubstr("class Counter"), HasSubstr("pick another name"),
                    HasSubstr("GetActor(\"counter\")")));
  EXPECT_EQ(table.Find("a2"), nullptr);
  EXPECT_EQ(table.FindByName("counter")->spec().actor_id(), "a1");

  // Dead, it frees the name; the dead actor stays findable by id.
  ASSERT_TRUE(table.Kill("a1", /*no_restart=*/true).ok());
  EXPECT_EQ(table.FindByName("counter"), nullptr);
  ASSERT_TRUE(table.Create(Spec("a2", 0, "counter"), 0).ok());
  EXPECT_EQ(table.FindByName("counter")->spec().actor_id(), "a2");
  EXPECT_EQ(table.Find("a1")->state(), proto::ActorInfo::DEAD);
}

// Deaths of the actor's process, each followed by a new placement when the
// table asks for one.
TEST(ActorTableTest, RestartsUntilTheyAreUsedUp) {
  struct Case {
    int max_restarts;
    int deaths;
    proto::ActorInfo::State state;
    int num_restarts;
    std::string cause;
  };
  std::vector<Case> cases = {
      {0, 1, proto::ActorInfo::DEAD, 0,
       "its process died (killed by signal 9 (Killed)) and its restarts are "
       "used up (max_restarts=0)"},
      {1, 1, proto::ActorInfo::ALIVE, 1, kSignal9},
      {2, 2, proto::ActorInfo::ALIVE, 2, kSignal9},
      {2, 3, proto::ActorInfo::DEAD, 2,
       "its process died (killed by signal 9 (Killed)) and its restarts are "
       "used up (max_restarts=2)"},
      {-1, 7, proto::ActorInfo::ALIVE, 7, kSignal9},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "max_restarts=" << c.max_restarts
                                      << " deaths=" << c.deaths);
    ActorTable table;
    CreateAlive(table, Spec("a1", c.max_restarts));
    int64_t version = table.Find("a1")->version();
    for (int i = 0; i < c.deaths; ++i) {
      ActorAction died = table.WorkerDied("a1", kSignal9);
      EXPECT_TRUE(died.changed);
      EXPECT_FALSE(died.release_worker);
      EXPECT_EQ(table.Find("a1")->version(), ++version);
      if (!died.lease_worker) break;
      EXPECT_EQ(table.Find("a1")->state(), proto::ActorInfo::RESTARTING);
      EXPECT_TRUE(table.Find("a1")->address().empty());
      EXPECT_TRUE(
          table.Placed("a1", On("n1", "w" + std::to_string(i))).changed);
      ++version;
    }
    const proto::ActorInfo* info = table.Find("a1");
    EXPECT_EQ(info->state(), c.state);
    EXPECT_EQ(info->num_restarts(), c.num_restarts);
    EXPECT_EQ(info->death_cause(), c.cause);
  }
}

// One transition from ALIVE or PENDING: the resulting state and what the IO
// side is asked to do.
TEST(ActorTableTest, Transitions) {
  struct Case {
    std::string what;
    int max_restarts;
    bool alive;  // placed before the step; else PENDING
    std::function<absl::StatusOr<ActorAction>(ActorTable&)> step;
    proto::ActorInfo::State state;
    std::string cause;
    bool changed, release_worker, lease_worker;
    bool infeasible = false;
  };
  using T = ActorTable;
  std::vector<Case> cases = {
      {"kill no_restart", 3, true, [](T& t) { return t.Kill("a1", true); },
       proto::ActorInfo::DEAD, "killed by shoal::Kill", true, true, false},
      {"kill restarts it", 3, true, [](T& t) { return t.Kill("a1", false); },
       proto::ActorInfo::RESTARTING, "killed by shoal::Kill", true, true, true},
      {"kill without restarts left", 0, true,
       [](T& t) { return t.Kill("a1", false); }, proto::ActorInfo::DEAD,
       "killed by shoal::Kill and its restarts are used up (max_restarts=0)",
       true, true, false},
      // Its placement goes on as the restart the kill took.
      {"kill restart while pending", 3, false,
       [](T& t) { return t.Kill("a1", false); }, proto::ActorInfo::PENDING, "",
       true, false, false},
      {"kill restart while pending without restarts left", 0, false,
       [](T& t) { return t.Kill("a1", false); }, proto::ActorInfo::DEAD,
       "killed by shoal::Kill before it ran, and its restarts are used up "
       "(max_restarts=0)",
       true, true, false},
      {"kill no_restart while pending", 3, false,
       [](T& t) { return t.Kill("a1", true); }, proto::ActorInfo::DEAD,
       "killed by shoal::Kill", true, true, false},
      {"exit", 3, true, [](T& t) { return t.Exiting("a1", "w1"); },
       proto::ActorInfo::DEAD,
       "the actor exited: it called exit_actor() (shoal::ExitActor)", true,
       true, false},
      {"exit of an older worker", 3, true,
       [](T& t) { return t.Exiting("a1", "w0"); }, proto::ActorInfo::ALIVE, "",
       false, false, false},
      {"constructor raised", 3, false,
       [](T& t) { return t.ConstructorFailed("a1", "boom"); },
       proto::ActorInfo::DEAD, "the constructor raised: boom", true, true,
       false},
      {"infeasible", 3, false,
       [](T& t) { return t.Infeasible("a1", "no node has 8 GPU"); },
       proto::ActorInfo::DEAD, "no node has 8 GPU", true, true, false, true},
      {"cannot start", 3, false,
       [](T& t) { return t.CannotStart("a1", "3 TPU chips"); },
       proto::ActorInfo::DEAD, "3 TPU chips", true, true, false},
      {"worker died while pending", 0, false,
       [](T& t) { return t.WorkerDied("a1", kSignal9); },
       proto::ActorInfo::DEAD,
       "its process died (killed by signal 9 (Killed)) and its restarts are "
       "used up (max_restarts=0)",
       true, false, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ActorTable table;
    ASSERT_TRUE(table.Create(Spec("a1", c.max_restarts), 0).ok());
    if (c.alive) table.Placed("a1", On("n1", "w1"));
    int64_t version = table.Find("a1")->version();
    absl::StatusOr<ActorAction> action = c.step(table);
    ASSERT_TRUE(action.ok()) << action.status();
    EXPECT_EQ(action->actor_id, "a1");
    EXPECT_EQ(action->changed, c.changed);
    EXPECT_EQ(action->release_worker, c.release_worker);
    EXPECT_EQ(action->lease_worker, c.lease_worker);
    const proto::ActorInfo* info = table.Find("a1");
    EXPECT_EQ(info->state(), c.state);
    EXPECT_EQ(info->death_cause(), c.cause);
    EXPECT_EQ(info->infeasible(), c.infeasible);
    EXPECT_EQ(info->version(), version + (c.changed ? 1 : 0));
    if (c.state == proto::ActorInfo::DEAD) {
      EXPECT_TRUE(info->address().empty());
      EXPECT_EQ(info->pid(), 0);
    }
  }
}

TEST(ActorTableTest, AKillBeforeTheActorRunsTakesARestart) {
  ActorTable table;
  ASSERT_TRUE(table.Create(Spec("a1", 1), 0).ok());
  ASSERT_TRUE(table.Kill("a1", false).ok());
  EXPECT_EQ(table.Find("a1")->num_restarts(), 1);
  table.Placed("a1", On("n1", "w1"));
  EXPECT_EQ(table.Find("a1")->state(), proto::ActorInfo::ALIVE);
  // Its one restart is used: the next kill ends it.
  ASSERT_TRUE(table.Kill("a1", false).ok());
  EXPECT_EQ(table.Find("a1")->state(), proto::ActorInfo::DEAD);
}

TEST(ActorTableTest, ADeadActorStaysDead) {
  ActorTable table;
  CreateAlive(table, Spec("a1", -1));
  ASSERT_TRUE(table.Kill("a1", true).ok());
  int64_t version = table.Find("a1")->version();

  EXPECT_FALSE(table.WorkerDied("a1", kSignal9).changed);
  EXPECT_FALSE(table.Kill("a1", true)->changed);
  EXPECT_FALSE(table.Exiting("a1", "")->changed);
  EXPECT_FALSE(table.ConstructorFailed("a1", "boom").changed);
  // A worker granted after the actor died is nobody's: it must be ended.
  ActorAction late = table.Placed("a1", On("n1", "w9"));
  EXPECT_FALSE(late.changed);
  EXPECT_TRUE(late.release_worker);

  const proto::ActorInfo* info = table.Find("a1");
  EXPECT_EQ(info->state(), proto::ActorInfo::DEAD);
  EXPECT_EQ(info->death_cause(), "killed by shoal::Kill");
  EXPECT_EQ(info->version(), version);
}

TEST(ActorTableTest, UnknownActors) {
  ActorTable table;
  EXPECT_EQ(table.Kill("nope", true).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(table.Exiting("nope", "").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(table.WorkerDied("nope", kSignal9).changed);
  EXPECT_TRUE(table.Placed("nope", On("n1")).release_worker);
  EXPECT_EQ(table.Find("nope"), nullptr);
  EXPECT_EQ(table.FindByName("nope"), nullptr);
}

TEST(ActorTableTest, OwnerJobEndingKillsItsNonDetachedActors) {
  ActorTable table;
  CreateAlive(table, Spec("mine", 5, "", "job1"));
  CreateAlive(table, Spec("kept", 5, "service", "job1", /*detached=*/true));
  ASSERT_TRUE(table.Create(Spec("starting", 5, "", "job1"), 0).ok());
  CreateAlive(table, Spec("other", 5, "", "job2"));

  std::vector<ActorAction> actions = table.OwnerJobEnded("job1");
  EXPECT_THAT(Ids(actions), UnorderedElementsAre("mine", "starting"));
  for (const auto& a : actions) {
    EXPECT_TRUE(a.changed);
    EXPECT_TRUE(a.release_worker);
    EXPECT_FALSE(a.lease_worker);
  }
  EXPECT_EQ(table.Find("mine")->state(), proto::ActorInfo::DEAD);
  EXPECT_EQ(table.Find("mine")->death_cause(), "its owner, job1, ended");
  EXPECT_EQ(table.Find("starting")->state(), proto::ActorInfo::DEAD);
  EXPECT_EQ(table.Find("kept")->state(), proto::ActorInfo::ALIVE);
  EXPECT_EQ(table.Find("other")->state(), proto::ActorInfo::ALIVE);
  EXPECT_THAT(table.OwnerJobEnded("job1"), IsEmpty());
}

TEST(ActorTableTest, AnActorsOwnActorsEndWithItsProcess) {
  ActorTable table;
  CreateAlive(table, Spec("parent", 5));
  proto::ActorSpec child = Spec("child", 5);
  child.set_owner_actor_id("parent");
  CreateAlive(table, child);
  proto::ActorSpec service = Spec("service", 5, "", "job1", /*detached=*/true);
  service.set_owner_actor_id("parent");
  CreateAlive(table, service);
  proto::ActorSpec grandchild = Spec("grandchild", 5);
  grandchild.set_owner_actor_id("child");
  CreateAlive(table, grandchild);
  CreateAlive(table, Spec("stranger", 5));

  // The table ends only the direct children; the IO side goes on from each.
  std::vector<ActorAction> actions = table.OwnerActorEnded("parent");
  EXPECT_THAT(Ids(actions), UnorderedElementsAre("child"));
  ASSERT_EQ(actions.size(), 1u);
  EXPECT_TRUE(actions[0].release_worker);
  EXPECT_FALSE(actions[0].lease_worker);
  // Dead, restarts left or not: its owner's process is gone.
  EXPECT_EQ(table.Find("child")->state(), proto::ActorInfo::DEAD);
  EXPECT_THAT(table.Find("child")->death_cause(),
              HasSubstr("its owner, actor parent, ended"));
  EXPECT_EQ(table.Find("service")->state(), proto::ActorInfo::ALIVE);
  EXPECT_EQ(table.Find("grandchild")->state(), proto::ActorInfo::ALIVE);
  EXPECT_EQ(table.Find("stranger")->state(), proto::ActorInfo::ALIVE);
  EXPECT_THAT(Ids(table.OwnerActorEnded("child")),
              UnorderedElementsAre("grandchild"));
  EXPECT_THAT(table.OwnerActorEnded("parent"), IsEmpty());
  EXPECT_THAT(table.OwnerActorEnded(""), IsEmpty());
}

TEST(ActorTableTest, NodeDeathLosesItsActorsWorkers) {
  ActorTable table;
  CreateAlive(table, Spec("a1", 1), "n1");
  CreateAlive(table, Spec("a2", 0), "n1");
  CreateAlive(table, Spec("a3", 0), "n2");
  std::vector<ActorAction> actions = table.NodeDied("n1", "its node died");
  EXPECT_THAT(Ids(actions), UnorderedElementsAre("a1", "a2"));
  EXPECT_EQ(table.Find("a1")->state(), proto::ActorInfo::RESTARTING);
  EXPECT_EQ(table.Find("a1")->death_cause(), "its node died");
  EXPECT_EQ(table.Find("a2")->state(), proto::ActorInfo::DEAD);
  EXPECT_EQ(table.Find("a2")->death_cause(),
            "its process died (its node died) and its restarts are used up "
            "(max_restarts=0)");
  EXPECT_EQ(table.Find("a3")->state(), proto::ActorInfo::ALIVE);
}

TEST(ActorTableTest, KeepsOnlyTheLastDeadActors) {
  ActorTable table(/*max_dead_actors=*/2);
  CreateAlive(table, Spec("live"));
  for (std::string id : {"d1", "d2", "d3", "d4"}) {
    CreateAlive(table, Spec(id));
    ASSERT_TRUE(table.Kill(id, true).ok());
  }
  EXPECT_EQ(table.Find("d1"), nullptr);
  EXPECT_EQ(table.Find("d2"), nullptr);
  EXPECT_NE(table.Find("d3"), nullptr);
  EXPECT_NE(table.Find("d4"), nullptr);
  EXPECT_NE(table.Find("live"), nullptr);
  EXPECT_EQ(table.entries().size(), 3u);
}

TEST(ActorTableTest, CountsByState) {
  ActorTable table;
  CreateAlive(table, Spec("alive1"));
  CreateAlive(table, Spec("alive2"));
  ASSERT_TRUE(table.Create(Spec("pending"), 0).ok());
  CreateAlive(table, Spec("restarting", 1));
  table.WorkerDied("restarting", kSignal9);
  CreateAlive(table, Spec("dead"));
  table.WorkerDied("dead", kSignal9);
  ActorCounts counts = table.Counts();
  EXPECT_EQ(counts.alive, 2);
  EXPECT_EQ(counts.pending, 1);
  EXPECT_EQ(counts.restarting, 1);
  EXPECT_EQ(counts.dead, 1);
}

}  // namespace
}  // namespace shoal
