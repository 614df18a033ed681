#include "launch/launch_supervisor.h"

#include <deque>
#include <functional>
#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::launch {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

RankExit Exit(int rank, int code, int64_t time_us, bool stopped = false) {
  RankExit e;
  e.rank = rank;
  e.exit_code = code;
  e.description = code == 0 ? "exited 0" : "exited " + std::to_string(code);
  e.time_us = time_us;
  e.stopped = stopped;
  return e;
}

GangEvent Reported(RankExit e) {
  GangEvent ev;
  ev.kind = GangEvent::Kind::kRankExited;
  ev.rank_exit = std::move(e);
  return ev;
}

GangEvent HostEnded(int host, std::vector<RankExit> exits,
                    int num_processes = -1) {
  GangEvent ev;
  ev.kind = GangEvent::Kind::kHostEnded;
  ev.host.host_index = host;
  ev.host.address = "10.0.0." + std::to_string(host + 1);
  ev.host.num_processes =
      num_processes >= 0 ? num_processes : static_cast<int>(exits.size());
  ev.host.exits = std::move(exits);
  return ev;
}

GangEvent HostLost(int host, const std::string& node) {
  GangEvent ev = HostEnded(host, {}, 2);
  ev.host.error = "the runner on host " + std::to_string(host) +
                  " (10.0.0.2, node " + node + ") failed: its worker died";
  ev.host.lost_node = node;
  return ev;
}

// A gang whose attempts follow scripts: attempt k delivers script[k]'s
// events in order (a kNone between them when `idle`), on a clock that moves
// only when waited on.
class FakeGang : public GangControl {
 public:
  std::vector<std::deque<GangEvent>> script;
  int hosts = 2;
  bool idle = true;
  // Set StopRequested() once this many events were delivered (-1: never).
  int stop_after_events = -1;
  absl::Status place_again_result;

  std::vector<int> started;
  int stops = 0;
  std::vector<std::set<std::string>> placed_again;
  std::vector<std::string> said;
  std::vector<int64_t> slept_us;
  int64_t now_us = 1'000'000;

  int StartRanks(int attempt) override {
    started.push_back(attempt);
    pending_ = attempt < static_cast<int>(script.size())
                   ? script[attempt]
                   : std::deque<GangEvent>{};
    return hosts;
  }
  void StopRanks() override { ++stops; }
  GangEvent WaitForEvent(int64_t timeout_ms) override {
    if (idle && !idle_given_) {
      idle_given_ = true;
      now_us += timeout_ms * 1000;
      return {};
    }
    idle_given_ = false;
    // A script that ran out would hang a real launch: fail the test.
    EXPECT_FALSE(pending_.empty()) << "attempt waits for an event never sent";
    if (pending_.empty()) return HostEnded(99, {}, 0);
    GangEvent ev = pending_.front();
    pending_.pop_front();
    ++delivered_;
    return ev;
  }
  bool StopRequested() override {
    return stop_after_events >= 0 && delivered_ >= stop_after_events;
  }
  absl::Status PlaceAgain(const std::set<std::string>& lost) override {
    placed_again.push_back(lost);
    return place_again_result;
  }
  int64_t NowUs() override { return now_us; }
  void SleepUs(int64_t us) override {
    slept_us.push_back(us);
    now_us += us;
  }
  void Say(const std::string& line) override { said.push_back(line); }

 private:
  std::deque<GangEvent> pending_;
  bool idle_given_ = false;
  int delivered_ = 0;
};

// Two hosts, two ranks each.
std::deque<GangEvent> AllExitZero() {
  return {HostEnded(0, {Exit(0, 0, 10), Exit(1, 0, 11)}),
          HostEnded(1, {Exit(2, 0, 12), Exit(3, 0, 13)})};
}

// Rank 2 fails at t=20; the others are stopped after it.
std::deque<GangEvent> Rank2Fails(int code = 3) {
  return {Reported(Exit(2, code, 20)),
          HostEnded(1, {Exit(2, code, 20), Exit(3, 143, 30, true)}),
          HostEnded(0, {Exit(0, 143, 31, true), Exit(1, 143, 32, true)})};
}

TEST(LaunchSupervisorTest, AGangWhoseRanksAllExitZeroSucceedsOnce) {
  FakeGang gang;
  gang.script = {AllExitZero()};
  LaunchOutcome out = LaunchSupervisor(&gang, RestartPolicy{}, 4).Run();
  EXPECT_EQ(out.exit_code, 0);
  EXPECT_EQ(out.summary, "shoal launch: all 4 processes exited 0");
  EXPECT_EQ(out.restarts, 0);
  EXPECT_FALSE(out.stopped_by_user);
  EXPECT_THAT(gang.started, ElementsAre(0));
  EXPECT_EQ(gang.stops, 0);
  EXPECT_THAT(gang.said, IsEmpty());
}

TEST(LaunchSupervisorTest, FirstFailureStopsTheGangAndNamesTheRank) {
  FakeGang gang;
  gang.script = {Rank2Fails()};
  LaunchOutcome out = LaunchSupervisor(&gang, RestartPolicy{}, 4).Run();
  EXPECT_EQ(out.exit_code, 3);
  EXPECT_EQ(out.summary,
            "shoal launch: rank 2 failed first: exited 3; the gang was "
            "stopped");
  EXPECT_GE(gang.stops, 1);
  EXPECT_THAT(gang.started, ElementsAre(0));
}

TEST(LaunchSupervisorTest, TheEarliestFailureIsFirstWhateverOrderReportsCome) {
  FakeGang gang;
  gang.script = {{Reported(Exit(3, 7, 50)), Reported(Exit(1, 9, 40)),
                  HostEnded(0, {Exit(0, 0, 5), Exit(1, 9, 40)}),
                  HostEnded(1, {Exit(2, 0, 6), Exit(3, 7, 50)})}};
  LaunchOutcome out = LaunchSupervisor(&gang, RestartPolicy{}, 4).Run();
  EXPECT_EQ(out.exit_code, 9);
  EXPECT_THAT(out.summary, ::testing::HasSubstr("rank 1 failed first"));
}

TEST(LaunchSupervisorTest, RestartsTheWholeGangUpToTheLimit) {
  FakeGang gang;
  gang.script = {Rank2Fails(), Rank2Fails(), Rank2Fails()};
  RestartPolicy policy;
  policy.max_restarts = 2;
  LaunchOutcome out = LaunchSupervisor(&gang, policy, 4).Run();
  EXPECT_THAT(gang.started, ElementsAre(0, 1, 2));
  EXPECT_EQ(out.restarts, 2);
  EXPECT_EQ(out.exit_code, 3);
  EXPECT_EQ(out.summary,
            "shoal launch: rank 2 failed first: exited 3; the gang was "
            "stopped");
  EXPECT_THAT(
      gang.said,
      ElementsAre("shoal launch: rank 2 failed first: exited 3; the gang was "
                  "stopped; restarting the gang (restart 1 of 2)",
                  "shoal launch: rank 2 failed first: exited 3; the gang was "
                  "stopped; restarting the gang (restart 2 of 2)"));
}

TEST(LaunchSupervisorTest, ARestartThatSucceedsEndsTheLaunchWithZero) {
  FakeGang gang;
  gang.script = {Rank2Fails(), AllExitZero()};
  RestartPolicy policy;
  policy.max_restarts = 3;
  LaunchOutcome out = LaunchSupervisor(&gang, policy, 4).Run();
  EXPECT_THAT(gang.started, ElementsAre(0, 1));
  EXPECT_EQ(out.exit_code, 0);
  EXPECT_EQ(out.restarts, 1);
  EXPECT_EQ(out.summary, "shoal launch: all 4 processes exited 0");
}

TEST(LaunchSupervisorTest, ARankFailingDuringARestartCountsAgainstTheLimit) {
  // The restarted gang fails again, with another rank and code: that is the
  // failure reported, and the limit of one restart ends the launch.
  FakeGang gang;
  gang.script = {Rank2Fails(),
                 {HostEnded(0, {Exit(0, 0, 100), Exit(1, 0, 101)}),
                  Reported(Exit(3, 139, 120)),
                  HostEnded(1, {Exit(2, 143, 130, true), Exit(3, 139, 120)})}};
  RestartPolicy policy;
  policy.max_restarts = 1;
  LaunchOutcome out = LaunchSupervisor(&gang, policy, 4).Run();
  EXPECT_THAT(gang.started, ElementsAre(0, 1));
  EXPECT_EQ(out.exit_code, 139);
  EXPECT_EQ(out.summary,
            "shoal launch: rank 3 failed first: exited 139; the gang was "
            "stopped");
}

TEST(LaunchSupervisorTest, RanksStoppedWithTheirGangAreNotFailures) {
  // Every rank ended non-zero only because it was stopped (a host's runner
  // failed): the runner's error is the launch's, with exit code 1.
  FakeGang gang;
  GangEvent failed = HostEnded(1, {}, 2);
  failed.host.error = "host 1 (10.0.0.2, node n2): cannot start";
  gang.script = {
      {failed, Reported(Exit(0, 143, 40, true)),
       HostEnded(0, {Exit(0, 143, 40, true), Exit(1, 143, 41, true)})}};
  RestartPolicy policy;
  policy.max_restarts = 5;
  LaunchOutcome out = LaunchSupervisor(&gang, policy, 4).Run();
  EXPECT_EQ(out.exit_code, 1);
  EXPECT_EQ(out.summary,
            "shoal launch: host 1 (10.0.0.2, node n2): cannot start");
  EXPECT_THAT(gang.started, ElementsAre(0));
  EXPECT_GE(gang.stops, 1);
}

TEST(LaunchSupervisorTest, AnExitCodeInNoRestartOnFailsAtOnce) {
  FakeGang gang;
  gang.script = {Rank2Fails(42)};
  RestartPolicy policy;
  policy.max_restarts = 3;
  policy.no_restart_on = {42};
  LaunchOutcome out = LaunchSupervisor(&gang, policy, 4).Run();
  EXPECT_THAT(gang.started, ElementsAre(0));
  EXPECT_EQ(out.exit_code, 42);
  EXPECT_EQ(out.summary,
            "shoal launch: rank 2 failed first: exited 42; the gang was "
            "stopped (exit code 42 is in --no-restart-on: not restarted)");
}

TEST(LaunchSupervisorTest, AFailureOnlyTheRunnersResultsTellIsStillAFailure) {
  // The report of rank 1's failure was lost; its runner's result says it.
  FakeGang gang;
  gang.script = {{HostEnded(0, {Exit(0, 143, 9, true), Exit(1, 5, 8)}),
                  HostEnded(1, {Exit(2, 0, 3), Exit(3, 0, 4)})}};
  LaunchOutcome out = LaunchSupervisor(&gang, RestartPolicy{}, 4).Run();
  EXPECT_EQ(out.exit_code, 5);
  EXPECT_THAT(out.summary, ::testing::HasSubstr("rank 1 failed first"));
}

TEST(LaunchSupervisorTest, ARunnerThatLosesTrackOfItsProcessesFails) {
  FakeGang gang;
  gang.script = {{HostEnded(0, {Exit(0, 0, 1)}, 2),
                  HostEnded(1, {Exit(2, 0, 3), Exit(3, 0, 4)})}};
  LaunchOutcome out = LaunchSupervisor(&gang, RestartPolicy{}, 4).Run();
  EXPECT_EQ(out.exit_code, 1);
  EXPECT_EQ(out.summary,
            "shoal launch: the runner on host 0 (10.0.0.1) accounted for 1 of "
            "its 2 processes");
}

TEST(LaunchSupervisorTest, FewerProcessesThanExpectedFailWithTheirCount) {
  FakeGang gang;
  gang.hosts = 1;
  gang.script = {{HostEnded(0, {Exit(0, 0, 1), Exit(1, 0, 2)})}};
  LaunchOutcome out = LaunchSupervisor(&gang, RestartPolicy{}, 4).Run();
  EXPECT_EQ(out.exit_code, 1);
  EXPECT_EQ(out.summary,
            "shoal launch: 2 of 4 processes ran to their end and exited 0; "
            "the others were stopped");
}

TEST(LaunchSupervisorTest, AStopFromTheUserStopsEveryRankAndExits130) {
  FakeGang gang;
  gang.stop_after_events = 1;
  gang.script = {
      {HostEnded(0, {Exit(0, 143, 5, true), Exit(1, 143, 6, true)}),
       HostEnded(1, {Exit(2, 143, 7, true), Exit(3, 143, 8, true)})}};
  RestartPolicy policy;
  policy.max_restarts = 3;
  LaunchOutcome out = LaunchSupervisor(&gang, policy, 4).Run();
  EXPECT_EQ(out.exit_code, 130);
  EXPECT_EQ(out.summary,
            "shoal launch: interrupted; every process of the gang was "
            "stopped");
  EXPECT_TRUE(out.stopped_by_user);
  EXPECT_GE(gang.stops, 1);
  EXPECT_THAT(gang.started, ElementsAre(0));
}

TEST(LaunchSupervisorTest, AStopAfterAFailureIsNotRestarted) {
  FakeGang gang;
  gang.stop_after_events = 2;
  gang.script = {Rank2Fails()};
  RestartPolicy policy;
  policy.max_restarts = 3;
  LaunchOutcome out = LaunchSupervisor(&gang, policy, 4).Run();
  EXPECT_EQ(out.exit_code, 130);
  EXPECT_THAT(gang.started, ElementsAre(0));
}

TEST(LaunchSupervisorTest, ALostHostIsReplacedAndTheGangStartsOver) {
  FakeGang gang;
  gang.script = {{HostLost(1, "n2"),
                  HostEnded(0, {Exit(0, 143, 5, true), Exit(1, 143, 6, true)})},
                 {HostLost(0, "n3"),
                  HostEnded(1, {Exit(2, 143, 5, true), Exit(3, 143, 6, true)})},
                 AllExitZero()};
  RestartPolicy policy;
  policy.max_restarts = 2;
  LaunchOutcome out = LaunchSupervisor(&gang, policy, 4).Run();
  EXPECT_EQ(out.exit_code, 0);
  EXPECT_THAT(gang.started, ElementsAre(0, 1, 2));
  // Every node seen lost so far is avoided.
  EXPECT_THAT(gang.placed_again,
              ElementsAre(std::set<std::string>{"n2"},
                          std::set<std::string>{"n2", "n3"}));
  ASSERT_EQ(gang.said.size(), 2u);
  EXPECT_EQ(gang.said[0],
            "shoal launch: the runner on host 1 (10.0.0.2, node n2) failed: "
            "its worker died; placing the gang again (restart 1 of 2)");
}

TEST(LaunchSupervisorTest, ALostHostOfASliceFailsTheLaunch) {
  FakeGang gang;
  gang.script = {{HostLost(1, "n2"), HostEnded(0, {Exit(0, 143, 5, true),
                                                   Exit(1, 143, 6, true)})}};
  RestartPolicy policy;
  policy.max_restarts = 2;
  policy.can_place_again = false;
  LaunchOutcome out = LaunchSupervisor(&gang, policy, 4).Run();
  EXPECT_EQ(out.exit_code, 1);
  EXPECT_EQ(out.summary,
            "shoal launch: the runner on host 1 (10.0.0.2, node n2) failed: "
            "its worker died");
  EXPECT_THAT(gang.placed_again, IsEmpty());
}

TEST(LaunchSupervisorTest, AGangThatCannotBePlacedAgainSaysWhy) {
  FakeGang gang;
  gang.place_again_result =
      absl::InvalidArgumentError("asked for 2 nodes; the cluster has 1 alive");
  gang.script = {{HostLost(1, "n2"), HostEnded(0, {Exit(0, 143, 5, true),
                                                   Exit(1, 143, 6, true)})}};
  RestartPolicy policy;
  policy.max_restarts = 1;
  LaunchOutcome out = LaunchSupervisor(&gang, policy, 4).Run();
  EXPECT_EQ(out.exit_code, 1);
  EXPECT_EQ(out.summary,
            "shoal launch: the runner on host 1 (10.0.0.2, node n2) failed: "
            "its worker died; the gang cannot be placed again: asked for 2 "
            "nodes; the cluster has 1 alive");
  EXPECT_THAT(gang.started, ElementsAre(0));
}

TEST(LaunchSupervisorTest, RestartsWaitTheBackoffDoublingUpToItsMaximum) {
  FakeGang gang;
  gang.idle = false;
  gang.script = {Rank2Fails(), Rank2Fails(), Rank2Fails(), AllExitZero()};
  RestartPolicy policy;
  policy.max_restarts = 3;
  policy.backoff_us = 100'000;
  policy.max_backoff_us = 300'000;
  const int64_t start = gang.now_us;
  LaunchOutcome out = LaunchSupervisor(&gang, policy, 4).Run();
  EXPECT_EQ(out.exit_code, 0);
  // 0.1 s, 0.2 s, then 0.4 s capped at 0.3 s (slept in slices of 0.2 s).
  EXPECT_EQ(gang.now_us - start, 600'000);
  EXPECT_THAT(gang.slept_us, ElementsAre(100'000, 200'000, 200'000, 100'000));
}

TEST(LaunchSupervisorTest, WithoutBackoffRestartsDoNotWait) {
  FakeGang gang;
  gang.idle = false;
  gang.script = {Rank2Fails(), AllExitZero()};
  RestartPolicy policy;
  policy.max_restarts = 1;
  LaunchSupervisor(&gang, policy, 4).Run();
  EXPECT_THAT(gang.slept_us, IsEmpty());
}

TEST(LaunchSupervisorTest, IsRankFailureCountsOnlyNonZeroExitsOfTheirOwn) {
  EXPECT_FALSE(IsRankFailure(Exit(0, 0, 1)));
  EXPECT_TRUE(IsRankFailure(Exit(0, 1, 1)));
  EXPECT_TRUE(IsRankFailure(Exit(0, 137, 1)));
  EXPECT_FALSE(IsRankFailure(Exit(0, 143, 1, /*stopped=*/true)));
}

}  // namespace
}  // namespace shoal::launch
