// rpc_frame: what a Shoal RPC server reads from a connection (frames split
// anywhere by TCP), the request messages its handlers parse, and what an
// rpc::Channel reads from a server in answer to its calls.
//
// Input: byte 0 % (kNumRequestTypes + 2) picks what the rest is.
//   - kStreamSelector: bytes that a client sends to a real rpc::Server (on
//     127.0.0.1, cluster token "fuzz-token", stats on) over one connection.
//     Byte 1 % 9 = K, then K bytes give write lengths (each byte + 1),
//     cycled; the server reads each write before the next is sent, so
//     frames reach it cut at those points. The server's handlers are the
//     request types below, registered with rpc::RegisterProto as the head
//     and agents register theirs.
//   - kChannelSelector: the bytes a server answers an rpc::Channel with,
//     written as above, after the channel made three calls (call ids 1, 2
//     and 3: KV_GET, LIST_TASKS and GET_SERVER_STATS).
//   - otherwise: the payload of request type kRequestTypes[that number],
//     parsed with rpc::ParseMessage and, when it parses, used as the head
//     or an agent uses it (resources, placement, bundles, task events,
//     gangs).
// The state the requests change (a node's resources, task records, gangs)
// is fresh for each input.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "agent/bundle_reservations.h"
#include "agent/node_resources.h"
#include "common/task_event_record.h"
#include "fuzz/fuzz_targets.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/message.h"
#include "google/protobuf/stubs/logging.h"
#include "head/gang_table.h"
#include "head/task_event_store.h"
#include "object_store/format_util.h"
#include "rpc/event_loop.h"
#include "rpc/frame.h"
#include "rpc/rpc.h"
#include "scheduling/placement.h"
#include "scheduling/resource_set.h"
#include "shoal/shoal.pb.h"

namespace shoal::fuzz {
namespace {

// The cluster token of the harness's server.
constexpr char kRpcFuzzToken[] = "fuzz-token";

// What requests change. The sizes are small so that inputs reach eviction.
struct NodeState {
  NodeState() : bundles("fuzz-node", &node) {
    node.total.Set("CPU", 8 * kResourceUnit);
    node.total.Set("GPU", 2 * kResourceUnit);
    node.total.Set("memory", (int64_t{1} << 30) * kResourceUnit);
    node.available = node.total;
    initial = node;
  }

  TaskEventStore task_events{/*max_per_job=*/4, /*max_total=*/8};
  GangTable gangs{/*max_gangs=*/3};
  agent::NodeResources node;
  agent::NodeResources initial;
  agent::BundleReservations bundles;
  std::set<std::string> placement_groups;  // seen in bundle requests
};

// Other nodes, as the head sees them when it places a group or explains
// why a demand fits nowhere.
std::vector<PlacementNode> PeerNodes() {
  PlacementNode small{"n1", {}};
  small.available.Set("CPU", 4 * kResourceUnit);
  PlacementNode large{"n2", {}};
  large.available.Set("CPU", 64 * kResourceUnit);
  large.available.Set("GPU", 8 * kResourceUnit);
  large.available.Set("TPU", 4 * kResourceUnit);
  return {small, large};
}

// What every use of a resource map from a peer goes through.
ResourceSet UseResources(const proto::ResourceMap& map) {
  ResourceSet set = ResourceSet::FromProto(map);
  for (const auto& [name, fixed] : set.amounts()) {
    SHOAL_FUZZ_CHECK(!name.empty() && fixed > 0);
    FormatQuantity(name, fixed);
    BundleResource bundle;
    ParseBundleResource(name, &bundle);
  }
  set.DebugString();
  WithoutBundleResources(set);
  proto::ResourceMap back;
  set.ToProto(&back);
  SHOAL_FUZZ_CHECK(ResourceSet::FromProto(back) == set);
  return set;
}

void ExplainInfeasible(const ResourceSet& demand) {
  std::vector<NodeTotals> nodes;
  for (const PlacementNode& n : PeerNodes()) {
    nodes.push_back({n.node_id, n.available});
  }
  DescribeInfeasible(demand, nodes);
}

// ---- How the head and agents use each request ----

template <typename Request>
void Use(const Request&, NodeState*) {}

void Use(const proto::RegisterNodeRequest& r, NodeState* state) {
  ResourceSet total = UseResources(r.node().total());
  ResourceSet available = UseResources(r.node().available());
  total.Contains(available);
  total.MissingFor(available);
  DescribeInfeasible(state->node.total, {{r.node().node_id(), total}});
}

void Use(const proto::HeartbeatRequest& r, NodeState* state) {
  ResourceSet available = UseResources(r.available());
  ResourceSet total = UseResources(r.total());
  for (const proto::ResourceDemand& d : r.demands()) {
    ResourceSet shape = UseResources(d.shape());
    available.Contains(shape);
    if (!total.Contains(shape)) ExplainInfeasible(shape);
  }
  for (const proto::LeaseInfo& lease : r.leases()) {
    state->node.CanGrant(UseResources(lease.shape()));
  }
}

void Use(const proto::PlacementGroupSpec& spec, NodeState*) {
  // As the head's CREATE_PLACEMENT_GROUP checks it, then places it.
  if (spec.bundles().empty()) return;
  std::vector<ResourceSet> bundles;
  for (const proto::ResourceMap& b : spec.bundles()) {
    bundles.push_back(UseResources(b));
    if (bundles.back().empty()) return;
  }
  auto strategy = static_cast<PlacementStrategy>(spec.strategy());
  StrategyName(strategy);
  std::vector<PlacementNode> nodes = PeerNodes();
  auto placed = PlaceBundles(bundles, strategy, nodes);
  if (!placed.has_value()) return;
  SHOAL_FUZZ_CHECK(placed->size() == bundles.size());
  // Each node holds what was placed on it (summed here in 128 bits, so
  // that no overflow can hide a bundle).
  for (const PlacementNode& node : nodes) {
    std::map<std::string, __int128> held;
    for (size_t i = 0; i < bundles.size(); ++i) {
      if ((*placed)[i] != node.node_id) continue;
      for (const auto& [name, fixed] : bundles[i].amounts()) {
        held[name] += fixed;
      }
    }
    for (const auto& [name, amount] : held) {
      SHOAL_FUZZ_CHECK(amount <= node.available.Get(name));
    }
  }
}

void PrepareBundles(const proto::BundleReservation& r, NodeState* state) {
  // As the agent's PREPARE_BUNDLES reads the request.
  std::vector<agent::BundleReservations::Bundle> bundles;
  for (int i = 0; i < r.indices_size() && i < r.bundles_size(); ++i) {
    bundles.emplace_back(r.indices(i), UseResources(r.bundles(i)));
  }
  state->placement_groups.insert(r.pg_id());
  const ResourceSet before = state->node.available;
  if (!state->bundles.Prepare(r.pg_id(), bundles).ok()) return;
  // A prepare only takes from what is free.
  for (const auto& [name, amount] : state->node.available.amounts()) {
    SHOAL_FUZZ_CHECK(amount <= before.Get(name));
  }
}

void CommitBundles(const proto::BundleReservation& r, NodeState* state) {
  state->placement_groups.insert(r.pg_id());
  state->bundles.Commit(r.pg_id()).IgnoreError();
}

void CancelBundles(const proto::BundleReservation& r, NodeState* state) {
  state->bundles.Cancel(r.pg_id());
}

// Cancelling every group gives the node back all it had.
void CheckBundlesReturned(NodeState* state) {
  for (const std::string& pg : state->placement_groups) {
    state->bundles.Cancel(pg);
  }
  SHOAL_FUZZ_CHECK(state->node.total == state->initial.total);
  SHOAL_FUZZ_CHECK(state->node.available == state->initial.available);
}

void Use(const proto::BundleReservation& r, NodeState* state) {
  PrepareBundles(r, state);
  CommitBundles(r, state);
  CheckBundlesReturned(state);
}

// The records the store keeps agree with what it answers.
void CheckTaskRecords(const TaskEventStore& store) {
  proto::ListTasksRequest all;
  all.set_limit(1 << 30);
  absl::StatusOr<proto::TaskList> list = store.List(all);
  SHOAL_FUZZ_CHECK(list.ok());
  SHOAL_FUZZ_CHECK(list->total() == static_cast<int64_t>(store.size()));
  SHOAL_FUZZ_CHECK(list->tasks_size() == list->total());
  SHOAL_FUZZ_CHECK(store.size() <= 8);
  // Counts of states a task leaves are of the tasks in them now.
  for (int s = 1; s < kNumTaskStates; ++s) {
    auto state = static_cast<TaskState>(s);
    if (IsTerminal(state)) continue;
    int64_t in_state = std::count_if(
        list->tasks().begin(), list->tasks().end(),
        [state](const proto::TaskEvent& e) { return e.state() == state; });
    SHOAL_FUZZ_CHECK(list->state_counts().at(
                         proto::TaskEvent::State_Name(state)) == in_state);
  }
}

void Use(const proto::TaskEventBatch& batch, NodeState* state) {
  state->task_events.Add(batch);
  // A reporter whose reply was lost sends the batch again.
  state->task_events.Add(batch);
  CheckTaskRecords(state->task_events);
  // The head folds reports of one task into one record; a report of an
  // earlier attempt leaves it as it was.
  for (int i = 0; i + 1 < batch.events_size() && i < 16; ++i) {
    proto::TaskEvent record = batch.events(i);
    const proto::TaskEvent& event = batch.events(i + 1);
    MergeTaskEvent(event, &record);
    if (event.attempt() >= batch.events(i).attempt()) {
      SHOAL_FUZZ_CHECK(record.state_times_ms_size() >= kNumTaskStates);
      SHOAL_FUZZ_CHECK(record.attempt() == event.attempt());
    }
  }
}

void Use(const proto::ListTasksRequest& request, NodeState* state) {
  proto::TaskEventBatch batch;
  batch.set_job_id("01000000");
  for (int i = 0; i < 3; ++i) {
    proto::TaskEvent* e = batch.add_events();
    e->set_task_id("task" + std::to_string(i));
    e->set_name(i == 0 ? "Square" : "Train");
    e->set_state(i == 2 ? proto::TaskEvent::FAILED : proto::TaskEvent::RUNNING);
    e->set_node_id("n1");
  }
  state->task_events.Add(batch);
  state->task_events.List(request).IgnoreError();
}

void Use(const proto::GangInfo& gang, NodeState* state) {
  state->gangs.Update(gang);
  state->gangs.JobEnded(gang.driver_job_id());
  state->gangs.List();
}

void Use(const proto::JobSpec& spec, NodeState* state) {
  ResourceSet need = UseResources(spec.entrypoint_resources());
  state->node.total.Contains(need);
  state->node.available.Contains(need);
}

void Use(const proto::ActorSpec& spec, NodeState* state) {
  ResourceSet shape = UseResources(spec.shape());
  if (!state->node.total.Contains(shape)) ExplainInfeasible(shape);
}

void Use(const proto::ActorCreation& creation, NodeState* state) {
  Use(creation.spec(), state);
}

void Use(const proto::RequestLeaseRequest& r, NodeState* state) {
  ResourceSet shape = UseResources(r.shape());
  state->node.CanGrant(shape);
  if (!state->node.total.Contains(shape)) ExplainInfeasible(shape);
}

void Use(const proto::ObjectRequest& r, NodeState*) {
  // How the agent names them in its answers and logs.
  object_store::FormatId(r.object_id());
  object_store::FormatBytes(r.data_size() + r.metadata_size());
}

void Use(const proto::ObjectPullRequest& r, NodeState*) {
  object_store::FormatId(r.object().object_id());
  object_store::FormatBytes(r.object().data_size());
}

// ---- The request types ----

struct RequestType {
  const google::protobuf::Descriptor* (*descriptor)();
  int method;  // one that the head, an agent or a worker serves it under
  void (*parse_and_use)(std::string_view payload, NodeState* state);
  void (*register_handler)(rpc::Server* server, int method);
};

// Set while a connection of the harness is open; used on the server's loop.
NodeState* g_state = nullptr;

template <typename Request>
void ParseAndUse(std::string_view payload, NodeState* state) {
  Request request;
  if (!rpc::ParseMessage(payload, &request)) return;
  // What parsed serializes into what parses (a head forwards requests).
  Request again;
  SHOAL_FUZZ_CHECK(rpc::ParseMessage(rpc::Serialize(request), &again));
  Use(request, state);
}

template <typename Request>
void RegisterUse(rpc::Server* server, int method,
                 void (*use)(const Request&, NodeState*)) {
  rpc::RegisterProto<Request>(server, method,
                              [use](const Request& request, rpc::Responder r) {
                                if (g_state != nullptr) use(request, g_state);
                                r.Reply(proto::Empty());
                              });
}

template <typename Request>
void RegisterHandler(rpc::Server* server, int method) {
  RegisterUse<Request>(server, method, &Use);
}

template <>
void RegisterHandler<proto::BundleReservation>(rpc::Server* server, int) {
  RegisterUse<proto::BundleReservation>(server, proto::PREPARE_BUNDLES,
                                        &PrepareBundles);
  RegisterUse<proto::BundleReservation>(server, proto::COMMIT_BUNDLES,
                                        &CommitBundles);
  RegisterUse<proto::BundleReservation>(server, proto::CANCEL_BUNDLES,
                                        &CancelBundles);
}

template <>
void RegisterHandler<proto::ListTasksRequest>(rpc::Server* server, int method) {
  // Answers with the records of this connection's earlier task reports.
  rpc::RegisterProto<proto::ListTasksRequest>(
      server, method,
      [](const proto::ListTasksRequest& request, rpc::Responder r) {
        if (g_state == nullptr) return r.Reply(proto::Empty());
        absl::StatusOr<proto::TaskList> list =
            g_state->task_events.List(request);
        if (!list.ok()) return r.Error(list.status());
        r.Reply(*list);
      });
}

template <typename Request>
constexpr RequestType Type(int method) {
  return {&Request::descriptor, method, &ParseAndUse<Request>,
          &RegisterHandler<Request>};
}

// Every message type used with rpc::RegisterProto in src/head, src/agent,
// src/worker and src/launch (once each), and the handshake's Hello.
constexpr RequestType kRequestTypes[] = {
    Type<proto::Hello>(proto::METHOD_UNSPECIFIED),
    Type<proto::RegisterNodeRequest>(proto::REGISTER_NODE),
    Type<proto::HeartbeatRequest>(proto::HEARTBEAT),
    Type<proto::UnregisterNodeRequest>(proto::UNREGISTER_NODE),
    Type<proto::Empty>(proto::GET_CLUSTER_STATUS),
    Type<proto::RegisterJobRequest>(proto::REGISTER_JOB),
    Type<proto::BlobRef>(proto::HAS_BLOB),
    Type<proto::BlobChunk>(proto::PUT_BLOB_CHUNK),
    Type<proto::GetBlobChunkRequest>(proto::GET_BLOB_CHUNK),
    Type<proto::KvPutRequest>(proto::KV_PUT),
    Type<proto::KvGetRequest>(proto::KV_GET),
    Type<proto::PlacementGroupSpec>(proto::CREATE_PLACEMENT_GROUP),
    Type<proto::GetPlacementGroupRequest>(proto::GET_PLACEMENT_GROUP),
    Type<proto::ActorSpec>(proto::CREATE_ACTOR),
    Type<proto::GetActorRequest>(proto::GET_ACTOR),
    Type<proto::KillActorRequest>(proto::KILL_ACTOR),
    Type<proto::ActorExitingRequest>(proto::ACTOR_EXITING),
    Type<proto::RequestLeaseRequest>(proto::REQUEST_LEASE),
    Type<proto::ReturnLeaseRequest>(proto::RETURN_LEASE),
    Type<proto::RegisterWorkerRequest>(proto::REGISTER_WORKER),
    Type<proto::GetWorkerExitRequest>(proto::GET_WORKER_EXIT),
    Type<proto::BundleReservation>(proto::PREPARE_BUNDLES),
    Type<proto::ObjectRequest>(proto::OBJECT_CREATE),
    Type<proto::ObjectPullRequest>(proto::OBJECT_PULL),
    Type<proto::WorkerBlockedRequest>(proto::WORKER_BLOCKED),
    Type<proto::CancelLease>(proto::CANCEL_LEASE_REQUEST),
    Type<proto::TaskSpec>(proto::PUSH_TASK),
    Type<proto::ActorCreation>(proto::CREATE_ACTOR_INSTANCE),
    Type<proto::LaunchReport>(proto::LAUNCH_REPORT),
    Type<proto::JobSpec>(proto::SUBMIT_JOB),
    Type<proto::JobRef>(proto::GET_JOB),
    Type<proto::JobLogsRequest>(proto::GET_JOB_LOGS),
    Type<proto::JobEvent>(proto::JOB_EVENT),
    Type<proto::TaskEventBatch>(proto::REPORT_TASK_EVENTS),
    Type<proto::ListTasksRequest>(proto::LIST_TASKS),
    Type<proto::ListLogsRequest>(proto::LIST_LOGS),
    Type<proto::ReadLogRequest>(proto::READ_LOG),
    Type<proto::ListObjectsRequest>(proto::LIST_OBJECTS),
    Type<proto::GangInfo>(proto::GANG_UPDATE),
};
constexpr int kNumRequestTypes = std::size(kRequestTypes);
constexpr int kStreamSelector = kNumRequestTypes;
constexpr int kChannelSelector = kNumRequestTypes + 1;
constexpr int kNumSelectors = kNumRequestTypes + 2;
constexpr int kMaxWriteLengths = 8;
// Writes after which the rest of the stream goes in one.
constexpr int kMaxWrites = 16;

// ---- The server ----

// One rpc::Server on its own loop, for the life of the process.
class FuzzServer {
 public:
  static FuzzServer& Get() {
    static FuzzServer* server = new FuzzServer();
    return *server;
  }

  int port() const { return port_; }
  rpc::EventLoop* loop() { return loop_.get(); }

 private:
  FuzzServer() {
    absl::StatusOr<std::unique_ptr<rpc::EventLoop>> loop =
        rpc::EventLoop::Create("fuzz_rpc");
    SHOAL_FUZZ_CHECK(loop.ok());
    loop_ = *std::move(loop);
    loop_->RunSync([this] {
      absl::StatusOr<std::unique_ptr<rpc::Server>> server =
          rpc::Server::Create(loop_.get(), "127.0.0.1", 0, kRpcFuzzToken);
      SHOAL_FUZZ_CHECK(server.ok());
      server_ = *std::move(server);
      server_->EnableStats();
      for (const RequestType& type : kRequestTypes) {
        if (type.method != proto::METHOD_UNSPECIFIED) {
          type.register_handler(server_.get(), type.method);
        }
      }
      port_ = server_->port();
    });
  }

  std::unique_ptr<rpc::EventLoop> loop_;
  std::unique_ptr<rpc::Server> server_;
  int port_ = 0;
};

// Closes with a reset rather than a FIN, which leaves no TIME_WAIT socket
// behind: a run opens millions of connections.
void CloseWithReset(int fd) {
  linger reset{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
  close(fd);
}

// Writes `stream` to `fd` in writes of `lengths` (cycled), letting `loop`
// read each write before the next.
void WriteInChunks(int fd, std::string_view stream,
                   const std::vector<int>& lengths, rpc::EventLoop* loop) {
  size_t pos = 0;
  for (int i = 0; pos < stream.size(); ++i) {
    size_t n = stream.size() - pos;
    if (!lengths.empty() && i + 1 < kMaxWrites) {
      n = std::min<size_t>(n, lengths[i % lengths.size()]);
    }
    ssize_t sent = send(fd, stream.data() + pos, n, MSG_NOSIGNAL);
    if (sent <= 0) break;  // the peer closed the connection
    pos += static_cast<size_t>(sent);
    loop->RunSync([] {});
  }
}

// Sends `stream` to the server over a new connection.
void SendStream(std::string_view stream, const std::vector<int>& lengths,
                NodeState* state) {
  FuzzServer& server = FuzzServer::Get();
  rpc::EventLoop* loop = server.loop();
  loop->RunSync([state] { g_state = state; });
  int fd = ConnectLoopback(server.port());
  loop->RunSync([] {});  // the server accepts
  WriteInChunks(fd, stream, lengths, loop);
  CloseWithReset(fd);
  loop->RunSync([] { g_state = nullptr; });
}

// Where the channel of AnswerChannel connects: the harness answers there.
struct FakeServer {
  FakeServer() {
    listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    SHOAL_FUZZ_CHECK(listen_fd >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    SHOAL_FUZZ_CHECK(
        bind(listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    SHOAL_FUZZ_CHECK(listen(listen_fd, 16) == 0);
    socklen_t len = sizeof(addr);
    getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
    address = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  }
  int listen_fd = -1;
  std::string address;
};

// Answers three calls of an rpc::Channel with `stream`, then resets the
// connection: each call must then have been answered exactly once.
void AnswerChannel(std::string_view stream, const std::vector<int>& lengths) {
  static FakeServer* peer = new FakeServer();
  rpc::EventLoop* loop = FuzzServer::Get().loop();
  std::unique_ptr<rpc::TcpChannel> channel;
  auto answers = std::make_shared<std::array<int, 3>>();
  loop->RunSync([&] {
    channel = std::make_unique<rpc::TcpChannel>(loop, peer->address,
                                                kRpcFuzzToken, "fuzz driver");
    // A stream without a whole frame would make it connect again: the
    // frames are what is fuzzed here (rpc_test covers the retries).
    channel->set_hello_retries(0);
    proto::KvGetRequest get;
    get.set_key("config");
    rpc::CallProto<proto::KvGetReply>(
        channel.get(), proto::KV_GET, get,
        [answers](absl::StatusOr<proto::KvGetReply>) { ++(*answers)[0]; });
    rpc::CallProto<proto::TaskList>(
        channel.get(), proto::LIST_TASKS, proto::ListTasksRequest(),
        [answers](absl::StatusOr<proto::TaskList>) { ++(*answers)[1]; });
    channel->Call(proto::GET_SERVER_STATS, "",
                  [answers](absl::StatusOr<std::string>) { ++(*answers)[2]; });
  });
  int fd = AcceptLoopback(peer->listen_fd);
  loop->RunSync([] {});  // the channel's connection is up; it says hello
  WriteInChunks(fd, stream, lengths, loop);
  CloseWithReset(fd);
  // Twice: the second runs in a loop iteration that began after the reset.
  loop->RunSync([] {});
  loop->RunSync([] {});
  for (int n : *answers) SHOAL_FUZZ_CHECK(n == 1);
  loop->RunSync([&] { channel.reset(); });
}

void InitOnce() {
  static const bool done = [] {
    // Requests that do not parse are logged by protobuf: not of interest.
    google::protobuf::SetLogHandler(nullptr);
    setenv("SHOAL_LOG_LEVEL", "error", /*overwrite=*/0);
    return true;
  }();
  (void)done;
}

// ---- Seeds ----

// `message` serialized with map entries in key order, so that a seed is the
// same bytes every time it is written.
std::string Bytes(const google::protobuf::Message& message) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    SHOAL_FUZZ_CHECK(message.SerializeToCodedStream(&coded));
  }
  return bytes;
}

// An input that parses `request` as its type.
std::string MessageInput(const google::protobuf::Message& request) {
  for (int i = 0; i < kNumRequestTypes; ++i) {
    if (kRequestTypes[i].descriptor() == request.GetDescriptor()) {
      return std::string(1, static_cast<char>(i)) + Bytes(request);
    }
  }
  SHOAL_FUZZ_CHECK(false);  // not a request type of the harness
  return "";
}

// An input that writes `stream` to the server (or, with kChannelSelector,
// answers a channel with it) in writes of `lengths`.
std::string StreamInput(std::string_view stream,
                        const std::vector<int>& lengths,
                        int selector = kStreamSelector) {
  std::string input(1, static_cast<char>(selector));
  int k = std::min<int>(lengths.size(), kMaxWriteLengths);
  input += static_cast<char>(k);
  for (int i = 0; i < k; ++i) {
    input += static_cast<char>(std::clamp(lengths[i], 1, 256) - 1);
  }
  input += stream;
  return input;
}

std::string Frame(uint8_t kind, uint32_t method, uint64_t call_id,
                  std::string_view payload) {
  char header[rpc::kHeaderSize];
  rpc::EncodeFrameHeader(header, kind, method, call_id, payload.size());
  return std::string(header, rpc::kHeaderSize) + std::string(payload);
}

std::string Request(proto::Method method, uint64_t call_id,
                    const google::protobuf::Message& request) {
  return Frame(rpc::kRequest, method, call_id, Bytes(request));
}

std::string HelloFrame(const std::string& token) {
  proto::Hello hello;
  hello.set_token(token);
  hello.set_peer_name("driver");
  return Frame(rpc::kHello, 0, 0, Bytes(hello));
}

void SetAmount(proto::ResourceMap* map, const std::string& name,
               int64_t amount) {
  (*map->mutable_amounts())[name] = amount;
}

}  // namespace

std::vector<Seed> RpcFrameSeeds() {
  std::vector<Seed> seeds;

  proto::RegisterNodeRequest node;
  node.mutable_node()->set_node_id("n1");
  node.mutable_node()->set_address("10.0.0.2:40121");
  SetAmount(node.mutable_node()->mutable_total(), "CPU", 8 * kResourceUnit);
  SetAmount(node.mutable_node()->mutable_total(), "GPU", 2 * kResourceUnit);
  SetAmount(node.mutable_node()->mutable_total(), "CPU_group_0_d04157891339",
            kResourceUnit);
  *node.mutable_node()->mutable_available() = node.node().total();
  (*node.mutable_node()->mutable_labels())["zone"] = "us-east-1a";
  seeds.push_back({"register_node", MessageInput(node)});

  proto::HeartbeatRequest heartbeat;
  heartbeat.set_node_id("n1");
  SetAmount(heartbeat.mutable_available(), "CPU", 3 * kResourceUnit);
  SetAmount(heartbeat.mutable_total(), "CPU", 8 * kResourceUnit);
  proto::ResourceDemand* demand = heartbeat.add_demands();
  SetAmount(demand->mutable_shape(), "GPU", 16 * kResourceUnit);
  demand->set_count(2);
  proto::LeaseInfo* lease = heartbeat.add_leases();
  lease->set_lease_id("l1");
  SetAmount(lease->mutable_shape(), "CPU", kResourceUnit / 2);
  seeds.push_back({"heartbeat", MessageInput(heartbeat)});

  proto::PlacementGroupSpec group;
  group.set_name("trainers");
  SetAmount(group.add_bundles(), "CPU", kResourceUnit);
  proto::ResourceMap* gpu_bundle = group.add_bundles();
  SetAmount(gpu_bundle, "CPU", kResourceUnit);
  SetAmount(gpu_bundle, "GPU", kResourceUnit);
  group.set_strategy(proto::PACK);
  seeds.push_back({"placement_group_pack", MessageInput(group)});
  group.set_strategy(proto::STRICT_SPREAD);
  seeds.push_back({"placement_group_strict_spread", MessageInput(group)});
  SetAmount(group.add_bundles(), "CPU", std::numeric_limits<int64_t>::max());
  group.set_strategy(proto::SPREAD);
  seeds.push_back({"placement_group_huge", MessageInput(group)});

  proto::BundleReservation bundles;
  bundles.set_pg_id("d04157891339");
  bundles.add_indices(0);
  bundles.add_indices(1);
  SetAmount(bundles.add_bundles(), "CPU", 2 * kResourceUnit);
  SetAmount(bundles.add_bundles(), "GPU", kResourceUnit);
  seeds.push_back({"bundle_reservation", MessageInput(bundles)});

  proto::TaskEventBatch batch;
  batch.set_job_id("01000000");
  batch.set_dropped(3);
  for (int i = 0; i < 6; ++i) {
    proto::TaskEvent* e = batch.add_events();
    e->set_task_id("task" + std::to_string(i % 4));
    e->set_attempt(i / 4);
    e->set_name(i % 2 ? "Square" : "Counter.Add");
    if (i % 2 == 0) e->set_actor_id("actor1");
    e->set_state(static_cast<proto::TaskEvent::State>(1 + i % 6));
    for (int s = 0; s <= e->state(); ++s) {
      e->add_state_times_ms(1700000000000 + s);
    }
    e->set_node_id("n1");
    if (e->state() == proto::TaskEvent::FAILED) {
      e->set_error("boom");
      e->set_error_type("std::runtime_error");
    }
  }
  seeds.push_back({"task_event_batch", MessageInput(batch)});
  std::string truncated = MessageInput(batch);
  truncated.resize(truncated.size() / 2);
  seeds.push_back({"task_event_batch_truncated", truncated});

  proto::ListTasksRequest list;
  list.add_filters("name=Square");
  list.add_filters("state=RUNNING");
  list.set_limit(2);
  seeds.push_back({"list_tasks_filtered", MessageInput(list)});
  list.Clear();
  list.set_summary(true);
  seeds.push_back({"list_tasks_summary", MessageInput(list)});
  list.Clear();
  list.add_filters("color=blue");
  seeds.push_back({"list_tasks_bad_filter", MessageInput(list)});

  proto::GangInfo gang;
  gang.set_gang_id("g1");
  gang.add_argv("python");
  gang.add_argv("train.py");
  gang.set_restarts(1);
  gang.set_max_restarts(3);
  proto::GangRank* rank = gang.add_ranks();
  rank->set_rank(0);
  rank->set_node_id("n1");
  rank->set_log_name("launch-g1-rank0.log");
  seeds.push_back({"gang_update", MessageInput(gang)});

  proto::JobSpec job;
  job.set_submission_id("raysubmit_1");
  job.set_entrypoint("python train.py");
  (*job.mutable_env())["SEED"] = "1";
  SetAmount(job.mutable_entrypoint_resources(), "CPU", kResourceUnit);
  seeds.push_back({"job_spec", MessageInput(job)});

  proto::ActorSpec actor;
  actor.set_actor_id("actor1");
  actor.set_factory("MakeCounter");
  actor.add_args(std::string("\x05", 1));
  SetAmount(actor.mutable_shape(), "TPU", 4 * kResourceUnit);
  actor.set_max_restarts(-1);
  seeds.push_back({"actor_spec", MessageInput(actor)});
  proto::ActorCreation creation;
  *creation.mutable_spec() = actor;
  creation.set_num_restarts(2);
  seeds.push_back({"actor_creation", MessageInput(creation)});

  proto::RequestLeaseRequest request_lease;
  request_lease.set_job_id("01000000");
  SetAmount(request_lease.mutable_shape(), "CPU", kResourceUnit);
  SetAmount(request_lease.mutable_shape(), "GPU", kResourceUnit / 2);
  request_lease.add_excluded_nodes("n2");
  request_lease.set_depth(1);
  seeds.push_back({"request_lease", MessageInput(request_lease)});

  proto::TaskSpec task;
  task.set_task_id("task1");
  task.set_function_name("Square");
  task.add_args(std::string("\x03", 1));
  task.add_args("");
  proto::StoredObject& stored = (*task.mutable_stored_args())[1];
  stored.set_object_id(std::string(20, '\x01'));
  stored.set_data_size(1 << 20);
  stored.add_sources()->set_address("10.0.0.3:40200");
  seeds.push_back({"task_spec", MessageInput(task)});

  proto::ObjectRequest object;
  object.set_object_id(std::string("\x00\xff", 2) + "obj");
  object.set_data_size(100);
  object.set_metadata_size(1);
  seeds.push_back({"object_request", MessageInput(object)});

  proto::ReadLogRequest read_log;
  read_log.set_name("worker-1.log");
  read_log.set_offset(-4096);
  seeds.push_back({"read_log", MessageInput(read_log)});

  proto::JobEvent job_event;
  job_event.set_submission_id("raysubmit_1");
  job_event.set_output("step 1\n");
  job_event.set_output_offset(12);
  seeds.push_back({"job_event", MessageInput(job_event)});

  // Streams to the server.
  const std::string hello = HelloFrame(kRpcFuzzToken);
  seeds.push_back(
      {"stream_node",
       StreamInput(hello + Request(proto::REGISTER_NODE, 1, node) +
                       Request(proto::HEARTBEAT, 2, heartbeat) +
                       Frame(rpc::kRequest, proto::GET_SERVER_STATS, 3, ""),
                   {})});
  seeds.push_back({"stream_node_split",
                   StreamInput(hello + Request(proto::REGISTER_NODE, 1, node) +
                                   Request(proto::HEARTBEAT, 2, heartbeat),
                               {1, 3, 16, 5, 40})});
  seeds.push_back(
      {"stream_bundles",
       StreamInput(hello + Request(proto::PREPARE_BUNDLES, 1, bundles) +
                       Request(proto::COMMIT_BUNDLES, 2, bundles) +
                       Request(proto::PREPARE_BUNDLES, 3, bundles) +
                       Request(proto::CANCEL_BUNDLES, 4, bundles),
                   {17, 4})});
  seeds.push_back(
      {"stream_task_events",
       StreamInput(hello + Request(proto::REPORT_TASK_EVENTS, 1, batch) +
                       Request(proto::REPORT_TASK_EVENTS, 2, batch) +
                       Request(proto::LIST_TASKS, 3, proto::ListTasksRequest()),
                   {64})});
  proto::GangInfo ended = gang;
  ended.set_state(proto::GangInfo::FAILED);
  ended.set_restarts(3);
  seeds.push_back({"stream_gangs",
                   StreamInput(hello + Request(proto::GANG_UPDATE, 1, gang) +
                                   Request(proto::GANG_UPDATE, 2, ended),
                               {})});
  seeds.push_back({"stream_wrong_token",
                   StreamInput(HelloFrame("not-the-token") +
                                   Request(proto::REGISTER_NODE, 1, node),
                               {})});
  seeds.push_back(
      {"stream_http", StreamInput("GET / HTTP/1.1\r\nHost: x\r\n\r\n", {})});
  seeds.push_back({"stream_odd_frames",
                   StreamInput(hello + Frame(rpc::kRequest, 999, 1, "x") +
                                   Frame(rpc::kResponse, 0, 2, "") +
                                   Frame(rpc::kRequest, proto::REGISTER_NODE, 3,
                                         std::string("\xff\xff\xff", 3)) +
                                   Frame(rpc::kHello, 0, 0, hello),
                               {2, 2})});
  std::string short_frame = Frame(rpc::kRequest, proto::HEARTBEAT, 1, "");
  short_frame[0] = 12;  // shorter than a header
  seeds.push_back({"stream_short_frame", StreamInput(hello + short_frame, {})});
  std::string long_frame = Frame(rpc::kRequest, proto::HEARTBEAT, 1, "abc");
  long_frame[2] = 0x10;  // a megabyte that never comes
  seeds.push_back({"stream_long_frame", StreamInput(hello + long_frame, {7})});

  // Answers to a channel's calls 1 (KV_GET), 2 (LIST_TASKS) and 3.
  const std::string hello_ok = Frame(rpc::kHelloOk, 0, 0, "");
  proto::KvGetReply value;
  value.set_found(true);
  value.set_value("v");
  proto::TaskList tasks;
  *tasks.add_tasks() = batch.events(0);
  tasks.set_total(1);
  const std::string answers = hello_ok +
                              Frame(rpc::kResponse, 0, 1, Bytes(value)) +
                              Frame(rpc::kResponse, 0, 2, Bytes(tasks)) +
                              Frame(rpc::kError, 5, 3, "no such method here");
  seeds.push_back(
      {"channel_answers", StreamInput(answers, {}, kChannelSelector)});
  seeds.push_back({"channel_answers_split",
                   StreamInput(answers, {1, 5, 13}, kChannelSelector)});
  seeds.push_back(
      {"channel_refused",
       StreamInput(Frame(rpc::kError, 7, 0, "wrong or missing cluster token"),
                   {}, kChannelSelector)});
  seeds.push_back(
      {"channel_odd_answers",
       StreamInput(hello_ok + Frame(rpc::kResponse, 0, 1, "\xff\xff") +
                       Frame(rpc::kResponse, 0, 99, "") +
                       Frame(rpc::kRequest, proto::KV_GET, 2, "") +
                       Frame(rpc::kError, 0xffffffff, 2, "") + hello_ok,
                   {}, kChannelSelector)});
  seeds.push_back(
      {"channel_not_shoal",
       StreamInput("HTTP/1.1 400 Bad Request\r\n\r\n", {}, kChannelSelector)});
  return seeds;
}

int FuzzRpcFrame(const uint8_t* data, size_t size) {
  InitOnce();
  if (size == 0) return 0;
  const int selector = data[0] % kNumSelectors;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  NodeState state;
  if (selector < kNumRequestTypes) {
    kRequestTypes[selector].parse_and_use(rest, &state);
    return 0;
  }
  std::vector<int> lengths;
  if (!rest.empty()) {
    int k = static_cast<uint8_t>(rest[0]) % (kMaxWriteLengths + 1);
    rest.remove_prefix(1);
    for (; k > 0 && !rest.empty(); --k) {
      lengths.push_back(static_cast<uint8_t>(rest[0]) + 1);
      rest.remove_prefix(1);
    }
  }
  if (selector == kChannelSelector) {
    AnswerChannel(rest, lengths);
    return 0;
  }
  SendStream(rest, lengths, &state);
  CheckBundlesReturned(&state);
  CheckTaskRecords(state.task_events);
  return 0;
}

}  // namespace shoal::fuzz
