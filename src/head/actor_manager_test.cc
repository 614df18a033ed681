// The head's actor manager with fake node agents and fake workers: peers of
// an in-memory network (rpc/fake_channel.h) that answer REQUEST_LEASE,
// RETURN_LEASE, GET_WORKER_EXIT and CREATE_ACTOR_INSTANCE as the real ones
// do, and a "cli" channel to the manager's own handlers. Everything runs on
// the test's thread: the test turns the executor and moves its clock.
#include "head/actor_manager.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "head/table_storage.h"
#include "rpc/fake_channel.h"
#include "rpc/rpc.h"
#include "scheduling/resource_set.h"
#include "shoal/shoal.pb.h"

namespace shoal {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kHead[] = "127.0.0.1:6379";
constexpr char kSignal9[] = "killed by signal 9 (Killed)";

ResourceSet Resources(const std::map<std::string, double>& amounts) {
  absl::StatusOr<ResourceSet> set = ResourceSet::FromDoubles(amounts);
  EXPECT_TRUE(set.ok()) << set.status();
  return set.ok() ? *set : ResourceSet();
}

// A node agent and its workers, peers of the test's network.
class FakeNode {
 public:
  FakeNode(rpc::FakeNetwork* network, std::string node_id, std::string address,
           ResourceSet total, int* next_port)
      : network_(network),
        node_id_(std::move(node_id)),
        address_(std::move(address)),
        total_(std::move(total)),
        next_port_(next_port) {
    rpc::FakePeer* s = network_->Listen(address_);
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
  }

  const std::string& address() const { return address_; }
  const std::string& node_id() const { return node_id_; }
  ActorNode AsActorNode() const {
    return ActorNode{node_id_, address_, total_, total_, 0, {}};
  }

  // The worker's process ends with `description`: its connections close.
  void Crash(const std::string& worker_id, const std::string& description) {
    auto it = workers_.find(worker_id);
    if (it == workers_.end() || it->second.empty()) return;
    exits[worker_id] = description;
    network_->Kill(it->second);
    it->second.clear();
  }
  // The agent stops answering (its host is unplugged); workers stay.
  void Unplug() { network_->Kill(address_); }

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
  bool hold_creations = false;    // keep CREATE_ACTOR_INSTANCE unanswered
  bool alive = true;              // as the head sees the node

  std::vector<proto::RequestLeaseRequest> lease_requests;
  std::vector<proto::ActorCreation> creations;  // made in its workers
  std::vector<std::string> creation_workers;    // the worker of each
  std::vector<proto::ReturnLeaseRequest> returns;
  std::vector<std::string> cancels;          // the request ids withdrawn
  std::map<std::string, std::string> exits;  // worker id -> how it ended
  std::vector<std::string> adoptions;        // actors a head took up again
  std::vector<rpc::Responder> held_creations;

 private:
  proto::RequestLeaseReply Grant(const proto::RequestLeaseRequest&) {
    int n = next_++;
    std::string worker_id = absl::StrCat(node_id_, "-w", n);
    std::string lease_id = absl::StrCat(node_id_, "-lease", n);
    std::string address = absl::StrCat("127.0.0.1:", (*next_port_)++);
    rpc::FakePeer* worker = network_->Listen(address);
    rpc::RegisterProto<proto::ActorExitingRequest>(
        worker, proto::ADOPT_ACTOR, [this](const auto& r, rpc::Responder resp) {
          adoptions.push_back(r.actor_id());
          resp.Reply(proto::Empty());
        });
    rpc::RegisterProto<proto::ActorCreation>(
        worker, proto::CREATE_ACTOR_INSTANCE,
        [this, worker_id](const auto& r, rpc::Responder resp) {
          creations.push_back(r);
          creation_workers.push_back(worker_id);
          if (hold_creations) return held_creations.push_back(resp);
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
    reply.set_worker_address(address);
    reply.set_worker_pid(20000 + n);
    reply.set_node_id(node_id_);
    workers_[worker_id] = address;
    lease_workers_[lease_id] = worker_id;
    return reply;
  }

  rpc::FakeNetwork* const network_;
  const std::string node_id_;
  const std::string address_;
  const ResourceSet total_;
  int* const next_port_;
  std::map<std::string, std::string> workers_;  // id -> address ("": gone)
  std::map<std::string, std::string> lease_workers_;
  std::vector<std::pair<proto::RequestLeaseRequest, rpc::Responder>> held_;
  int next_ = 1;
};

class ActorManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    storage_ = NewInMemoryTableStorage();
    StartHead();
  }
  void TearDown() override {
    cli_.reset();
    manager_.reset();
    agent_channels_.clear();
    executor_.RunUntilIdle();
  }

  // A head (its actor manager) serving at kHead, over storage_.
  void StartHead() {
    ActorManagerOptions options;
    // Not owned: the network outlives the manager.
    options.worker_channels = std::shared_ptr<rpc::ChannelFactory>(
        std::shared_ptr<void>(), &network_);
    options.agent_channel = [this](const std::string& address) {
      auto& channel = agent_channels_[address];
      if (channel == nullptr) channel = network_.Connect(address);
      return channel.get();
    };
    options.alive_nodes = [this] {
      std::vector<ActorNode> alive;
      for (const auto& n : nodes_) {
        if (n->alive) alive.push_back(n->AsActorNode());
      }
      return alive;
    };
    options.storage = storage_.get();
    manager_ = std::make_unique<ActorManager>(&executor_, std::move(options));
    manager_->RegisterHandlers(network_.Listen(kHead));
    cli_ = network_.Connect(kHead);
  }
  // The head process ends (its connections close); its storage stays.
  void StopHead() {
    cli_.reset();
    manager_.reset();
    agent_channels_.clear();
    network_.Kill(kHead);
    executor_.RunUntilIdle();
  }

  // A node with `cpus` CPUs (and `extra` resources), alive to the head.
  FakeNode* AddNode(const std::string& node_id, double cpus,
                    std::map<std::string, double> extra = {}) {
    extra["CPU"] = cpus;
    std::string address = absl::StrCat("127.0.0.1:", next_port_++);
    nodes_.push_back(std::make_unique<FakeNode>(&network_, node_id, address,
                                                Resources(extra), &next_port_));
    return nodes_.back().get();
  }

  // A call to the head whose reply may come later: `*out` holds it then.
  template <typename Reply>
  std::shared_ptr<std::optional<absl::StatusOr<Reply>>> Send(
      int method, const google::protobuf::MessageLite& request) {
    auto out = std::make_shared<std::optional<absl::StatusOr<Reply>>>();
    rpc::CallProto<Reply>(cli_.get(), method, request,
                          [out](absl::StatusOr<Reply> r) { *out = r; });
    return out;
  }
  // A call to the head, answered once what it sets going has run.
  template <typename Reply>
  absl::StatusOr<Reply> CallHead(int method,
                                 const google::protobuf::MessageLite& request) {
    auto out = Send<Reply>(method, request);
    executor_.RunUntilIdle();
    if (!out->has_value()) return absl::DeadlineExceededError("no reply yet");
    return **out;
  }

  static proto::ActorSpec Spec(const std::string& id, int max_restarts = 0,
                               const std::string& name = "") {
    proto::ActorSpec spec;
    spec.set_actor_id(id);
    spec.set_name(name);
    spec.set_factory("CreateCounter");
    spec.set_class_name("Counter");
    spec.set_max_restarts(max_restarts);
    spec.set_job_id("job-test");
    spec.set_binary_path("/bin/counter");
    spec.set_binary_hash("abc123");
    spec.set_depth(2);
    return spec;
  }
  absl::StatusOr<proto::ActorInfo> Create(const proto::ActorSpec& spec) {
    return CallHead<proto::ActorInfo>(proto::CREATE_ACTOR, spec);
  }
  static proto::GetActorRequest GetRequest(const std::string& id,
                                           const std::string& name = "",
                                           int64_t after_version = 0,
                                           int64_t wait_ms = 0) {
    proto::GetActorRequest req;
    req.set_actor_id(id);
    req.set_name(name);
    req.set_after_version(after_version);
    req.set_wait_ms(wait_ms);
    return req;
  }
  absl::StatusOr<proto::ActorInfo> Get(const std::string& id,
                                       const std::string& name = "") {
    return CallHead<proto::ActorInfo>(proto::GET_ACTOR, GetRequest(id, name));
  }
  // What the head says of the actor now (ADD_FAILURE if it cannot say).
  proto::ActorInfo Info(const std::string& id) {
    absl::StatusOr<proto::ActorInfo> info = Get(id);
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? *info : proto::ActorInfo();
  }
  absl::Status Kill(const std::string& id, bool no_restart) {
    proto::KillActorRequest kill;
    kill.set_actor_id(id);
    kill.set_no_restart(no_restart);
    return CallHead<proto::Empty>(proto::KILL_ACTOR, kill).status();
  }

  // The lease ids returned to `node` with their workers killed.
  static std::vector<std::string> KilledLeases(const FakeNode* node) {
    std::vector<std::string> out;
    for (const auto& r : node->returns) {
      if (r.kill_worker()) out.push_back(r.lease_id());
    }
    return out;
  }

  rpc::ManualExecutor executor_;
  rpc::FakeNetwork network_{&executor_, "cli"};
  int next_port_ = 7000;
  std::unique_ptr<TableStorage> storage_;
  std::vector<std::unique_ptr<FakeNode>> nodes_;
  std::map<std::string, std::unique_ptr<rpc::Channel>> agent_channels_;
  std::unique_ptr<ActorManager> manager_;
  std::unique_ptr<rpc::Channel> cli_;
};

TEST_F(ActorManagerTest, CreatedActorBecomesAliveInALeasedWorker) {
  FakeNode* node = AddNode("n1", 4);
  auto created = Send<proto::ActorInfo>(proto::CREATE_ACTOR, Spec("a1", 2));
  // The reply leaves before the lease request is answered.
  executor_.RunUntilIdle();
  ASSERT_TRUE(created->has_value());
  ASSERT_TRUE(created->value().ok()) << created->value().status();
  EXPECT_EQ(created->value()->state(), proto::ActorInfo::PENDING);
  EXPECT_EQ(created->value()->spec().class_name(), "Counter");

  proto::ActorInfo info = Info("a1");
  EXPECT_EQ(info.state(), proto::ActorInfo::ALIVE);
  EXPECT_EQ(info.node_id(), "n1");
  EXPECT_EQ(info.worker_id(), "n1-w1");
  EXPECT_EQ(info.pid(), 20001);
  EXPECT_THAT(info.address(), HasSubstr("127.0.0.1:"));
  EXPECT_EQ(info.num_restarts(), 0);
  EXPECT_GT(info.version(), created->value()->version());

  ASSERT_EQ(node->lease_requests.size(), 1u);
  const auto& request = node->lease_requests[0];
  EXPECT_EQ(request.actor_id(), "a1");
  EXPECT_EQ(request.job_id(), "job-test");
  EXPECT_EQ(request.binary_path(), "/bin/counter");
  EXPECT_EQ(request.binary_hash(), "abc123");
  EXPECT_EQ(request.depth(), 2);
  EXPECT_FALSE(request.no_spillback());
  ASSERT_EQ(node->creations.size(), 1u);
  EXPECT_EQ(node->creations[0].spec().actor_id(), "a1");
  EXPECT_EQ(node->creations[0].spec().factory(), "CreateCounter");
  EXPECT_EQ(node->creations[0].num_restarts(), 0);

  // The cluster status lists it, with its age on the loop's clock.
  executor_.AdvanceMs(1500);
  proto::ClusterStatus status;
  manager_->AddToStatus(&status);
  ASSERT_EQ(status.actors_size(), 1);
  EXPECT_EQ(status.actors(0).spec().actor_id(), "a1");
  EXPECT_EQ(status.actors(0).state(), proto::ActorInfo::ALIVE);
  EXPECT_EQ(status.actors(0).age_ms(), 1500);
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
  EXPECT_EQ(Get("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ActorManagerTest, LongPollIsWokenByAChange) {
  AddNode("n1", 4);
  ASSERT_TRUE(Create(Spec("a1")).ok());
  proto::ActorInfo alive = Info("a1");
  ASSERT_EQ(alive.state(), proto::ActorInfo::ALIVE);

  // Nothing changes: the poll answers after wait_ms with what it is.
  auto same = Send<proto::ActorInfo>(
      proto::GET_ACTOR, GetRequest("a1", "", alive.version(), 300));
  executor_.AdvanceMs(299);
  EXPECT_FALSE(same->has_value());
  executor_.AdvanceMs(1);
  ASSERT_TRUE(same->has_value());
  ASSERT_TRUE(same->value().ok()) << same->value().status();
  EXPECT_EQ(same->value()->version(), alive.version());

  // A kill wakes a poll that would wait 20 s, at once.
  auto woken = Send<proto::ActorInfo>(
      proto::GET_ACTOR, GetRequest("a1", "", alive.version(), 20000));
  executor_.RunUntilIdle();
  EXPECT_FALSE(woken->has_value());
  ASSERT_TRUE(Kill("a1", /*no_restart=*/true).ok());
  ASSERT_TRUE(woken->has_value());
  ASSERT_TRUE(woken->value().ok()) << woken->value().status();
  EXPECT_EQ(woken->value()->state(), proto::ActorInfo::DEAD);
  EXPECT_GT(woken->value()->version(), alive.version());

  // A dead actor will not change: a poll of it answers at once.
  absl::StatusOr<proto::ActorInfo> dead = CallHead<proto::ActorInfo>(
      proto::GET_ACTOR, GetRequest("a1", "", woken->value()->version(), 20000));
  ASSERT_TRUE(dead.ok()) << dead.status();
  EXPECT_EQ(dead->state(), proto::ActorInfo::DEAD);
}

TEST_F(ActorManagerTest, ALostWorkerIsReplacedUntilRestartsAreUsedUp) {
  FakeNode* node = AddNode("n1", 4);
  ASSERT_TRUE(Create(Spec("a1", /*max_restarts=*/1)).ok());
  proto::ActorInfo first = Info("a1");
  ASSERT_EQ(first.state(), proto::ActorInfo::ALIVE);

  // Its process dies: RESTARTING (what a poll waiting then sees), then ALIVE
  // in a new worker.
  auto change = Send<proto::ActorInfo>(
      proto::GET_ACTOR, GetRequest("a1", "", first.version(), 5000));
  executor_.RunUntilIdle();
  node->Crash(first.worker_id(), kSignal9);
  executor_.RunUntilIdle();
  ASSERT_TRUE(change->has_value());
  ASSERT_TRUE(change->value().ok()) << change->value().status();
  EXPECT_EQ(change->value()->state(), proto::ActorInfo::RESTARTING);
  EXPECT_EQ(change->value()->death_cause(), kSignal9);
  EXPECT_EQ(change->value()->num_restarts(), 1);
  proto::ActorInfo second = Info("a1");
  EXPECT_EQ(second.state(), proto::ActorInfo::ALIVE);
  EXPECT_EQ(second.num_restarts(), 1);
  EXPECT_NE(second.worker_id(), first.worker_id());
  ASSERT_EQ(node->creations.size(), 2u);
  EXPECT_EQ(node->creations[1].num_restarts(), 1);

  // Again: no restarts left.
  node->Crash(second.worker_id(), kSignal9);
  executor_.RunUntilIdle();
  proto::ActorInfo dead = Info("a1");
  EXPECT_EQ(dead.state(), proto::ActorInfo::DEAD);
  EXPECT_EQ(dead.death_cause(),
            "its process died (killed by signal 9 (Killed)) and its restarts "
            "are used up (max_restarts=1)");
  EXPECT_EQ(dead.node_id(), "n1");
  EXPECT_TRUE(dead.address().empty());
  EXPECT_EQ(node->creations.size(), 2u);
}

// The worker dies while the head waits for it to make the instance: the
// actor is placed again as for any lost worker.
TEST_F(ActorManagerTest, AWorkerThatDiesMakingTheInstanceIsReplaced) {
  FakeNode* node = AddNode("n1", 4);
  node->hold_creations = true;
  ASSERT_TRUE(Create(Spec("a1", /*max_restarts=*/1)).ok());
  ASSERT_EQ(node->held_creations.size(), 1u);
  EXPECT_EQ(Info("a1").state(), proto::ActorInfo::PENDING);
  node->hold_creations = false;
  node->Crash("n1-w1", kSignal9);
  executor_.RunUntilIdle();
  EXPECT_FALSE(node->held_creations[0].connected());
  proto::ActorInfo info = Info("a1");
  EXPECT_EQ(info.state(), proto::ActorInfo::ALIVE);
  EXPECT_EQ(info.worker_id(), "n1-w2");
}

TEST_F(ActorManagerTest, KillWithoutRestartEndsTheWorker) {
  FakeNode* node = AddNode("n1", 4);
  ASSERT_TRUE(Create(Spec("a1", /*max_restarts=*/-1)).ok());
  ASSERT_EQ(Info("a1").state(), proto::ActorInfo::ALIVE);
  ASSERT_TRUE(Kill("a1", /*no_restart=*/true).ok());
  proto::ActorInfo info = Info("a1");
  EXPECT_EQ(info.state(), proto::ActorInfo::DEAD);
  EXPECT_EQ(info.death_cause(), "killed by shoal::Kill");
  EXPECT_THAT(KilledLeases(node), ElementsAre("n1-lease1"));
  // It stays dead: no new lease, however long.
  executor_.AdvanceMs(5000);
  EXPECT_EQ(node->lease_requests.size(), 1u);

  EXPECT_EQ(Kill("no-such-actor", /*no_restart=*/true).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(ActorManagerTest, KillWithRestartMakesANewInstance) {
  FakeNode* node = AddNode("n1", 4);
  ASSERT_TRUE(Create(Spec("a1", /*max_restarts=*/1)).ok());
  ASSERT_EQ(Info("a1").state(), proto::ActorInfo::ALIVE);
  ASSERT_TRUE(Kill("a1", /*no_restart=*/false).ok());
  proto::ActorInfo info = Info("a1");
  EXPECT_EQ(info.state(), proto::ActorInfo::ALIVE);
  EXPECT_EQ(info.num_restarts(), 1);
  EXPECT_EQ(info.death_cause(), "killed by shoal::Kill");
  EXPECT_THAT(KilledLeases(node), ElementsAre("n1-lease1"));
}

TEST_F(ActorManagerTest, ExitActorEndsIt) {
  FakeNode* node = AddNode("n1", 4);
  ASSERT_TRUE(Create(Spec("a1", /*max_restarts=*/3)).ok());
  proto::ActorInfo alive = Info("a1");
  proto::ActorExitingRequest exiting;
  exiting.set_actor_id("a1");
  exiting.set_worker_id(alive.worker_id());
  ASSERT_TRUE(CallHead<proto::Empty>(proto::ACTOR_EXITING, exiting).ok());
  proto::ActorInfo dead = Info("a1");
  EXPECT_EQ(dead.state(), proto::ActorInfo::DEAD);
  EXPECT_EQ(dead.death_cause(),
            "the actor exited: it called exit_actor() (shoal::ExitActor)");
  EXPECT_FALSE(KilledLeases(node).empty());
}

TEST_F(ActorManagerTest, ConstructorFailureIsFinal) {
  FakeNode* node = AddNode("n1", 4);
  node->constructor_error = "boom";
  ASSERT_TRUE(Create(Spec("a1", /*max_restarts=*/5)).ok());
  proto::ActorInfo dead = Info("a1");
  EXPECT_EQ(dead.state(), proto::ActorInfo::DEAD);
  EXPECT_EQ(dead.death_cause(),
            "the constructor raised: boom (std::runtime_error)");
  EXPECT_THAT(KilledLeases(node), ElementsAre("n1-lease1"));
}

TEST_F(ActorManagerTest, InfeasibleActorIsDead) {
  FakeNode* node = AddNode("n1", 4);
  node->lease_reply = [](const proto::RequestLeaseRequest&) {
    proto::RequestLeaseReply reply;
    reply.set_outcome(proto::RequestLeaseReply::INFEASIBLE);
    reply.set_error("no node has 1 GPU; the largest has 0");
    return std::optional<proto::RequestLeaseReply>(reply);
  };
  proto::ActorSpec spec = Spec("a1", 3);
  Resources({{"GPU", 1}}).ToProto(spec.mutable_shape());
  ASSERT_TRUE(Create(spec).ok());
  proto::ActorInfo dead = Info("a1");
  EXPECT_EQ(dead.state(), proto::ActorInfo::DEAD);
  EXPECT_TRUE(dead.infeasible());
  EXPECT_EQ(dead.death_cause(), "no node has 1 GPU; the largest has 0");
  ASSERT_EQ(node->lease_requests.size(), 1u);
  EXPECT_EQ(ResourceSet::FromProto(node->lease_requests[0].shape()),
            Resources({{"GPU", 1}}));
}

TEST_F(ActorManagerTest, StartFailuresAreRetriedThreeTimes) {
  FakeNode* node = AddNode("n1", 4);
  node->lease_reply = [](const proto::RequestLeaseRequest&) {
    proto::RequestLeaseReply reply;
    reply.set_outcome(proto::RequestLeaseReply::FAILED);
    reply.set_error("exec failed: no such file");
    return std::optional<proto::RequestLeaseReply>(reply);
  };
  ASSERT_TRUE(Create(Spec("a1")).ok());
  // One try now, one more every retry_ms (200).
  EXPECT_EQ(node->lease_requests.size(), 1u);
  executor_.AdvanceMs(200);
  EXPECT_EQ(node->lease_requests.size(), 2u);
  executor_.AdvanceMs(400);
  proto::ActorInfo dead = Info("a1");
  EXPECT_EQ(dead.state(), proto::ActorInfo::DEAD);
  EXPECT_FALSE(dead.infeasible());
  EXPECT_THAT(dead.death_cause(),
              AllOf(HasSubstr("could not be started"),
                    HasSubstr("exec failed: no such file")));
  EXPECT_EQ(node->lease_requests.size(), 4u);
}

TEST_F(ActorManagerTest, FollowsSpillback) {
  FakeNode* busy = AddNode("busy", 8);  // most free CPU: asked first
  FakeNode* idle = AddNode("idle", 2);
  std::string idle_address = idle->address();
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
  ASSERT_TRUE(Create(Spec("a1")).ok());
  proto::ActorInfo info = Info("a1");
  EXPECT_EQ(info.state(), proto::ActorInfo::ALIVE);
  EXPECT_EQ(info.node_id(), "idle");
  ASSERT_EQ(idle->lease_requests.size(), 1u);
  EXPECT_TRUE(idle->lease_requests[0].no_spillback());
}

TEST_F(ActorManagerTest, AWaitingRequestMovesToANodeWithRoom) {
  FakeNode* busy = AddNode("busy", 8, {{"slot", 1}});  // asked first
  FakeNode* roomy = AddNode("roomy", 2, {{"slot", 1}});
  busy->hold_leases = true;
  proto::ActorSpec spec = Spec("a1");
  Resources({{"slot", 1}}).ToProto(spec.mutable_shape());
  ASSERT_TRUE(Create(spec).ok());
  // It waits at the busy node until waiting_check_ms (1 s) has passed.
  executor_.AdvanceMs(999);
  EXPECT_TRUE(busy->cancels.empty());
  EXPECT_EQ(Info("a1").state(), proto::ActorInfo::PENDING);
  executor_.AdvanceMs(1);
  proto::ActorInfo info = Info("a1");
  EXPECT_EQ(info.state(), proto::ActorInfo::ALIVE);
  EXPECT_EQ(info.node_id(), "roomy");
  // The request that waited at the busy node was withdrawn there, not left
  // behind: nothing is held there and no worker started.
  ASSERT_EQ(busy->lease_requests.size(), 1u);
  EXPECT_FALSE(busy->lease_requests[0].request_id().empty());
  EXPECT_THAT(busy->cancels, ElementsAre(busy->lease_requests[0].request_id()));
  busy->GrantHeld();
  executor_.RunUntilIdle();
  EXPECT_TRUE(busy->creations.empty());
  EXPECT_TRUE(KilledLeases(busy).empty());
  EXPECT_EQ(roomy->creations.size(), 1u);
}

TEST_F(ActorManagerTest, AKilledWaitingActorWithdrawsItsRequest) {
  FakeNode* node = AddNode("n1", 8);
  node->hold_leases = true;
  ASSERT_TRUE(Create(Spec("a1")).ok());
  ASSERT_EQ(node->lease_requests.size(), 1u);
  ASSERT_TRUE(Kill("a1", /*no_restart=*/true).ok());
  EXPECT_THAT(node->cancels, ElementsAre(node->lease_requests[0].request_id()));
  EXPECT_EQ(Info("a1").state(), proto::ActorInfo::DEAD);
}

// A grant that crossed the cancel of a killed actor's request reaches an
// attempt that is over: its lease goes back with the worker killed.
TEST_F(ActorManagerTest, AGrantAfterTheActorWasKilledIsReturned) {
  FakeNode* node = AddNode("n1", 8);
  node->hold_leases = true;
  ASSERT_TRUE(Create(Spec("a1")).ok());
  node->hold_leases = false;
  // The node grants before the cancel reaches it: the cancel finds nothing.
  proto::KillActorRequest kill;
  kill.set_actor_id("a1");
  kill.set_no_restart(true);
  auto killed = Send<proto::Empty>(proto::KILL_ACTOR, kill);
  node->GrantHeld();
  executor_.RunUntilIdle();
  ASSERT_TRUE(killed->has_value());
  EXPECT_EQ(Info("a1").state(), proto::ActorInfo::DEAD);
  EXPECT_THAT(KilledLeases(node), ElementsAre("n1-lease1"));
  EXPECT_TRUE(node->creations.empty());
}

TEST_F(ActorManagerTest, NodeDeathMovesTheActor) {
  FakeNode* doomed = AddNode("doomed", 8);  // most free CPU: used first
  FakeNode* other = AddNode("other", 2);
  ASSERT_TRUE(Create(Spec("a1", /*max_restarts=*/1)).ok());
  ASSERT_EQ(Info("a1").node_id(), "doomed");

  // The host goes away: its agent stops answering, then the head declares
  // the node dead. Its worker's connection stays up (a hung host).
  doomed->Unplug();
  doomed->alive = false;
  manager_->OnNodeDead("doomed", "host unplugged");
  executor_.RunUntilIdle();

  proto::ActorInfo moved = Info("a1");
  EXPECT_EQ(moved.state(), proto::ActorInfo::ALIVE);
  EXPECT_EQ(moved.num_restarts(), 1);
  EXPECT_EQ(moved.node_id(), "other");
  EXPECT_EQ(moved.death_cause(), "its node died (host unplugged)");
  ASSERT_EQ(other->creations.size(), 1u);
  EXPECT_EQ(other->creations[0].num_restarts(), 1);
}

TEST_F(ActorManagerTest, AgentDeathMovesTheActorBeforeTheNodeIsDeclaredDead) {
  FakeNode* doomed = AddNode("doomed", 8);  // most free CPU: used first
  FakeNode* other = AddNode("other", 2);
  ASSERT_TRUE(Create(Spec("a1", /*max_restarts=*/1)).ok());
  proto::ActorInfo first = Info("a1");
  ASSERT_EQ(first.node_id(), "doomed");

  // The agent and its workers die; the head has not noticed the node (it
  // is still alive to it), but the actor moves at once.
  doomed->Unplug();
  doomed->Crash(first.worker_id(), kSignal9);
  executor_.RunUntilIdle();
  proto::ActorInfo moved = Info("a1");
  EXPECT_EQ(moved.state(), proto::ActorInfo::ALIVE);
  EXPECT_EQ(moved.num_restarts(), 1);
  EXPECT_EQ(moved.node_id(), "other");
  EXPECT_THAT(moved.death_cause(),
              AllOf(HasSubstr("its node died (its agent at "),
                    HasSubstr("is unreachable")));
  EXPECT_EQ(other->creations.size(), 1u);
}

TEST_F(ActorManagerTest, OwnerJobEndingKillsItsActorsButNotDetachedOnes) {
  FakeNode* node = AddNode("n1", 4);
  proto::ActorSpec mine = Spec("mine", -1);
  mine.set_job_id("job-7");
  proto::ActorSpec service = Spec("service", -1, "service");
  service.set_job_id("job-7");
  service.set_detached(true);
  ASSERT_TRUE(Create(mine).ok());
  ASSERT_TRUE(Create(service).ok());
  proto::ActorInfo mine_alive = Info("mine");
  proto::ActorInfo service_alive = Info("service");
  ASSERT_EQ(mine_alive.state(), proto::ActorInfo::ALIVE);
  ASSERT_EQ(service_alive.state(), proto::ActorInfo::ALIVE);

  manager_->OnJobEnded("job-7");  // the driver exits
  executor_.RunUntilIdle();
  proto::ActorInfo dead = Info("mine");
  EXPECT_EQ(dead.state(), proto::ActorInfo::DEAD);
  EXPECT_EQ(dead.death_cause(), "its owner, job-7, ended");
  EXPECT_EQ(node->exits.count(mine_alive.worker_id()), 1u);

  executor_.AdvanceMs(200);
  absl::StatusOr<proto::ActorInfo> kept = Get("", "service");
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->state(), proto::ActorInfo::ALIVE);
  EXPECT_EQ(kept->version(), service_alive.version());
  EXPECT_EQ(KilledLeases(node).size(), 1u);
}

TEST_F(ActorManagerTest, AnActorsRestartEndsTheActorsItOwnsAndTheirs) {
  FakeNode* node = AddNode("n1", 8);
  ASSERT_TRUE(Create(Spec("parent", /*max_restarts=*/1)).ok());
  proto::ActorSpec child = Spec("child", /*max_restarts=*/-1);
  child.set_owner_actor_id("parent");
  proto::ActorSpec grandchild = Spec("grandchild", /*max_restarts=*/-1);
  grandchild.set_owner_actor_id("child");
  proto::ActorSpec service = Spec("service", /*max_restarts=*/-1, "service");
  service.set_owner_actor_id("parent");
  service.set_detached(true);
  for (const proto::ActorSpec& spec : {child, grandchild, service}) {
    ASSERT_TRUE(Create(spec).ok());
    ASSERT_EQ(Info(spec.actor_id()).state(), proto::ActorInfo::ALIVE);
  }

  // The parent restarts: its process ended, and its actors with it.
  ASSERT_TRUE(Kill("parent", /*no_restart=*/false).ok());
  executor_.RunUntilIdle();
  EXPECT_EQ(Info("parent").state(), proto::ActorInfo::ALIVE);
  for (const char* id : {"child", "grandchild"}) {
    proto::ActorInfo dead = Info(id);
    EXPECT_EQ(dead.state(), proto::ActorInfo::DEAD) << id;
    EXPECT_THAT(dead.death_cause(), HasSubstr("its owner, actor ")) << id;
  }
  EXPECT_EQ(Info("service").state(), proto::ActorInfo::ALIVE);
  // The parent's old worker and both owned actors' workers were ended.
  EXPECT_EQ(KilledLeases(node).size(), 3u);
}

TEST_F(ActorManagerTest, AHeadThatRestartsTakesUpItsActors) {
  FakeNode* node = AddNode("n1", 8);
  proto::ActorSpec detached = Spec("keeper", 1, "keeper");
  detached.set_detached(true);
  ASSERT_TRUE(Create(detached).ok());
  ASSERT_TRUE(Create(Spec("gone", 1)).ok());
  proto::ActorInfo keeper = Info("keeper");
  proto::ActorInfo gone = Info("gone");
  ASSERT_EQ(keeper.state(), proto::ActorInfo::ALIVE);
  ASSERT_EQ(gone.state(), proto::ActorInfo::ALIVE);

  // The head goes; meanwhile one actor's worker dies.
  StopHead();
  node->Crash(gone.worker_id(), kSignal9);
  executor_.RunUntilIdle();
  StartHead();
  manager_->Restore();
  executor_.RunUntilIdle();

  // The live one is taken up in its worker, by id and by name.
  absl::StatusOr<proto::ActorInfo> found = Get("", "keeper");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->spec().actor_id(), "keeper");
  EXPECT_EQ(found->state(), proto::ActorInfo::ALIVE);
  EXPECT_EQ(found->worker_id(), keeper.worker_id());
  EXPECT_EQ(node->adoptions, std::vector<std::string>{"keeper"});
  // The one whose worker died is made again, as a lost worker is.
  proto::ActorInfo again = Info("gone");
  EXPECT_EQ(again.state(), proto::ActorInfo::ALIVE);
  EXPECT_EQ(again.num_restarts(), 1);
  EXPECT_NE(again.worker_id(), gone.worker_id());
  EXPECT_THAT(again.death_cause(), HasSubstr("signal 9"));

  // The taken-up worker is watched again: its death restarts the actor.
  node->Crash(keeper.worker_id(), kSignal9);
  executor_.RunUntilIdle();
  proto::ActorInfo restarted = Info("keeper");
  EXPECT_EQ(restarted.state(), proto::ActorInfo::ALIVE);
  EXPECT_EQ(restarted.num_restarts(), 1);

  // A lease the agent still holds for an actor the head does not know (a
  // head that died was granted it) is returned, its worker killed; so is
  // one of "keeper", which is ALIVE in another lease.
  google::protobuf::RepeatedPtrField<proto::LeaseInfo> leases;
  proto::LeaseInfo* ghost = leases.Add();
  ghost->set_lease_id("n1-lease-ghost");
  ghost->set_actor_id("never-known");
  proto::LeaseInfo* stale = leases.Add();
  stale->set_lease_id("n1-lease-stale");
  stale->set_actor_id("keeper");
  proto::LeaseInfo* current = leases.Add();
  current->set_lease_id(
      absl::StrCat("n1-lease", restarted.worker_id().substr(4)));
  current->set_actor_id("keeper");
  manager_->OnNodeLeases(node->address(), leases);
  executor_.RunUntilIdle();
  std::vector<std::string> killed = KilledLeases(node);
  EXPECT_EQ(std::count(killed.begin(), killed.end(), "n1-lease-ghost"), 1);
  EXPECT_EQ(std::count(killed.begin(), killed.end(), "n1-lease-stale"), 1);
  EXPECT_EQ(std::count(killed.begin(), killed.end(), current->lease_id()), 0);
}

}  // namespace
}  // namespace shoal
