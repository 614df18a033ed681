// Actors end to end on real clusters: a head and node agents as separate
// processes, this test binary as the driver and, re-executed by the agents,
// as the actors' workers. Second drivers are this binary again, running one
// of the DISABLED_ tests below.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shoal/api.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::testing::ClusterSpec;
using ::shoal::testing::DriverClusterTest;
using ::shoal::testing::FakeTpuSliceTest;
using ::shoal::testing::RunCli;
using ::shoal::testing::TestCluster;
using ::testing::HasSubstr;

class Counter {
 public:
  explicit Counter(int64_t start) : n_(start) {}
  int64_t Add(int64_t x) { return n_ += x; }
  int64_t Value() const { return n_; }
  int64_t SlowAdd(int64_t ms, int64_t x) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return n_ += x;
  }
  int64_t Pid() const { return getpid(); }
  std::string Node() const { return shoal::CurrentNodeId(); }
  bool Restarted() const { return shoal::WasCurrentActorRestarted(); }
  int64_t Fail(std::string message) { throw std::runtime_error(message); }
  int64_t Exit() { shoal::ExitActor(); }
  shoal::Buffer Big(int64_t size) {
    std::vector<uint8_t> bytes(size, static_cast<uint8_t>(n_));
    return shoal::Buffer::Copy(bytes.data(), bytes.size());
  }
  // The framework variables this actor's process sees.
  std::map<std::string, std::string> Env() const {
    std::map<std::string, std::string> out;
    for (const char* name : {"TPU_VISIBLE_CHIPS", "TPU_CHIPS_PER_HOST_BOUNDS",
                             "TPU_HOST_BOUNDS"}) {
      const char* v = getenv(name);
      out[name] = v ? v : "<unset>";
    }
    out["node"] = shoal::CurrentNodeId();
    return out;
  }
  // Returns true once `n` calls are inside at the same time (false after
  // 20 s): only an actor running calls on several threads can.
  bool Meet(int64_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    ++inside_;
    cv_.notify_all();
    bool met = cv_.wait_for(lock, std::chrono::seconds(20),
                            [&] { return inside_ >= n; });
    return met;
  }

 private:
  int64_t n_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t inside_ = 0;
};

Counter* CreateCounter(int64_t start) { return new Counter(start); }
Counter* CreateBroken(int64_t) {
  throw std::runtime_error("cannot make this one");
}

// A task that calls an actor through a handle it was given.
int64_t AddThroughHandle(shoal::ActorHandle<Counter> counter, int64_t x) {
  return shoal::Get(counter.Task(&Counter::Add).Remote(x));
}
// A value that holds a handle.
struct Holder {
  std::string label;
  shoal::ActorHandle<Counter> counter;
  MSGPACK_DEFINE(label, counter);
};
int64_t AddThroughHolder(Holder holder, int64_t x) {
  return shoal::Get(holder.counter.Task(&Counter::Add).Remote(x));
}

SHOAL_REMOTE(CreateCounter, CreateBroken, &Counter::Add, &Counter::Value,
             &Counter::SlowAdd, &Counter::Pid, &Counter::Node,
             &Counter::Restarted, &Counter::Fail, &Counter::Exit, &Counter::Big,
             &Counter::Env, &Counter::Meet, AddThroughHandle, AddThroughHolder);

ClusterSpec ThreeNodes() {
  ClusterSpec spec;
  spec.nodes = {{"node-a", 2, ""},
                {"node-b", 2, R"({"remote": 1})"},
                {"node-c", 2, R"({"remote": 1})"}};
  return spec;
}

// Runs DISABLED_SecondDriver.<test> of this binary as a second driver
// process against the cluster; returns its exit code.
int RunSecondDriver(const TestCluster& cluster, const std::string& test,
                    const std::vector<std::string>& env = {}) {
  pid_t pid = fork();
  if (pid == 0) {
    cluster.ExportEnvironment();
    for (const std::string& e : env) putenv(strdup(e.c_str()));
    std::string self = shoal::SelfExecutable();
    std::string filter = "--gtest_filter=DISABLED_SecondDriver." + test;
    execl(self.c_str(), self.c_str(), "--gtest_also_run_disabled_tests",
          filter.c_str(), nullptr);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool ProcessGone(int64_t pid, int64_t within_ms) {
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(within_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (kill(static_cast<pid_t>(pid), 0) != 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return kill(static_cast<pid_t>(pid), 0) != 0;
}

class ActorTest : public DriverClusterTest {
 protected:
  void StartNodes(ClusterSpec spec = ThreeNodes()) { StartAndConnect(spec); }
};

TEST_F(ActorTest, TenThousandCallsRunInOrderAndKeepState) {
  StartNodes();
  auto counter = shoal::Actor(CreateCounter).Remote(int64_t{0});
  std::vector<shoal::ObjectRef<int64_t>> refs;
  refs.reserve(10000);
  for (int64_t i = 1; i <= 10000; ++i) {
    refs.push_back(counter.Task(&Counter::Add).Remote(int64_t{1}));
  }
  std::vector<int64_t> sums = shoal::Get(refs, 60000);
  for (int64_t i = 0; i < 10000; ++i) ASSERT_EQ(sums[i], i + 1) << i;
  EXPECT_EQ(shoal::Get(counter.Task(&Counter::Value).Remote()), 10000);
}

TEST_F(ActorTest, ArgumentsMayBeRefsAndLargeResultsGoThroughTheStore) {
  StartNodes();
  auto counter = shoal::Actor(CreateCounter).Remote(int64_t{7});
  auto five = shoal::Put(int64_t{5});
  EXPECT_EQ(shoal::Get(counter.Task(&Counter::Add).Remote(five)), 12);
  // A ref that is not ready yet holds back the calls behind it.
  auto later = shoal::Task(AddThroughHandle).Remote(counter, int64_t{100});
  shoal::Buffer big =
      shoal::Get(counter.Task(&Counter::Big).Remote(int64_t{4 << 20}), 30000);
  EXPECT_EQ(big.size(), 4u << 20);
  EXPECT_EQ(shoal::Get(later, 30000), 112);
}

TEST_F(ActorTest, MethodExceptionReachesTheCallerAndTheActorLives) {
  StartNodes();
  auto counter = shoal::Actor(CreateCounter).Remote(int64_t{1});
  try {
    shoal::Get(counter.Task(&Counter::Fail).Remote("boom"), 30000);
    FAIL() << "expected RemoteError";
  } catch (const shoal::RemoteError& e) {
    EXPECT_EQ(e.function_name(), "Counter::Fail");
    EXPECT_EQ(e.remote_message(), "boom");
  }
  EXPECT_EQ(shoal::Get(counter.Task(&Counter::Add).Remote(int64_t{1})), 2);
}

TEST_F(ActorTest, ConstructorExceptionKillsTheActorSayingWhy) {
  StartNodes();
  auto broken = shoal::Actor(CreateBroken).Remote(int64_t{1});
  try {
    shoal::Get(broken.Task(&Counter::Value).Remote(), 30000);
    FAIL() << "expected ActorDiedError";
  } catch (const shoal::ActorDiedError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot make this one"));
  }
}

TEST_F(ActorTest, NamedActorIsFoundFromASecondDriver) {
  StartNodes();
  auto counter =
      shoal::Actor(CreateCounter).SetName("counter").Remote(int64_t{5});
  EXPECT_EQ(shoal::Get(counter.Task(&Counter::Value).Remote()), 5);
  EXPECT_FALSE(shoal::GetActor<Counter>("no-such-actor").has_value());
  // A second live actor cannot take the name.
  EXPECT_THROW(
      shoal::Actor(CreateCounter).SetName("counter").Remote(int64_t{0}),
      shoal::Error);
  EXPECT_EQ(RunSecondDriver(*cluster_, "AddsOneToCounter"), 0);
  EXPECT_EQ(shoal::Get(counter.Task(&Counter::Value).Remote()), 6);
}

TEST_F(ActorTest, HandlesPassToTasksAndInsideValues) {
  StartNodes();
  auto counter = shoal::Actor(CreateCounter).Remote(int64_t{0});
  EXPECT_EQ(shoal::Get(shoal::Task(AddThroughHandle).Remote(counter, 2), 30000),
            2);
  Holder holder{"h", counter};
  EXPECT_EQ(shoal::Get(shoal::Task(AddThroughHolder).Remote(holder, 3), 30000),
            5);
  EXPECT_EQ(shoal::Get(counter.Task(&Counter::Value).Remote()), 5);
}

TEST_F(ActorTest, KillNineRestartsTheActorFromItsConstructor) {
  StartNodes();
  auto counter =
      shoal::Actor(CreateCounter).SetMaxRestarts(2).Remote(int64_t{100});
  EXPECT_EQ(shoal::Get(counter.Task(&Counter::Add).Remote(int64_t{5})), 105);
  EXPECT_FALSE(shoal::Get(counter.Task(&Counter::Restarted).Remote()));
  int64_t pid = shoal::Get(counter.Task(&Counter::Pid).Remote());
  ASSERT_EQ(kill(static_cast<pid_t>(pid), SIGKILL), 0);
  ASSERT_TRUE(ProcessGone(pid, 5000));
  // The next calls reach the new instance: state reset to the constructor's.
  EXPECT_EQ(shoal::Get(counter.Task(&Counter::Value).Remote(), 30000), 100);
  EXPECT_TRUE(shoal::Get(counter.Task(&Counter::Restarted).Remote()));
  EXPECT_NE(shoal::Get(counter.Task(&Counter::Pid).Remote()), pid);
}

TEST_F(ActorTest, CallInFlightIsRetriedOnTheRestartedActor) {
  StartNodes();
  auto retried = shoal::Actor(CreateCounter)
                     .SetMaxRestarts(1)
                     .SetMaxTaskRetries(1)
                     .Remote(int64_t{0});
  auto not_retried =
      shoal::Actor(CreateCounter).SetMaxRestarts(1).Remote(int64_t{0});
  int64_t pid1 = shoal::Get(retried.Task(&Counter::Pid).Remote());
  int64_t pid2 = shoal::Get(not_retried.Task(&Counter::Pid).Remote());
  // In flight when the processes die.
  auto a = retried.Task(&Counter::SlowAdd).Remote(int64_t{1500}, int64_t{1});
  auto b = not_retried.Task(&Counter::SlowAdd).Remote(int64_t{1500}, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_EQ(kill(static_cast<pid_t>(pid1), SIGKILL), 0);
  ASSERT_EQ(kill(static_cast<pid_t>(pid2), SIGKILL), 0);
  auto after = retried.Task(&Counter::Add).Remote(int64_t{10});
  // Sent again to the new instance, and still ahead of the later call.
  EXPECT_EQ(shoal::Get(a, 30000), 1);
  EXPECT_EQ(shoal::Get(after, 30000), 11);
  try {
    shoal::Get(b, 30000);
    FAIL() << "expected ActorDiedError";
  } catch (const shoal::ActorDiedError& e) {
    EXPECT_THAT(e.what(), HasSubstr("SetMaxTaskRetries"));
  }
  // The restarted actor takes new calls.
  EXPECT_EQ(
      shoal::Get(not_retried.Task(&Counter::Add).Remote(int64_t{2}), 30000), 2);
}

TEST_F(ActorTest, RestartsUsedUpFailCallsAtOnceNamingTheCause) {
  StartNodes();
  auto counter =
      shoal::Actor(CreateCounter).SetName("fragile").Remote(int64_t{0});
  int64_t pid = shoal::Get(counter.Task(&Counter::Pid).Remote());
  ASSERT_EQ(kill(static_cast<pid_t>(pid), SIGKILL), 0);
  ASSERT_TRUE(ProcessGone(pid, 5000));
  auto start = std::chrono::steady_clock::now();
  try {
    shoal::Get(counter.Task(&Counter::Value).Remote(), 30000);
    FAIL() << "expected ActorDiedError";
  } catch (const shoal::ActorDiedError& e) {
    EXPECT_THAT(e.what(), HasSubstr("fragile"));
    EXPECT_THAT(e.what(), HasSubstr("killed by signal 9"));
  }
  auto took = std::chrono::steady_clock::now() - start;
  std::cout
      << "restarts used up: the call failed after "
      << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
      << " ms\n";
  // Every later call fails too, and a dead actor's name is free again.
  EXPECT_THROW(shoal::Get(counter.Task(&Counter::Value).Remote(), 30000),
               shoal::ActorDiedError);
  EXPECT_FALSE(shoal::GetActor<Counter>("fragile").has_value());
}

TEST_F(ActorTest, KillEndsTheActorForGood) {
  StartNodes();
  auto counter =
      shoal::Actor(CreateCounter).SetMaxRestarts(5).Remote(int64_t{0});
  int64_t pid = shoal::Get(counter.Task(&Counter::Pid).Remote());
  counter.Kill(/*no_restart=*/true);
  EXPECT_TRUE(ProcessGone(pid, 5000));
  try {
    shoal::Get(counter.Task(&Counter::Value).Remote(), 30000);
    FAIL() << "expected ActorDiedError";
  } catch (const shoal::ActorDiedError& e) {
    EXPECT_THAT(e.what(), HasSubstr("shoal::Kill"));
  }
}

TEST_F(ActorTest, ExitActorEndsItAfterTheCall) {
  StartNodes();
  auto counter =
      shoal::Actor(CreateCounter).SetMaxRestarts(5).Remote(int64_t{0});
  int64_t pid = shoal::Get(counter.Task(&Counter::Pid).Remote());
  EXPECT_THROW(shoal::Get(counter.Task(&Counter::Exit).Remote(), 30000),
               shoal::ActorDiedError);
  EXPECT_TRUE(ProcessGone(pid, 5000));
  try {
    shoal::Get(counter.Task(&Counter::Value).Remote(), 30000);
    FAIL() << "expected ActorDiedError";
  } catch (const shoal::ActorDiedError& e) {
    EXPECT_THAT(e.what(), HasSubstr("ExitActor"));
  }
}

TEST_F(ActorTest, ActorOfAKilledNodeComesBackOnAnother) {
  StartNodes();
  auto counter = shoal::Actor(CreateCounter)
                     .SetResource("remote", 1)
                     .SetMaxRestarts(1)
                     .SetMaxTaskRetries(1)
                     .Remote(int64_t{0});
  std::string first = shoal::Get(counter.Task(&Counter::Node).Remote(), 30000);
  ASSERT_TRUE(first == "node-b" || first == "node-c") << first;
  int64_t pid = shoal::Get(counter.Task(&Counter::Pid).Remote());
  cluster_->KillAgent(first == "node-b" ? 1 : 2);
  // Its worker ends with its agent; a call made meanwhile is retried on the
  // new instance.
  ASSERT_TRUE(ProcessGone(pid, 10000));
  std::string second = shoal::Get(counter.Task(&Counter::Node).Remote(), 60000);
  EXPECT_NE(second, first);
  EXPECT_TRUE(second == "node-b" || second == "node-c") << second;
}

TEST_F(ActorTest, ConcurrencyRunsCallsOnThatManyThreads) {
  StartNodes();
  auto threaded =
      shoal::Actor(CreateCounter).SetMaxConcurrency(4).Remote(int64_t{0});
  std::vector<shoal::ObjectRef<bool>> refs;
  for (int i = 0; i < 4; ++i) {
    refs.push_back(threaded.Task(&Counter::Meet).Remote(int64_t{4}));
  }
  for (bool met : shoal::Get(refs, 60000)) EXPECT_TRUE(met);
}

TEST_F(ActorTest, NonDetachedActorsEndWithTheirDriver) {
  StartNodes();
  std::string file = cluster_->root() + "/actor_pid";
  ASSERT_EQ(RunSecondDriver(*cluster_, "MakesActorsAndExits",
                            {"ACTOR_PID_FILE=" + file}),
            0);
  int64_t plain = 0, detached = 0;
  std::ifstream(file) >> plain >> detached;
  ASSERT_GT(plain, 0);
  ASSERT_GT(detached, 0);
  EXPECT_TRUE(ProcessGone(plain, 2000))
      << "the non-detached actor outlived its driver";
  // The detached one lives on, with its state, until killed.
  EXPECT_FALSE(ProcessGone(detached, 500));
  auto keeper = shoal::GetActor<Counter>("keeper");
  ASSERT_TRUE(keeper.has_value());
  EXPECT_EQ(shoal::Get(keeper->Task(&Counter::Value).Remote(), 30000), 42);
  keeper->Kill();
  EXPECT_TRUE(ProcessGone(detached, 5000));
}

TEST_F(ActorTest, ActorThatFitsNoNodeFailsAsInfeasible) {
  StartNodes();
  auto huge = shoal::Actor(CreateCounter)
                  .SetResource("no_such_thing", 1)
                  .Remote(int64_t{0});
  EXPECT_THROW(shoal::Get(huge.Task(&Counter::Value).Remote(), 60000),
               shoal::InfeasibleError);
}

TEST_F(ActorTest, WaitingActorIsADemandAndStatusCountsActors) {
  StartNodes();
  auto a = shoal::Actor(CreateCounter).SetName("a").Remote(int64_t{0});
  auto b = shoal::Actor(CreateCounter).Remote(int64_t{0});
  shoal::Get(a.Task(&Counter::Value).Remote(), 30000);
  shoal::Get(b.Task(&Counter::Value).Remote(), 30000);
  b.Kill();
  // Holds both of node-b's and node-c's "remote": the third waits.
  auto c1 = shoal::Actor(CreateCounter).SetResource("remote", 1).Remote(1);
  auto c2 = shoal::Actor(CreateCounter).SetResource("remote", 1).Remote(1);
  shoal::Get(c1.Task(&Counter::Value).Remote(), 30000);
  shoal::Get(c2.Task(&Counter::Value).Remote(), 30000);
  auto waiting = shoal::Actor(CreateCounter).SetResource("remote", 1).Remote(1);
  std::string out;
  bool saw = false;
  for (int i = 0; i < 50 && !saw; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    out.clear();
    ASSERT_EQ(RunCli({"status", "--address", cluster_->address(), "--token",
                      cluster_->token()},
                     &out),
              0)
        << out;
    saw = out.find("3 alive") != std::string::npos &&
          out.find("1 dead") != std::string::npos &&
          out.find("1 pending") != std::string::npos;
  }
  EXPECT_TRUE(saw) << out;
  EXPECT_THAT(out, HasSubstr("remote"));  // the waiting actor's demand
  c1.Kill();
  EXPECT_EQ(shoal::Get(waiting.Task(&Counter::Value).Remote(), 30000), 1);
}

// An actor killed while it waits for room takes its lease request back from
// the node that queued it: the demand goes at once, and no worker starts for
// it when room comes.
TEST_F(ActorTest, KillingAWaitingActorWithdrawsItsDemand) {
  StartNodes();
  auto c1 = shoal::Actor(CreateCounter).SetResource("remote", 1).Remote(1);
  auto c2 = shoal::Actor(CreateCounter).SetResource("remote", 1).Remote(1);
  shoal::Get(c1.Task(&Counter::Value).Remote(), 30000);
  shoal::Get(c2.Task(&Counter::Value).Remote(), 30000);
  auto waiting = shoal::Actor(CreateCounter).SetResource("remote", 1).Remote(1);
  auto demands = [&] {
    std::string out;
    EXPECT_EQ(RunCli({"status", "--address", cluster_->address(), "--token",
                      cluster_->token(), "--format", "json"},
                     &out),
              0)
        << out;
    return nlohmann::json::parse(out, nullptr, false)["demands"].size();
  };
  // True once `holds` does, polled for 5 s at most.
  auto within_5s = [](const std::function<bool()>& holds) {
    for (int i = 0; i < 50; ++i) {
      if (holds()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  };
  ASSERT_TRUE(within_5s([&] { return demands() == 1; }));
  waiting.Kill();
  EXPECT_TRUE(within_5s([&] { return demands() == 0; }));
  // Room again: it stays free.
  c1.Kill();
  EXPECT_TRUE(
      within_5s([] { return shoal::AvailableResources()["remote"] == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(shoal::AvailableResources()["remote"], 1);
}

class TpuActorTest : public FakeTpuSliceTest {
 protected:
  void TearDown() override {
    shoal::Shutdown();
    FakeTpuSliceTest::TearDown();
  }
};

TEST_F(TpuActorTest, OneActorPerHostOfAV5p16HoldsItsFourChips) {
  StartSlice("v5p-16", 2, 2);
  cluster_->Connect();
  std::vector<shoal::ActorHandle<Counter>> hosts;
  for (int i = 0; i < 2; ++i) {
    hosts.push_back(
        shoal::Actor(CreateCounter).SetResource("TPU", 4).Remote(int64_t{i}));
  }
  std::set<std::string> nodes;
  for (auto& host : hosts) {
    auto env = shoal::Get(host.Task(&Counter::Env).Remote(), 60000);
    EXPECT_EQ(env.at("TPU_VISIBLE_CHIPS"), "0,1,2,3");
    EXPECT_EQ(env.at("TPU_CHIPS_PER_HOST_BOUNDS"), "<unset>");
    EXPECT_EQ(env.at("TPU_HOST_BOUNDS"), "<unset>");
    nodes.insert(env.at("node"));
  }
  EXPECT_EQ(nodes, (std::set<std::string>{"tpu-0", "tpu-1"}));
}

// ---- Second drivers (run by the tests above, not on their own) ----

TEST(DISABLED_SecondDriver, AddsOneToCounter) {
  shoal::Init();
  auto counter = shoal::GetActor<Counter>("counter");
  ASSERT_TRUE(counter.has_value());
  EXPECT_EQ(shoal::Get(counter->Task(&Counter::Add).Remote(int64_t{1})), 6);
  shoal::Shutdown();
}

TEST(DISABLED_SecondDriver, MakesActorsAndExits) {
  shoal::Init();
  auto plain = shoal::Actor(CreateCounter).Remote(int64_t{0});
  auto keeper = shoal::Actor(CreateCounter)
                    .SetName("keeper")
                    .SetLifetime(shoal::Lifetime::kDetached)
                    .Remote(int64_t{40});
  shoal::Get(keeper.Task(&Counter::Add).Remote(int64_t{2}));
  std::ofstream(getenv("ACTOR_PID_FILE"))
      << shoal::Get(plain.Task(&Counter::Pid).Remote()) << " "
      << shoal::Get(keeper.Task(&Counter::Pid).Remote()) << "\n";
  // Exits without Shutdown: the job ends with the process.
  std::_Exit(0);
}

}  // namespace
