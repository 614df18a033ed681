#include "head/node_manager.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "head/table_storage.h"
#include "scheduling/resource_set.h"

namespace shoal {
namespace {

constexpr char kNodesTable[] = "nodes";

absl::Status NoSuchNode(const std::string& node_id) {
  return absl::NotFoundError(absl::StrCat(
      node_id.empty() ? "the head's node" : "node " + node_id,
      " is not alive in this cluster (`shoal list nodes` shows them)"));
}

}  // namespace

NodeManager::NodeManager(NodeManagerOptions options, NodeTable::Clock clock,
                         uint64_t view_epoch)
    : options_(std::move(options)), table_(std::move(clock), view_epoch) {}

NodeManager::~NodeManager() { *alive_ = false; }

size_t NodeManager::Restore() {
  if (options_.storage == nullptr) return 0;
  size_t nodes = 0;
  for (const auto& [id, bytes] : options_.storage->Scan(kNodesTable)) {
    proto::NodeInfo info;
    if (!info.ParseFromString(bytes)) continue;
    info.set_node_id(id);
    table_.Restore(info);
    ++nodes;
  }
  return nodes;
}

void NodeManager::StartHealthChecks() { ScheduleHealthCheck(); }

void NodeManager::ScheduleHealthCheck() {
  // A pass over 10,000 nodes takes well under a millisecond.
  const int64_t period = std::max<int64_t>(50, options_.health_timeout_ms / 20);
  std::weak_ptr<bool> alive = alive_;
  options_.run_after(period, [this, alive] {
    if (alive.expired() || !*alive.lock()) return;
    for (const auto& id : table_.Silent(options_.health_timeout_ms)) {
      MarkDead(id, absl::StrCat("no heartbeat for ", options_.health_timeout_ms,
                                " ms: the node agent died or its host is "
                                "unreachable"));
    }
    ScheduleHealthCheck();
  });
}

absl::Status NodeManager::Persist(const proto::NodeInfo& info) {
  if (options_.storage == nullptr) return absl::OkStatus();
  absl::Status st = options_.storage->Put(kNodesTable, info.node_id(),
                                          info.SerializeAsString());
  if (!st.ok()) SHOAL_LOG(ERROR) << "cannot store node: " << st;
  return st;
}

absl::StatusOr<proto::RegisterNodeReply> NodeManager::Register(
    const proto::RegisterNodeRequest& request) {
  absl::StatusOr<const NodeTable::Entry*> entry =
      table_.Register(request.node());
  if (!entry.ok()) return entry.status();
  const proto::NodeInfo& info = (*entry)->info;
  // Kept before it is acknowledged: the agent registers again.
  if (absl::Status st = Persist(info); !st.ok()) return st;
  SHOAL_LOG(INFO) << "node " << info.node_id() << " joined from "
                  << info.address() << " with "
                  << ResourceSet::FromProto(info.total()).DebugString();
  proto::RegisterNodeReply reply;
  reply.set_node_id(info.node_id());
  reply.set_heartbeat_interval_ms(options_.heartbeat_interval_ms);
  if (options_.on_registered) options_.on_registered(info);
  return reply;
}

std::string NodeManager::Heartbeat(const proto::HeartbeatRequest& request) {
  proto::HeartbeatReply reply;
  if (!table_.Heartbeat(request)) {
    // Unknown (the head restarted) or declared dead (a long pause): the
    // agent registers again and its view is rebuilt.
    reply.set_unknown_node(true);
    return reply.SerializeAsString();
  }
  if (options_.on_leases) {
    options_.on_leases(table_.Find(request.node_id())->info.address(),
                       request.leases());
  }
  std::string body =
      table_.FillView(request.view_epoch(), request.view_version(), &reply);
  return reply.SerializeAsString() + body;
}

void NodeManager::MarkDead(const std::string& node_id,
                           const std::string& reason) {
  const NodeTable::Entry* e = table_.MarkDead(node_id, reason);
  if (e == nullptr) return;
  Persist(e->info).IgnoreError();
  SHOAL_LOG(WARNING) << "node " << node_id << " (" << e->info.address()
                     << ") is dead: " << reason;
  if (options_.on_dead) options_.on_dead(e->info, reason);
}

template <typename Reply, typename Request, typename MergeFn>
void NodeManager::AskAgents(int method, const std::string& node_id,
                            const Request& request,
                            std::function<void(absl::StatusOr<Reply>)> done,
                            MergeFn merge) {
  const auto targets = table_.AliveAgents(node_id);  // id, agent
  if (!node_id.empty() && targets.empty()) return done(NoSuchNode(node_id));
  auto all = std::make_shared<Reply>();
  auto left = std::make_shared<size_t>(targets.size());
  if (targets.empty()) return done(*all);
  const std::string payload = request.SerializeAsString();
  for (const auto& [id, agent] : targets) {
    options_.call_agent(
        agent, method, payload,
        [all, left, done, merge, id = id](absl::StatusOr<std::string> r) {
          Reply one;
          if (!r.ok()) {
            all->add_errors(
                absl::StrCat("node ", id, ": ", r.status().message()));
          } else if (!one.ParseFromString(*r)) {
            all->add_errors(absl::StrCat("node ", id, ": a malformed answer"));
          } else {
            merge(*all, one);
          }
          if (--*left == 0) done(*all);
        },
        kAgentAskTimeoutMs);
  }
}

void NodeManager::ListLogs(
    const proto::ListLogsRequest& request,
    std::function<void(absl::StatusOr<proto::LogList>)> done) {
  AskAgents<proto::LogList>(proto::LIST_LOGS, request.node_id(), request,
                            std::move(done),
                            [](proto::LogList& all, proto::LogList& one) {
                              for (auto& f : *one.mutable_files())
                                *all.add_files() = std::move(f);
                            });
}

void NodeManager::ListObjects(
    const proto::ListObjectsRequest& request,
    std::function<void(absl::StatusOr<proto::ObjectList>)> done) {
  AskAgents<proto::ObjectList>(
      proto::LIST_OBJECTS, request.node_id(), request, std::move(done),
      [](proto::ObjectList& all, proto::ObjectList& one) {
        for (auto& o : *one.mutable_objects()) {
          *all.add_objects() = std::move(o);
        }
        all.set_total(all.total() + one.total());
      });
}

void NodeManager::ReadLog(
    const proto::ReadLogRequest& request,
    std::function<void(absl::StatusOr<std::string>)> done) {
  const std::string node_id =
      request.node_id().empty() ? table_.HeadNodeId() : request.node_id();
  const NodeTable::Entry* node = table_.FindAlive(node_id);
  if (node == nullptr) return done(NoSuchNode(request.node_id()));
  options_.call_agent(node->info.address(), proto::READ_LOG,
                      request.SerializeAsString(), std::move(done),
                      kAgentAskTimeoutMs + request.wait_ms());
}

}  // namespace shoal
