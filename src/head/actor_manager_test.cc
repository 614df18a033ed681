// The head's actor manager against a real Head, with fake node agents and
// fake workers: rpc::Servers on loopback in this process that answer
// REQUEST_LEASE, RETURN_LEASE, GET_WORKER_EXIT and CREATE_ACTOR_INSTANCE as
// the real ones do. No process is started.
#include "head/actor_manager.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "head/head.h"
#include "head/head_testing.h"
#include "rpc/blocking_channel.h"
#include "rpc/event_loop.h"
#include "rpc/rpc.h"
#include "scheduling/resource_set.h"
#include "shoal/shoal.pb.h"

namespace shoal {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kToken[] = "actor-test-token";
constexpr char kSignal9[] = "killed by signal 9 (Killed)";

ResourceSet Resources(const std::map<std::string, double>& amounts) {
  absl::StatusOr<ResourceSet> set = ResourceSet::FromDoubles(amounts);
  EXPECT_TRUE(set.ok()) << set.status();
  return set.ok() ? *set : ResourceSet();
}

// ---- ChooseActorNode ----

TEST(ChooseActorNodeTest, PicksAsTheDesignSays) {
  struct Case {
    std::string what;
    std::map<std::string, double> shape;
    std::vector<ActorNode> nodes;
    std::optional<size_t> want;
  };
  auto node = [](const std::string& id, std::map<std::string, double> total,
                 std::map<std::string, double> available, int64_t actors) {
    return ActorNode{id, id + ":1", Resources(total), Resources(available),
                     actors};
  };
  std::vector<Case> cases = {
      {"no nodes", {}, {}, std::nullopt},
      {"most free CPU",
       {{"CPU", 1}},
       {node("a", {{"CPU", 8}}, {{"CPU", 2}}, 0),
        node("b", {{"CPU", 8}}, {{"CPU", 6}}, 3)},
       1},
      {"then fewest actors",
       {},
       {node("a", {{"CPU", 4}}, {{"CPU", 4}}, 2),
        node("b", {{"CPU", 4}}, {{"CPU", 4}}, 1),
        node("c", {{"CPU", 4}}, {{"CPU", 4}}, 1)},
       1},
      {"only nodes where it fits now",
       {{"GPU", 1}},
       {node("a", {{"CPU", 16}}, {{"CPU", 16}}, 0),
        node("b", {{"CPU", 2}, {"GPU", 1}}, {{"CPU", 1}, {"GPU", 1}}, 5)},
       1},
      {"else where it fits when idle",
       {{"GPU", 1}},
       {node("a", {{"CPU", 16}}, {{"CPU", 16}}, 0),
        node("b", {{"CPU", 2}, {"GPU", 1}}, {{"CPU", 2}}, 0)},
       1},
      {"else the node with the fewest actors",
       {{"GPU", 8}},
       {node("a", {{"CPU", 16}}, {{"CPU", 16}}, 4),
        node("b", {{"CPU", 2}, {"GPU", 1}}, {{"CPU", 2}}, 1)},
       1},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ChooseActorNode(Resources(c.shape), c.nodes), c.want) << c.what;
  }
}

// ---- Fakes ----

// A node agent and its workers. Lives on the fakes' loop: every method and
// field is for that loop's thread (tests reach them through OnFakes).
class FakeNode {
 public:
  FakeNode(rpc::EventLoop* loop, std::string node_id)
      : loop_(loop), node_id_(std::move(node_id)) {}

  absl::Status Listen() {
    auto server = rpc::Server::Create(loop_, "127.0.0.1", 0, kToken);
    if (!server.ok()) return server.status();
    server_ = std::move(*server);
    rpc::Server* s = server_.get();
    rpc::RegisterProto<proto::RequestLeaseRequest>(
        s, proto::REQUEST_LEASE, [this](const auto& r, rpc::Responder resp) {
          lease_requests.push_back(r);
          if (hold_leases) {
            held_.emplace_back(r, std::move(resp));
            return;
          }
          if (lease_reply) {
            if (auto reply = lease_reply(r)) return resp.Reply(*reply);
          }
          resp.Reply(Grant(r));
        });
    rpc::RegisterProto<proto::CancelLease>(
        s, proto::CANCEL_LEASE_REQUEST,
        [this](const auto& r, rpc::Responder resp) {
          cancels.push_back(r.request_id());
          proto::CancelLeaseReply reply;
          for (auto it = held_.begin(); it != held_.end(); ++it) {
            if (it->first.request_id() != r.request_id()) continue;
            proto::RequestLeaseReply canceled;
            canceled.set_outcome(proto::RequestLeaseReply::CANCELED);
            it->second.Reply(canceled);
            held_.erase(it);
            reply.set_canceled(true);
            break;
          }
          resp.Reply(reply);
        });
    rpc::RegisterProto<proto::ReturnLeaseRequest>(
        s, proto::RETURN_LEASE, [this](const auto& r, rpc::Responder resp) {
          returns.push_back(r);
          auto lease = lease_workers_.find(r.lease_id());
          if (lease != lease_workers_.end() && r.kill_worker()) {
            Crash(lease->second, kSignal9);
          }
          resp.Reply(proto::Empty());
        });
    rpc::RegisterProto<proto::GetWorkerExitRequest>(
        s, proto::GET_WORKER_EXIT, [this](const auto& r, rpc::Responder resp) {
          proto::GetWorkerExitReply reply;
          if (auto it = exits.find(r.worker_id()); it != exits.end()) {
            reply.set_exited(true);
            reply.set_description(it->second);
          } else {
            reply.set_description("the worker is still running");
          }
          resp.Reply(reply);
        });
    return absl::OkStatus();
  }

  std::string address() const {
    return absl::StrCat("127.0.0.1:", server_->port());
  }
  const std::string& node_id() const { return node_id_; }

  // The worker's process ends with `description`: its connections close.
  void Crash(const std::string& worker_id, const std::string& description) {
    auto it = workers_.find(worker_id);
    if (it == workers_.end() || it->second == nullptr) return;
    exits[worker_id] = description;
    it->second->Shutdown();
    it->second.reset();
  }
  // The agent stops answering (its host is unplugged); workers stay.
  void Unplug() { server_->Shutdown(); }

  // Grants the lease requests kept while hold_leases was set.
  void GrantHeld() {
    for (auto& [request, responder] : held_) responder.Reply(Grant(request));
    held_.clear();
  }

  // Answers a lease request instead of granting it, when it returns a reply.
  std::function<std::optional<proto::RequestLeaseReply>(
      const proto::RequestLeaseRequest&)>
      lease_reply;
  std::string constructor_error;  // the workers' factories throw this
  bool hold_leases = false;       // keep lease requests unanswered

  std::vector<proto::RequestLeaseRequest> lease_requests;
  std::vector<proto::ActorCreation> creations;  // made in its workers
  std::vector<std::string> creation_workers;    // the worker of each
  std::vector<proto::ReturnLeaseRequest> returns;
  std::vector<std::string> cancels;          // the request ids withdrawn
  std::map<std::string, std::string> exits;  // worker id -> how it ended
  std::vector<std::string> adoptions;        // actors a head took up again

 private:
  proto::RequestLeaseReply Grant(const proto::RequestLeaseRequest&) {
    int n = next_++;
    std::string worker_id = absl::StrCat(node_id_, "-w", n);
    std::string lease_id = absl::StrCat(node_id_, "-lease", n);
    auto server = rpc::Server::Create(loop_, "127.0.0.1", 0, kToken);
    EXPECT_TRUE(server.ok()) << server.status();
    rpc::RegisterProto<proto::ActorExitingRequest>(
        server->get(), proto::ADOPT_ACTOR,
        [this](const auto& r, rpc::Responder resp) {
          adoptions.push_back(r.actor_id());
          resp.Reply(proto::Empty());
        });
    rpc::RegisterProto<proto::ActorCreation>(
        server->get(), proto::CREATE_ACTOR_INSTANCE,
        [this, worker_id](const auto& r, rpc::Responder resp) {
          creations.push_back(r);
          creation_workers.push_back(worker_id);
          proto::TaskResult result;
          result.set_ok(constructor_error.empty());
          if (!constructor_error.empty()) {
            result.set_error(constructor_error);
            result.set_error_type("std::runtime_error");
          }
          resp.Reply(result);
        });
    proto::RequestLeaseReply reply;
    reply.set_outcome(proto::RequestLeaseReply::GRANTED);
    reply.set_lease_id(lease_id);
    reply.set_worker_id(worker_id);
    reply.set_worker_address(absl::StrCat("127.0.0.1:", (*server)->port()));
    reply.set_worker_pid(20000 + n);
    reply.set_node_id(node_id_);
    workers_[worker_id] = std::move(*server);
    lease_workers_[lease_id] = worker_id;
    return reply;
  }

  rpc::EventLoop* loop_;
  std::string node_id_;
  std::unique_ptr<rpc::Server> server_;
  std::map<std::string, std::unique_ptr<rpc::Server>> workers_;
  std::map<std::string, std::string> lease_workers_;
  std::vector<std::pair<proto::RequestLeaseRequest, rpc::Responder>> held_;
  int next_ = 1;
};

class ActorManagerTest : public ::testing::Test {
 protected:
  static HeadOptions Options() {
    HeadOptions options;
    options.token = kToken;
    options.health_timeout_ms = 600000;  // fake agents send no heartbeats
    return options;
  }

  void SetUp() override {
    auto head = testing::TestHead::Start("actor_manager_test", Options());
    ASSERT_TRUE(head.ok()) << head.status();
    head_ = std::move(*head);
    auto loop = rpc::EventLoop::Create("fakes");
    ASSERT_TRUE(loop.ok()) << loop.status();
    fakes_ = std::move(*loop);
    cli_ = Connect("cli");
  }

  void TearDown() override {
    head_.reset();
    if (fakes_) {
      fakes_->RunSync([&] { nodes_.clear(); });
      fakes_->Stop();
    }
  }

  std::unique_ptr<rpc::BlockingChannel> Connect(const std::string& name) {
    auto channel =
        rpc::BlockingChannel::Connect(head_->address(), kToken, name);
    EXPECT_TRUE(channel.ok()) << channel.status();
    return channel.ok() ? std::move(*channel) : nullptr;
  }

  // A node with `cpus` CPUs (and `extra` resources) registered with the head.
  FakeNode* AddNode(const std::string& node_id, double cpus,
                    std::map<std::string, double> extra = {}) {
    auto node = std::make_unique<FakeNode>(fakes_.get(), node_id);
    absl::Status listening;
    fakes_->RunSync([&] { listening = node->Listen(); });
    EXPECT_TRUE(listening.ok()) << listening;
    extra["CPU"] = cpus;
    proto::RegisterNodeRequest req;
    req.mutable_node()->set_node_id(node_id);
    req.mutable_node()->set_address(node->address());
    Resources(extra).ToProto(req.mutable_node()->mutable_total());
    proto::RegisterNodeReply reply;
    absl::Status st = cli_->CallProto(proto::REGISTER_NODE, req, &reply);
    EXPECT_TRUE(st.ok()) << st;
    FakeNode* out = node.get();
    fakes_->RunSync([&] { nodes_.push_back(std::move(node)); });
    return out;
  }

  // Runs `fn` on the fakes' loop and returns what it returns.
  template <typename F>
  auto OnFakes(F fn) {
    decltype(fn()) out{};
    fakes_->RunSync([&] { out = fn(); });
    return out;
  }

  static proto::ActorSpec Spec(const std::string& id, int max_restarts = 0,
                               const std::string& name = "") {
    proto::ActorSpec spec =
        testing::CounterActorSpec(id, max_restarts, name, "job-test");
    spec.set_binary_path("/bin/counter");
    spec.set_binary_hash("abc123");
    spec.set_depth(2);
    return spec;
  }

  absl::StatusOr<proto::ActorInfo> Create(const proto::ActorSpec& spec,
                                          rpc::BlockingChannel* via = nullptr) {
    proto::ActorInfo info;
    absl::Status st = (via ? via : cli_.get())
                          ->CallProto(proto::CREATE_ACTOR, spec, &info, 5000);
    if (!st.ok()) return st;
    return info;
  }

  absl::StatusOr<proto::ActorInfo> Get(const std::string& id,
                                       const std::string& name = "",
                                       int64_t after_version = 0,
                                       int64_t wait_ms = 0,
                                       rpc::BlockingChannel* via = nullptr) {
    proto::GetActorRequest req;
    req.set_actor_id(id);
    req.set_name(name);
    req.set_after_version(after_version);
    req.set_wait_ms(wait_ms);
    proto::ActorInfo info;
    absl::Status st = (via ? via : cli_.get())
                          ->CallProto(proto::GET_ACTOR, req, &info, 30000);
    if (!st.ok()) return st;
    return info;
  }

  // Long-polls the actor until `done` holds (at most 10 s).
  proto::ActorInfo WaitFor(const std::string& id,
                           std::function<bool(const proto::ActorInfo&)> done) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    proto::ActorInfo last;
    int64_t version = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      absl::StatusOr<proto::ActorInfo> info = Get(id, "", version, 500);
      if (!info.ok()) {
        ADD_FAILURE() << info.status();
        return last;
      }
      last = *info;
      if (done(last)) return last;
      version = last.version();
    }
    ADD_FAILURE() << "actor " << id << " never got there; last seen "
                  << last.ShortDebugString();
    return last;
  }

  proto::ActorInfo WaitForState(const std::string& id,
                                proto::ActorInfo::State state,
                                int num_restarts = 0) {
    return WaitFor(id, [&](const proto::ActorInfo& info) {
      return info.state() == state && info.num_restarts() == num_restarts;
    });
  }

  void WaitUntil(const std::function<bool()>& done) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done()) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  absl::Status Kill(const std::string& id, bool no_restart) {
    proto::KillActorRequest kill;
    kill.set_actor_id(id);
    kill.set_no_restart(no_restart);
    proto::Empty empty;
    return cli_->CallProto(proto::KILL_ACTOR, kill, &empty);
  }

  // The lease ids returned to `node` with their workers killed.
  std::vector<std::string> KilledLeases(FakeNode* node) {
    return OnFakes([node] {
      std::vector<std::string> out;
      for (const auto& r : node->returns) {
        if (r.kill_worker()) out.push_back(r.lease_id());
      }
      return out;
    });
  }

  std::unique_ptr<testing::TestHead> head_;
  std::unique_ptr<rpc::EventLoop> fakes_;
  std::vector<std::unique_ptr<FakeNode>> nodes_;  // fakes' loop
  std::unique_ptr<rpc::BlockingChannel> cli_;
};

TEST_F(ActorManagerTest, CreatedActorBecomesAliveInALeasedWorker) {
  FakeNode* node = AddNode("n1", 4);
  absl::StatusOr<proto::ActorInfo> created = Create(Spec("a1", 2));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->state(), proto::ActorInfo::PENDING);
  EXPECT_EQ(created->spec().class_name(), "Counter");

  proto::ActorInfo info = WaitForState("a1", proto::ActorInfo::ALIVE);
  EXPECT_EQ(info.node_id(), "n1");
  EXPECT_EQ(info.worker_id(), "n1-w1");
  EXPECT_EQ(info.pid(), 20001);
  EXPECT_THAT(info.address(), HasSubstr("127.0.0.1:"));
  EXPECT_EQ(info.num_restarts(), 0);
  EXPECT_GT(info.version(), created->version());

  auto requests = OnFakes([node] { return node->lease_requests; });
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].actor_id(), "a1");
  EXPECT_EQ(requests[0].job_id(), "job-test");
  EXPECT_EQ(requests[0].binary_path(), "/bin/counter");
  EXPECT_EQ(requests[0].binary_hash(), "abc123");
  EXPECT_EQ(requests[0].depth(), 2);
  EXPECT_FALSE(requests[0].no_spillback());
  auto creations = OnFakes([node] { return node->creations; });
  ASSERT_EQ(creations.size(), 1u);
  EXPECT_EQ(creations[0].spec().actor_id(), "a1");
  EXPECT_EQ(creations[0].spec().factory(), "CreateCounter");
  EXPECT_EQ(creations[0].num_restarts(), 0);

  // The cluster status lists it.
  proto::ClusterStatus status;
  ASSERT_TRUE(
      cli_->CallProto(proto::GET_CLUSTER_STATUS, proto::Empty(), &status).ok());
  ASSERT_EQ(status.actors_size(), 1);
  EXPECT_EQ(status.actors(0).spec().actor_id(), "a1");
  EXPECT_EQ(status.actors(0).state(), proto::ActorInfo::ALIVE);
  EXPECT_GE(status.actors(0).age_ms(), 0);
}

TEST_F(ActorManagerTest, NamesAreUniqueAmongLiveActors) {
  AddNode("n1", 4);
  ASSERT_TRUE(Create(Spec("a1", 0, "counter")).ok());
  absl::StatusOr<proto::ActorInfo> again = Create(Spec("a2", 0, "counter"));
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(again.status().message(),
              AllOf(HasSubstr("actor a1"), HasSubstr("pick another name")));

  absl::StatusOr<proto::ActorInfo> by_name = Get("", "counter");
  ASSERT_TRUE(by_name.ok()) << by_name.status();
  EXPECT_EQ(by_name->spec().actor_id(), "a1");

  absl::StatusOr<proto::ActorInfo> unknown = Get("", "nobody");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.status().message(),
              HasSubstr("no live actor is named \"nobody\""));
  EXPECT_EQ(Get("no-such-id").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ActorManagerTest, LongPollIsWokenByAChange) {
  AddNode("n1", 4);
  ASSERT_TRUE(Create(Spec("a1")).ok());
  proto::ActorInfo alive = WaitForState("a1", proto::ActorInfo::ALIVE);

  // Nothing changes: the poll answers after wait_ms with what it is.
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<proto::ActorInfo> same = Get("a1", "", alive.version(), 300);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->version(), alive.version());
  EXPECT_GE(std::chrono::steady_clock::now() - start,
            std::chrono::milliseconds(250));

  // A kill wakes a poll that would wait 20 s.
  std::unique_ptr<rpc::BlockingChannel> poller = Connect("poller");
  absl::StatusOr<proto::ActorInfo> woken;
  std::thread poll(
      [&] { woken = Get("a1", "", alive.version(), 20000, poller.get()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  start = std::chrono::steady_clock::now();
  proto::KillActorRequest kill;
  kill.set_actor_id("a1");
  kill.set_no_restart(true);
  proto::Empty empty;
  ASSERT_TRUE(cli_->CallProto(proto::KILL_ACTOR, kill, &empty).ok());
  poll.join();
  ASSERT_TRUE(woken.ok()) << woken.status();
  EXPECT_EQ(woken->state(), proto::ActorInfo::DEAD);
  EXPECT_GT(woken->version(), alive.version());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));

  // A dead actor will not change: a poll of it answers at once.
  start = std::chrono::steady_clock::now();
  absl::StatusOr<proto::ActorInfo> dead =
      Get("a1", "", woken->version(), 20000);
  ASSERT_TRUE(dead.ok()) << dead.status();
  EXPECT_EQ(dead->state(), proto::ActorInfo::DEAD);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST_F(ActorManagerTest, ALostWorkerIsReplacedUntilRestartsAreUsedUp) {
  FakeNode* node = AddNode("n1", 4);
  ASSERT_TRUE(Create(Spec("a1", /*max_restarts=*/1)).ok());
  proto::ActorInfo first = WaitForState("a1", proto::ActorInfo::ALIVE);

  // Its process dies: RESTARTING, then ALIVE in a new worker.
  std::vector<proto::ActorInfo> seen;
  std::thread watch([&] {
    proto::ActorInfo info = first;
    while (info.state() != proto::ActorInfo::ALIVE || info.num_restarts() < 1) {
      auto next = Get("a1", "", info.version(), 5000);
      if (!next.ok()) return;
      info = *next;
      seen.push_back(info);
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  fakes_->RunSync([&] { node->Crash(first.worker_id(), kSignal9); });
  watch.join();
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.front().state(), proto::ActorInfo::RESTARTING);
  EXPECT_EQ(seen.front().death_cause(), kSignal9);
  EXPECT_EQ(seen.front().num_restarts(), 1);
  proto::ActorInfo second = seen.back();
  EXPECT_EQ(second.state(), proto::ActorInfo::ALIVE);
  EXPECT_EQ(second.num_restarts(), 1);
  EXPECT_NE(second.worker_id(), first.worker_id());
  auto creations = OnFakes([node] { return node->creations; });
  ASSERT_EQ(creations.size(), 2u);
  EXPECT_EQ(creations[1].num_restarts(), 1);

  // Again: no restarts left.
  fakes_->RunSync([&] { node->Crash(second.worker_id(), kSignal9); });
  proto::ActorInfo dead = WaitFor("a1", [](const proto::ActorInfo& info) {
    return info.state() == proto::ActorInfo::DEAD;
  });
  EXPECT_EQ(dead.death_cause(),
            "its process died (killed by signal 9 (Killed)) and its restarts "
            "are used up (max_restarts=1)");
  EXPECT_EQ(dead.node_id(), "n1");
  EXPECT_TRUE(dead.address().empty());
  EXPECT_EQ(OnFakes([node] { return node->creations.size(); }), 2u);
}

TEST_F(ActorManagerTest, KillWithoutRestartEndsTheWorker) {
  FakeNode* node = AddNode("n1", 4);
  ASSERT_TRUE(Create(Spec("a1", /*max_restarts=*/-1)).ok());
  WaitForState("a1", proto::ActorInfo::ALIVE);
  ASSERT_TRUE(Kill("a1", /*no_restart=*/true).ok());
  absl::StatusOr<proto::ActorInfo> info = Get("a1");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->state(), proto::ActorInfo::DEAD);
  EXPECT_EQ(info->death_cause(), "killed by shoal::Kill");
  WaitUntil([&] { return !KilledLeases(node).empty(); });
  EXPECT_THAT(KilledLeases(node), ElementsAre("n1-lease1"));
  // It stays dead: no new lease.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(OnFakes([node] { return node->lease_requests.size(); }), 1u);

  EXPECT_EQ(Kill("no-such-actor", /*no_restart=*/true).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(ActorManagerTest, KillWithRestartMakesANewInstance) {
  FakeNode* node = AddNode("n1", 4);
  ASSERT_TRUE(Create(Spec("a1", /*max_restarts=*/1)).ok());
  WaitForState("a1", proto::ActorInfo::ALIVE);
  ASSERT_TRUE(Kill("a1", /*no_restart=*/false).ok());
  proto::ActorInfo info = WaitForState("a1", proto::ActorInfo::ALIVE, 1);
  EXPECT_EQ(info.death_cause(), "killed by shoal::Kill");
  EXPECT_THAT(KilledLeases(node), ElementsAre("n1-lease1"));
}

TEST_F(ActorManagerTest, ExitActorEndsIt) {
  FakeNode* node = AddNode("n1", 4);
  ASSERT_TRUE(Create(Spec("a1", /*max_restarts=*/3)).ok());
  proto::ActorInfo alive = WaitForState("a1", proto::ActorInfo::ALIVE);
  proto::ActorExitingRequest exiting;
  exiting.set_actor_id("a1");
  exiting.set_worker_id(alive.worker_id());
  proto::Empty empty;
  ASSERT_TRUE(cli_->CallProto(proto::ACTOR_EXITING, exiting, &empty).ok());
  proto::ActorInfo dead = WaitForState("a1", proto::ActorInfo::DEAD);
  EXPECT_EQ(dead.death_cause(), "the actor called shoal::ExitActor");
  WaitUntil([&] { return !KilledLeases(node).empty(); });
}

TEST_F(ActorManagerTest, ConstructorFailureIsFinal) {
  FakeNode* node = AddNode("n1", 4);
  fakes_->RunSync([&] { node->constructor_error = "boom"; });
  ASSERT_TRUE(Create(Spec("a1", /*max_restarts=*/5)).ok());
  proto::ActorInfo dead = WaitForState("a1", proto::ActorInfo::DEAD);
  EXPECT_EQ(dead.death_cause(),
            "the constructor raised: boom (std::runtime_error)");
  WaitUntil([&] { return !KilledLeases(node).empty(); });
  EXPECT_THAT(KilledLeases(node), ElementsAre("n1-lease1"));
}

TEST_F(ActorManagerTest, InfeasibleActorIsDead) {
  FakeNode* node = AddNode("n1", 4);
  fakes_->RunSync([&] {
    node->lease_reply = [](const proto::RequestLeaseRequest&) {
      proto::RequestLeaseReply reply;
      reply.set_outcome(proto::RequestLeaseReply::INFEASIBLE);
      reply.set_error("no node has 1 GPU; the largest has 0");
      return std::optional<proto::RequestLeaseReply>(reply);
    };
  });
  proto::ActorSpec spec = Spec("a1", 3);
  Resources({{"GPU", 1}}).ToProto(spec.mutable_shape());
  ASSERT_TRUE(Create(spec).ok());
  proto::ActorInfo dead = WaitForState("a1", proto::ActorInfo::DEAD);
  EXPECT_TRUE(dead.infeasible());
  EXPECT_EQ(dead.death_cause(), "no node has 1 GPU; the largest has 0");
  auto requests = OnFakes([node] { return node->lease_requests; });
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(ResourceSet::FromProto(requests[0].shape()),
            Resources({{"GPU", 1}}));
}

TEST_F(ActorManagerTest, StartFailuresAreRetriedThreeTimes) {
  FakeNode* node = AddNode("n1", 4);
  fakes_->RunSync([&] {
    node->lease_reply = [](const proto::RequestLeaseRequest&) {
      proto::RequestLeaseReply reply;
      reply.set_outcome(proto::RequestLeaseReply::FAILED);
      reply.set_error("exec failed: no such file");
      return std::optional<proto::RequestLeaseReply>(reply);
    };
  });
  ASSERT_TRUE(Create(Spec("a1")).ok());
  proto::ActorInfo dead = WaitForState("a1", proto::ActorInfo::DEAD);
  EXPECT_FALSE(dead.infeasible());
  EXPECT_THAT(dead.death_cause(),
              AllOf(HasSubstr("could not be started"),
                    HasSubstr("exec failed: no such file")));
  EXPECT_EQ(OnFakes([node] { return node->lease_requests.size(); }), 4u);
}

TEST_F(ActorManagerTest, FollowsSpillback) {
  FakeNode* busy = AddNode("busy", 8);  // most free CPU: asked first
  FakeNode* idle = AddNode("idle", 2);
  std::string idle_address = idle->address();
  fakes_->RunSync([&] {
    busy->lease_reply = [idle_address](const proto::RequestLeaseRequest& r) {
      std::optional<proto::RequestLeaseReply> reply;
      if (!r.no_spillback()) {
        reply.emplace();
        reply->set_outcome(proto::RequestLeaseReply::SPILLBACK);
        reply->set_spillback_address(idle_address);
        reply->set_spillback_node_id("idle");
      }
      return reply;
    };
  });
  ASSERT_TRUE(Create(Spec("a1")).ok());
  proto::ActorInfo info = WaitForState("a1", proto::ActorInfo::ALIVE);
  EXPECT_EQ(info.node_id(), "idle");
  auto requests = OnFakes([idle] { return idle->lease_requests; });
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_TRUE(requests[0].no_spillback());
}

TEST_F(ActorManagerTest, AWaitingRequestMovesToANodeWithRoom) {
  FakeNode* busy = AddNode("busy", 8, {{"slot", 1}});  // asked first
  FakeNode* roomy = AddNode("roomy", 2, {{"slot", 1}});
  fakes_->RunSync([&] { busy->hold_leases = true; });
  proto::ActorSpec spec = Spec("a1");
  Resources({{"slot", 1}}).ToProto(spec.mutable_shape());
  ASSERT_TRUE(Create(spec).ok());
  proto::ActorInfo info = WaitForState("a1", proto::ActorInfo::ALIVE);
  EXPECT_EQ(info.node_id(), "roomy");
  // The request that waited at the busy node was withdrawn there, not left
  // behind: nothing is held there and no worker started.
  auto requests = OnFakes([busy] { return busy->lease_requests; });
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_FALSE(requests[0].request_id().empty());
  EXPECT_THAT(OnFakes([busy] { return busy->cancels; }),
              ElementsAre(requests[0].request_id()));
  fakes_->RunSync([&] { busy->GrantHeld(); });
  EXPECT_TRUE(OnFakes([busy] { return busy->creations.empty(); }));
  EXPECT_TRUE(KilledLeases(busy).empty());
  EXPECT_EQ(OnFakes([roomy] { return roomy->creations.size(); }), 1u);
}

TEST_F(ActorManagerTest, AKilledWaitingActorWithdrawsItsRequest) {
  FakeNode* node = AddNode("n1", 8);
  fakes_->RunSync([&] { node->hold_leases = true; });
  ASSERT_TRUE(Create(Spec("a1")).ok());
  WaitUntil(
      [&] { return OnFakes([node] { return node->lease_requests.size(); }); });
  ASSERT_TRUE(Kill("a1", /*no_restart=*/true).ok());
  WaitUntil([&] { return !OnFakes([node] { return node->cancels; }).empty(); });
  auto requests = OnFakes([node] { return node->lease_requests; });
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_THAT(OnFakes([node] { return node->cancels; }),
              ElementsAre(requests[0].request_id()));
  EXPECT_EQ(WaitForState("a1", proto::ActorInfo::DEAD).state(),
            proto::ActorInfo::DEAD);
}

TEST_F(ActorManagerTest, NodeDeathMovesTheActor) {
  FakeNode* doomed = AddNode("doomed", 8);  // most free CPU: used first
  FakeNode* other = AddNode("other", 2);
  ASSERT_TRUE(Create(Spec("a1", /*max_restarts=*/1)).ok());
  proto::ActorInfo first = WaitForState("a1", proto::ActorInfo::ALIVE);
  ASSERT_EQ(first.node_id(), "doomed");

  // The host goes away: its agent stops answering, then the head declares
  // the node dead. Its worker's connection stays up (a hung host).
  fakes_->RunSync([&] { doomed->Unplug(); });
  proto::UnregisterNodeRequest dead;
  dead.set_node_id("doomed");
  dead.set_reason("host unplugged");
  proto::Empty empty;
  ASSERT_TRUE(cli_->CallProto(proto::UNREGISTER_NODE, dead, &empty).ok());

  proto::ActorInfo moved = WaitForState("a1", proto::ActorInfo::ALIVE, 1);
  EXPECT_EQ(moved.node_id(), "other");
  EXPECT_EQ(moved.death_cause(), "its node died (host unplugged)");
  auto creations = OnFakes([other] { return other->creations; });
  ASSERT_EQ(creations.size(), 1u);
  EXPECT_EQ(creations[0].num_restarts(), 1);
}

TEST_F(ActorManagerTest, AgentDeathMovesTheActorBeforeTheNodeIsDeclaredDead) {
  FakeNode* doomed = AddNode("doomed", 8);  // most free CPU: used first
  FakeNode* other = AddNode("other", 2);
  ASSERT_TRUE(Create(Spec("a1", /*max_restarts=*/1)).ok());
  proto::ActorInfo first = WaitForState("a1", proto::ActorInfo::ALIVE);
  ASSERT_EQ(first.node_id(), "doomed");

  // The agent and its workers die; the head has not noticed the node yet
  // (its health timeout is long here), but the actor moves at once.
  fakes_->RunSync([&] {
    doomed->Unplug();
    doomed->Crash(first.worker_id(), kSignal9);
  });
  proto::ActorInfo moved = WaitForState("a1", proto::ActorInfo::ALIVE, 1);
  EXPECT_EQ(moved.node_id(), "other");
  EXPECT_THAT(moved.death_cause(),
              AllOf(HasSubstr("its node died (its agent at "),
                    HasSubstr("is unreachable")));
  EXPECT_EQ(OnFakes([other] { return other->creations.size(); }), 1u);
}

TEST_F(ActorManagerTest, OwnerJobEndingKillsItsActorsButNotDetachedOnes) {
  FakeNode* node = AddNode("n1", 4);
  std::unique_ptr<rpc::BlockingChannel> driver = Connect("driver");
  proto::RegisterJobRequest job;
  job.set_driver_pid(1);
  proto::RegisterJobReply registered;
  ASSERT_TRUE(driver->CallProto(proto::REGISTER_JOB, job, &registered).ok());

  proto::ActorSpec mine = Spec("mine", -1);
  mine.set_job_id(registered.job_id());
  proto::ActorSpec service = Spec("service", -1, "service");
  service.set_job_id(registered.job_id());
  service.set_detached(true);
  ASSERT_TRUE(Create(mine, driver.get()).ok());
  ASSERT_TRUE(Create(service, driver.get()).ok());
  proto::ActorInfo mine_alive = WaitForState("mine", proto::ActorInfo::ALIVE);
  proto::ActorInfo service_alive =
      WaitForState("service", proto::ActorInfo::ALIVE);

  driver.reset();  // the driver exits
  proto::ActorInfo dead = WaitForState("mine", proto::ActorInfo::DEAD);
  EXPECT_EQ(dead.death_cause(),
            absl::StrCat("its owner, ", registered.job_id(), ", ended"));
  WaitUntil([&] { return !KilledLeases(node).empty(); });
  EXPECT_EQ(OnFakes([node, &mine_alive] {
              return node->exits.count(mine_alive.worker_id());
            }),
            1u);

  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  absl::StatusOr<proto::ActorInfo> kept = Get("", "service");
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->state(), proto::ActorInfo::ALIVE);
  EXPECT_EQ(kept->version(), service_alive.version());
  EXPECT_EQ(KilledLeases(node).size(), 1u);
}

}  // namespace
TEST_F(ActorManagerTest, AHeadThatRestartsTakesUpItsActors) {
  FakeNode* node = AddNode("n1", 8);
  proto::ActorSpec detached = Spec("keeper", 1, "keeper");
  detached.set_detached(true);
  ASSERT_TRUE(Create(detached).ok());
  ASSERT_TRUE(Create(Spec("gone", 1)).ok());
  proto::ActorInfo keeper = WaitForState("keeper", proto::ActorInfo::ALIVE);
  proto::ActorInfo gone = WaitForState("gone", proto::ActorInfo::ALIVE);

  // The head goes; meanwhile one actor's worker dies.
  cli_.reset();
  head_->Stop();
  OnFakes([&] {
    node->Crash(gone.worker_id(), "killed by signal 9 (Killed)");
    return 0;
  });
  ASSERT_TRUE(head_->Restart(Options()).ok());
  cli_ = Connect("cli");

  // The live one is taken up in its worker, by id and by name.
  absl::StatusOr<proto::ActorInfo> found = Get("", "keeper");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->spec().actor_id(), "keeper");
  EXPECT_EQ(found->state(), proto::ActorInfo::ALIVE);
  EXPECT_EQ(found->worker_id(), keeper.worker_id());
  WaitUntil(
      [&] { return OnFakes([node] { return node->adoptions.size(); }) >= 1; });
  EXPECT_EQ(OnFakes([node] { return node->adoptions; }),
            std::vector<std::string>{"keeper"});
  // The one whose worker died is made again, as a lost worker is.
  proto::ActorInfo again = WaitForState("gone", proto::ActorInfo::ALIVE, 1);
  EXPECT_NE(again.worker_id(), gone.worker_id());
  EXPECT_THAT(again.death_cause(), HasSubstr("signal 9"));

  // The taken-up worker is watched again: its death restarts the actor.
  OnFakes([&] {
    node->Crash(keeper.worker_id(), "killed by signal 9 (Killed)");
    return 0;
  });
  WaitForState("keeper", proto::ActorInfo::ALIVE, 1);

  // A lease the agent still holds for an actor the head does not know (a
  // head that died was granted it) is returned, its worker killed.
  proto::HeartbeatRequest beat;
  beat.set_node_id("n1");
  proto::LeaseInfo* ghost = beat.add_leases();
  ghost->set_lease_id("n1-lease-ghost");
  ghost->set_actor_id("never-known");
  proto::LeaseInfo* stale = beat.add_leases();
  stale->set_lease_id("n1-lease-stale");
  stale->set_actor_id("keeper");
  proto::HeartbeatReply reply;
  ASSERT_TRUE(cli_->CallProto(proto::HEARTBEAT, beat, &reply).ok());
  WaitUntil([&] {
    auto killed = KilledLeases(node);
    return std::count(killed.begin(), killed.end(), "n1-lease-ghost") == 1;
  });
  // "keeper" is ALIVE in another lease: that stale one goes too.
  WaitUntil([&] {
    auto killed = KilledLeases(node);
    return std::count(killed.begin(), killed.end(), "n1-lease-stale") == 1;
  });
}

}  // namespace shoal
