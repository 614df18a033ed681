// The chaos tier: a cluster under load while its parts are killed, as Ray's
// chaos tests do. For SHOAL_CHAOS_SECONDS (default 300) a driver runs, in
// rounds, tasks with retries, objects made on one node and read on others,
// and calls to actors that restart; beside it `shoal launch` gangs with
// --max-restarts run one after another. Meanwhile a random node agent (not
// the head's node) is killed with SIGKILL every SHOAL_CHAOS_KILL_EVERY_S
// (default 10) and a new node joins in its place, and the head is killed
// and started again twice (at a third and two thirds of the run).
//
// It passes when no result is wrong, no retryable work is lost (every task
// and actor call may be retried: each must succeed), every failure is a
// typed shoal::Error, the gangs all succeed, and at the end every store is
// empty and no process is left. It prints what it did.
//
//   SHOAL_CHAOS_SECONDS       how long the load runs (default 300)
//   SHOAL_CHAOS_KILL_EVERY_S  seconds between agent kills (default 10)
//   SHOAL_CHAOS_SEED          the seed of the kills (default: random; printed)
//
// scripts/test runs a short form (60 s); scripts/chaos the full one.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <typeinfo>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "shoal/api.h"
#include "shoal/init.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/held.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::testing::ClusterSpec;
using ::shoal::testing::NodeSpec;
using ::shoal::testing::RunCli;
using ::shoal::testing::TestCluster;
using Clock = std::chrono::steady_clock;

constexpr size_t kBlobBytes = 256 << 10;  // above the inline threshold
constexpr int kRetries = 1000;            // retryable work is never lost
constexpr int64_t kRoundTimeoutMs = 180000;

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = getenv(name);
  return v != nullptr && *v != '\0' ? atoll(v) : fallback;
}

// ---- The remote side ----

int64_t Compute(int64_t x) {
  std::this_thread::sleep_for(std::chrono::milliseconds(20 + x % 30));
  return x * x + 7;
}
uint64_t Fill(int64_t seed) {
  return static_cast<uint64_t>(seed) * 2654435761u + 1;
}
// A blob made where the task runs (in that node's store).
shoal::Buffer MakeBlob(int64_t seed) {
  std::vector<uint64_t> words(kBlobBytes / 8);
  for (size_t i = 0; i < words.size(); ++i) words[i] = Fill(seed) + i;
  return shoal::Buffer::Copy(words.data(), kBlobBytes);
}
uint64_t Checksum(shoal::Buffer blob) {
  uint64_t sum = 0;
  for (uint64_t w : blob.As<uint64_t>()) sum = sum * 31 + w;
  return sum;
}
uint64_t ExpectedChecksum(int64_t seed) {
  uint64_t sum = 0;
  for (size_t i = 0; i < kBlobBytes / 8; ++i) sum = sum * 31 + Fill(seed) + i;
  return sum;
}

class Echo {
 public:
  int64_t Triple(int64_t x) { return 3 * x; }
  int64_t Pid() const { return getpid(); }
};
Echo* CreateEcho() { return new Echo(); }

SHOAL_REMOTE(Compute, MakeBlob, Checksum, CreateEcho, &Echo::Triple,
             &Echo::Pid);

// ---- What happened ----

struct Tally {
  std::mutex mu;
  int64_t rounds = 0;
  int64_t tasks_ok = 0;
  int64_t objects_ok = 0;
  int64_t actor_calls_ok = 0;
  int64_t actor_restarts = 0;
  int64_t gangs_ok = 0;
  int64_t agent_kills = 0;
  int64_t head_kills = 0;
  std::map<std::string, int64_t> typed_errors;  // by class: allowed kinds
  std::vector<std::string> problems;            // each fails the test

  void Problem(std::string what) {
    std::lock_guard<std::mutex> lock(mu);
    fprintf(stderr, "chaos: PROBLEM: %s\n", what.c_str());
    problems.push_back(std::move(what));
  }
};

// The class of a shoal error, for the tally ("shoal::WorkerDiedError").
std::string ErrorClass(const shoal::Error& e) {
  if (dynamic_cast<const shoal::WorkerDiedError*>(&e)) {
    return "shoal::WorkerDiedError";
  }
  if (dynamic_cast<const shoal::ActorDiedError*>(&e)) {
    return "shoal::ActorDiedError";
  }
  if (dynamic_cast<const shoal::ObjectLostError*>(&e)) {
    return "shoal::ObjectLostError";
  }
  if (dynamic_cast<const shoal::TimeoutError*>(&e)) {
    return "shoal::TimeoutError";
  }
  if (dynamic_cast<const shoal::RemoteError*>(&e)) return "shoal::RemoteError";
  return "shoal::Error";
}

// Gets `ref` and checks it equals `want`; a failure is a problem (all of
// this work is retryable) unless it is a typed error of an allowed kind.
template <typename T>
void Check(Tally& tally, const shoal::ObjectRef<T>& ref, const T& want,
           const std::string& what, int64_t* ok) {
  try {
    T got = shoal::Get(ref, kRoundTimeoutMs);
    if (got != want) {
      tally.Problem(absl::StrCat(what, ": wrong result"));
      return;
    }
    ++*ok;
  } catch (const shoal::Error& e) {
    tally.Problem(
        absl::StrCat(what, " failed with ", ErrorClass(e), ": ", e.what()));
  } catch (const std::exception& e) {
    tally.Problem(absl::StrCat(what, " failed with an untyped error (",
                               typeid(e).name(), "): ", e.what()));
  }
}

class ChaosTest : public shoal::testing::DriverClusterTest {
 protected:
  void SetUp() override {
    ClusterSpec spec;
    for (const char* name :
         {"chaos-head", "chaos-n1", "chaos-n2", "chaos-n3"}) {
      spec.nodes.push_back(Node(name));
    }
    StartAndConnect(spec);
    shm_when_idle_ = shoal::testing::ShmEntries();
  }
  // 3 CPUs (actors and gangs), and 2 slots for the driver's tasks: a
  // driver that always has tasks queued keeps its leases, so tasks that
  // took CPUs would hold them from the gangs all along.
  static NodeSpec Node(const std::string& name) {
    return NodeSpec{name, 3, R"({"chaos_slot": 2})"};
  }
  // The resources of one of the driver's tasks.
  static std::map<std::string, double> TaskShape() {
    return {{"CPU", 0}, {"chaos_slot", 1}};
  }
  std::vector<std::string> Env() const {
    return {"SHOAL_ADDRESS=" + cluster_->address(),
            "SHOAL_TOKEN=" + cluster_->token()};
  }

  // One round of the driver's load.
  void Round(Tally& tally, std::vector<shoal::ActorHandle<Echo>>& actors,
             std::map<std::string, int64_t>& actor_pids, int64_t round) {
    std::vector<shoal::ObjectRef<int64_t>> tasks;
    for (int64_t i = 0; i < 12; ++i) {
      tasks.push_back(shoal::Task(Compute)
                          .SetResources(TaskShape())
                          .SetMaxRetries(kRetries)
                          .Remote(round * 100 + i));
    }
    // Blobs made on some node, read on others (pulled between nodes; when
    // the maker's node dies, made again from their task).
    std::vector<shoal::ObjectRef<uint64_t>> sums;
    std::vector<int64_t> seeds;
    for (int64_t i = 0; i < 2; ++i) {
      int64_t seed = round * 10 + i;
      auto blob = shoal::Task(MakeBlob)
                      .SetResources(TaskShape())
                      .SetMaxRetries(kRetries)
                      .Remote(seed);
      for (int r = 0; r < 2; ++r) {
        sums.push_back(shoal::Task(Checksum)
                           .SetResources(TaskShape())
                           .SetMaxRetries(kRetries)
                           .Remote(blob));
        seeds.push_back(seed);
      }
    }
    std::vector<shoal::ObjectRef<int64_t>> calls;
    for (auto& actor : actors) {
      for (int64_t i = 0; i < 3; ++i) {
        calls.push_back(actor.Task(&Echo::Triple).Remote(round * 10 + i));
      }
    }
    for (size_t i = 0; i < tasks.size(); ++i) {
      int64_t x = round * 100 + static_cast<int64_t>(i);
      Check(tally, tasks[i], x * x + 7, absl::StrCat("task Compute(", x, ")"),
            &tally.tasks_ok);
    }
    for (size_t i = 0; i < sums.size(); ++i) {
      Check(tally, sums[i], ExpectedChecksum(seeds[i]),
            absl::StrCat("checksum of blob ", seeds[i]), &tally.objects_ok);
    }
    for (size_t a = 0; a < actors.size(); ++a) {
      for (int64_t i = 0; i < 3; ++i) {
        int64_t x = round * 10 + i;
        Check(tally, calls[a * 3 + i], 3 * x,
              absl::StrCat("actor ", a, " Triple(", x, ")"),
              &tally.actor_calls_ok);
      }
      // A new pid: the actor was made again since the last round.
      try {
        int64_t pid =
            shoal::Get(actors[a].Task(&Echo::Pid).Remote(), kRoundTimeoutMs);
        std::string key = absl::StrCat(a);
        if (actor_pids.count(key) && actor_pids[key] != pid) {
          ++tally.actor_restarts;
        }
        actor_pids[key] = pid;
      } catch (const shoal::Error& e) {
        tally.Problem(absl::StrCat("actor ", a, " Pid() failed with ",
                                   ErrorClass(e), ": ", e.what()));
      }
    }
    ++tally.rounds;
  }

  std::set<std::string> shm_when_idle_;
};

TEST_F(ChaosTest, NothingRetryableIsLostWhileAgentsAndTheHeadAreKilled) {
  const int64_t seconds = EnvInt("SHOAL_CHAOS_SECONDS", 300);
  const int64_t kill_every_s = EnvInt("SHOAL_CHAOS_KILL_EVERY_S", 10);
  uint64_t seed = EnvInt("SHOAL_CHAOS_SEED", std::random_device()());
  printf(
      "chaos: %lld s, an agent killed every %lld s, the head twice; "
      "SHOAL_CHAOS_SEED=%llu\n",
      static_cast<long long>(seconds), static_cast<long long>(kill_every_s),
      static_cast<unsigned long long>(seed));
  fflush(stdout);
  Tally tally;
  const auto start = Clock::now();
  const auto end = start + std::chrono::seconds(seconds);
  std::atomic<bool> stop{false};

  // The faults. Node 0 is the head's node (the driver's objects live in its
  // store); the others are fair game, each replaced by a new node.
  std::thread killer([&] {
    std::mt19937_64 rng(seed);
    std::vector<size_t> victims = {1, 2, 3};
    size_t next_node = 4;
    int head_kills_done = 0;
    auto next_kill = start + std::chrono::seconds(kill_every_s);
    while (!stop) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      auto now = Clock::now();
      if (now >= end) break;
      double progress = std::chrono::duration<double>(now - start).count() /
                        static_cast<double>(seconds);
      if (head_kills_done < 2 && progress >= (head_kills_done + 1) / 3.0) {
        cluster_->KillHead();
        absl::Status st = cluster_->RestartHead();
        if (!st.ok()) {
          tally.Problem(
              absl::StrCat("the head did not start again: ", st.ToString()));
          stop = true;
          return;
        }
        ++head_kills_done;
        {
          std::lock_guard<std::mutex> lock(tally.mu);
          ++tally.head_kills;
        }
        printf("chaos: %.0f s: head killed and started again\n",
               std::chrono::duration<double>(Clock::now() - start).count());
        fflush(stdout);
      }
      if (now < next_kill || victims.empty()) continue;
      next_kill = now + std::chrono::seconds(kill_every_s);
      size_t pick = rng() % victims.size();
      size_t node = victims[pick];
      victims.erase(victims.begin() + static_cast<long>(pick));
      cluster_->KillAgent(node);
      std::string name = absl::StrCat("chaos-r", next_node);
      absl::Status st = cluster_->AddNode(Node(name));
      if (!st.ok()) {
        tally.Problem(
            absl::StrCat("node ", name, " did not join: ", st.ToString()));
      } else {
        victims.push_back(next_node++);
      }
      {
        std::lock_guard<std::mutex> lock(tally.mu);
        ++tally.agent_kills;
      }
      printf("chaos: %.0f s: killed the agent of node %zu, %s joined\n",
             std::chrono::duration<double>(Clock::now() - start).count(), node,
             name.c_str());
      fflush(stdout);
    }
  });

  // Gangs, one after another: each must succeed, its ranks restarted when
  // their node dies.
  std::thread gangs([&] {
    std::vector<std::string> env = Env();
    while (!stop && Clock::now() < end) {
      std::string out;
      auto began = Clock::now();
      int rc = RunCli({"launch", "--per-device", "--nodes", "2",
                       "--nproc-per-node", "2", "--max-restarts", "100", "--",
                       "sh", "-c", "sleep 2; echo gang-rank-$RANK-ok"},
                      &out, env);
      bool all_ranks = true;
      for (int rank = 0; rank < 4; ++rank) {
        all_ranks &= out.find(absl::StrCat("gang-rank-", rank, "-ok")) !=
                     std::string::npos;
      }
      if (rc != 0 || !all_ranks) {
        tally.Problem(absl::StrCat("a gang failed (exit ", rc, "): ", out));
        continue;
      }
      printf("chaos: %.0f s: a gang succeeded in %.1f s\n",
             std::chrono::duration<double>(Clock::now() - start).count(),
             std::chrono::duration<double>(Clock::now() - began).count());
      fflush(stdout);
      std::lock_guard<std::mutex> lock(tally.mu);
      ++tally.gangs_ok;
    }
  });

  {
    std::vector<shoal::ActorHandle<Echo>> actors;
    for (int i = 0; i < 2; ++i) {
      actors.push_back(shoal::Actor(CreateEcho)
                           .SetMaxRestarts(-1)
                           .SetMaxTaskRetries(-1)
                           .Remote());
    }
    std::map<std::string, int64_t> actor_pids;
    for (int64_t round = 0; Clock::now() < end && !stop; ++round) {
      Round(tally, actors, actor_pids, round);
    }
    stop = true;
    killer.join();
    gangs.join();
    for (auto& actor : actors) actor.Kill();
  }

  // Every failure was a problem (all the work was retryable); what counts
  // for the outcome now is that the cluster is left empty.
  std::string held;
  for (int i = 0; i < 50; ++i) {
    held = shoal::testing::WhatIsHeld(
        *cluster_,
        {.shm_when_idle = {}, .marker = "", .dead_nodes_are_held = false});
    if (held.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_EQ(held, "") << "the cluster still holds, after the load ended:"
                      << held;

  std::string tasks_json;
  int64_t retried = 0;
  if (RunCli({"list", "tasks", "--format", "json", "--limit", "100000"},
             &tasks_json, Env()) == 0) {
    nlohmann::json tasks = nlohmann::json::parse(tasks_json, nullptr, false);
    if (tasks.is_array()) {
      for (const auto& t : tasks) {
        if (t.value("attempt", std::string("0")) != "0") ++retried;
      }
    }
  }
  int64_t gang_restarts = 0;
  std::string gangs_json;
  if (RunCli({"list", "gangs", "--format", "json"}, &gangs_json, Env()) == 0) {
    nlohmann::json list = nlohmann::json::parse(gangs_json, nullptr, false);
    if (list.is_array()) {
      for (const auto& g : list) {
        gang_restarts += std::stoll(g.value("restarts", std::string("0")));
      }
    }
  }

  // The stores and processes once the cluster is stopped.
  shoal::Shutdown();
  std::string root = cluster_->root();
  cluster_->Stop();
  std::vector<std::string> left = shoal::testing::ProcessesMentioning(root);
  EXPECT_TRUE(left.empty()) << "processes left: " << left.size()
                            << ", first: " << (left.empty() ? "" : left[0]);
  // This cluster's arenas (other clusters may run on this host meanwhile).
  for (const std::string& name : shoal::testing::ShmEntries()) {
    if (name.find("chaos-") == std::string::npos) continue;
    EXPECT_TRUE(shm_when_idle_.count(name))
        << "/dev/shm/" << name << " was left";
  }

  printf(
      "chaos: %.0f s: %lld rounds; %lld tasks, %lld objects (made on one "
      "node, read on another), %lld actor calls ok; %lld task retries seen "
      "by the head, %lld actor restarts, %lld gangs ok (%lld gang restarts); "
      "survived %lld agent kills and %lld head kills; %zu problems\n",
      std::chrono::duration<double>(Clock::now() - start).count(),
      static_cast<long long>(tally.rounds),
      static_cast<long long>(tally.tasks_ok),
      static_cast<long long>(tally.objects_ok),
      static_cast<long long>(tally.actor_calls_ok),
      static_cast<long long>(retried),
      static_cast<long long>(tally.actor_restarts),
      static_cast<long long>(tally.gangs_ok),
      static_cast<long long>(gang_restarts),
      static_cast<long long>(tally.agent_kills),
      static_cast<long long>(tally.head_kills), tally.problems.size());
  EXPECT_TRUE(tally.problems.empty())
      << tally.problems.size() << " problems; the first: " << tally.problems[0];
  EXPECT_EQ(tally.head_kills, 2);
  EXPECT_GT(tally.gangs_ok, 0);
}

}  // namespace
