// The workload that head-restart tests kill the head in the middle of, and
// what they check once a head is back: a key-value entry, a named
// STRICT_SPREAD placement group of two bundles, a submitted job that
// prints ten lines over 3 s, a named detached actor and an ordinary one
// holding state, and a `shoal launch` gang that runs through the outage.
// The calling process must be connected to the cluster
// as a driver; include this header in one file of a test binary (it
// registers the actor's factory and methods). Each node needs 4 CPUs.
#ifndef SHOAL_TESTS_TESTING_RESTART_WORKLOAD_H_
#define SHOAL_TESTS_TESTING_RESTART_WORKLOAD_H_

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "head_client/head_client.h"
#include "rpc/event_loop.h"
#include "shoal/api.h"
#include "tests/testing/test_cluster.h"

namespace shoal::testing {

class Tally {
 public:
  explicit Tally(int64_t start) : n_(start) {}
  int64_t Add(int64_t x) { return n_ += x; }
  int64_t Pid() const { return getpid(); }

 private:
  int64_t n_;
};
inline Tally* CreateTally(int64_t start) { return new Tally(start); }
// A task that runs through the outage, and one that shows the cluster is
// usable again.
inline int64_t SleepThenSquare(int64_t ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms * ms;
}
inline int64_t Square(int64_t x) { return x * x; }

// How long a test waits for a result across an outage before it fails
// (rather than waiting for ctest's timeout).
constexpr int64_t kResultTimeoutMs = 120000;
SHOAL_REMOTE(CreateTally, &Tally::Add, &Tally::Pid, SleepThenSquare, Square);

class RestartWorkload {
 public:
  explicit RestartWorkload(const TestCluster* cluster) : cluster_(cluster) {}
  ~RestartWorkload() {
    if (launcher_ <= 0) return;  // a test that ended early
    kill(launcher_, SIGKILL);
    std::string ignored;
    FinishCli(launcher_, launcher_fd_, &ignored);
  }
  RestartWorkload(const RestartWorkload&) = delete;
  RestartWorkload& operator=(const RestartWorkload&) = delete;

  // Before the kill (use with ASSERT_NO_FATAL_FAILURE).
  void Start() {
    ASSERT_TRUE(KvPut("rendezvous/group-1", "10.0.0.1:29500").ok());
    PlacementGroupOptions pg;
    pg.name = "kept-group";
    pg.bundles = {{{"CPU", 1}}, {{"CPU", 1}}};
    pg.strategy = PlacementStrategy::kStrictSpread;
    PlacementGroup group = CreatePlacementGroup(pg);
    ASSERT_TRUE(group.Wait(10000));
    group_id_ = group.id();
    bundle_nodes_ = group.BundleNodes();
    std::string out;
    ASSERT_EQ(RunCli({"job", "submit", "--no-wait", "--submission-id",
                      "long-job", "--", "sh", "-c",
                      "for i in 1 2 3 4 5 6 7 8 9 10; do echo line $i; sleep "
                      "0.3; done"},
                     &out, Env()),
              0)
        << out;
    tally_ = Actor(CreateTally)
                 .SetName("kept-tally")
                 .SetLifetime(Lifetime::kDetached)
                 .Remote(int64_t{100});
    ASSERT_EQ(
        Get(tally_.Task(&Tally::Add).Remote(int64_t{1}), kResultTimeoutMs),
        101);
    tally_pid_ = Get(tally_.Task(&Tally::Pid).Remote(), kResultTimeoutMs);
    owned_ = Actor(CreateTally).Remote(int64_t{0});
    ASSERT_EQ(
        Get(owned_.Task(&Tally::Add).Remote(int64_t{5}), kResultTimeoutMs), 5);
    launcher_ = StartCli({"launch", "--per-device", "--nodes", "1",
                          "--nproc-per-node", "2", "--max-restarts", "1", "--",
                          "sh", "-c", "sleep 3; echo rank $RANK done"},
                         &launcher_fd_, Env());
    ASSERT_GT(launcher_, 0);
    for (int i = 0; i < 100; ++i) {
      ASSERT_EQ(RunCli({"list", "gangs", "--format", "json"}, &out, Env()), 0);
      if (out.find("RUNNING") != std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_THAT(out, ::testing::HasSubstr("RUNNING")) << out;
  }

  // Once a head is back: the entry, the group (on the same nodes), the
  // job's whole log, each line once, and its end; the actors in the same
  // processes with their state, the named one found by name; the gang
  // listed through the restart and ending as it should.
  void ExpectIntact() {
    auto kv = KvGet("rendezvous/group-1");
    ASSERT_TRUE(kv.ok()) << kv.status();
    EXPECT_TRUE(kv->found());
    EXPECT_EQ(kv->value(), "10.0.0.1:29500");
    std::optional<PlacementGroup> again = GetPlacementGroup("kept-group");
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(again->id(), group_id_);
    EXPECT_EQ(again->BundleNodes(), bundle_nodes_);
    std::string out;
    ASSERT_EQ(RunCli({"job", "logs", "--follow", "long-job"}, &out, Env()), 0)
        << out;
    for (int i = 1; i <= 10; ++i) {
      EXPECT_THAT(out, ::testing::HasSubstr(absl::StrCat("line ", i, "\n")))
          << out;
    }
    // Not twice: reports sent again are not written again.
    EXPECT_EQ(out.find("line 1\n"), out.rfind("line 1\n")) << out;
    EXPECT_THAT(out, ::testing::HasSubstr("SUCCEEDED"));

    EXPECT_EQ(
        Get(tally_.Task(&Tally::Add).Remote(int64_t{1}), kResultTimeoutMs),
        102);
    EXPECT_EQ(
        Get(owned_.Task(&Tally::Add).Remote(int64_t{5}), kResultTimeoutMs), 10);
    auto found = GetActor<Tally>("kept-tally");
    ASSERT_TRUE(found.has_value());
    EXPECT_EQ(Get(found->Task(&Tally::Pid).Remote(), kResultTimeoutMs),
              tally_pid_);
    ASSERT_EQ(RunCli({"list", "actors", "--format", "json"}, &out, Env()), 0);
    EXPECT_THAT(out, ::testing::HasSubstr("kept-tally")) << out;

    ASSERT_EQ(RunCli({"list", "gangs", "--format", "json"}, &out, Env()), 0);
    EXPECT_THAT(out, ::testing::HasSubstr("sleep 3")) << out;
    std::string gang_out;
    EXPECT_EQ(FinishCli(launcher_, launcher_fd_, &gang_out), 0) << gang_out;
    launcher_ = -1;
    EXPECT_THAT(gang_out, ::testing::HasSubstr("rank 1 done")) << gang_out;
    ASSERT_EQ(RunCli({"list", "gangs", "--format", "json"}, &out, Env()), 0);
    EXPECT_THAT(out, ::testing::HasSubstr("SUCCEEDED")) << out;
  }

  std::vector<std::string> Env() const {
    return {"SHOAL_ADDRESS=" + cluster_->address(),
            "SHOAL_TOKEN=" + cluster_->token()};
  }

  absl::Status KvPut(const std::string& key, const std::string& value) const {
    proto::KvPutRequest put;
    put.set_key(key);
    put.set_value(value);
    return AskHead<proto::KvPutReply>(
               [&](rpc::HeadClient& h) { return h.KvPut(put); })
        .status();
  }
  absl::StatusOr<proto::KvGetReply> KvGet(const std::string& key) const {
    proto::KvGetRequest get;
    get.set_key(key);
    return AskHead<proto::KvGetReply>(
        [&](rpc::HeadClient& h) { return h.KvGet(get); });
  }

 private:
  // `ask` of a client of the head.
  template <typename Reply>
  absl::StatusOr<Reply> AskHead(
      const std::function<absl::StatusOr<Reply>(rpc::HeadClient&)>& ask) const {
    auto loop = rpc::EventLoop::Create("test-kv");
    if (!loop.ok()) return loop.status();
    absl::StatusOr<Reply> reply;
    {
      rpc::HeadClient head(loop->get(), cluster_->address(), cluster_->token(),
                           "test");
      reply = ask(head);
    }
    (*loop)->Stop();
    return reply;
  }

  const TestCluster* cluster_;
  std::string group_id_;
  std::vector<std::string> bundle_nodes_;
  ActorHandle<Tally> tally_;
  ActorHandle<Tally> owned_;
  int64_t tally_pid_ = 0;
  pid_t launcher_ = -1;  // `shoal launch`, until ExpectIntact reaps it
  int launcher_fd_ = -1;
};

}  // namespace shoal::testing

#endif  // SHOAL_TESTS_TESTING_RESTART_WORKLOAD_H_
