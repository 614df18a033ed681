#include "head/placement_group_manager.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"

namespace shoal {
namespace {

constexpr int64_t kBundleCallTimeoutMs = 3000;

}  // namespace

PlacementGroupManager::PlacementGroupManager(
    PlacementGroupManagerOptions options)
    : options_(std::move(options)), table_(options_.storage) {}

PlacementGroupManager::~PlacementGroupManager() { *alive_ = false; }

size_t PlacementGroupManager::Restore() {
  const size_t n = table_.Restore(options_.now_us());
  if (table_.pending() > 0) SchedulePlacementGroups();
  return n;
}

absl::StatusOr<proto::PlacementGroupInfo> PlacementGroupManager::Create(
    const proto::PlacementGroupSpec& spec, const std::string& job_id) {
  absl::StatusOr<proto::PlacementGroupInfo> info =
      table_.Create(spec, job_id, options_.now_us());
  if (info.ok()) SchedulePlacementGroups();
  return info;
}

absl::StatusOr<proto::PlacementGroupInfo> PlacementGroupManager::Get(
    const proto::GetPlacementGroupRequest& r) {
  const PlacementGroupEntry* pg = table_.Find(r);
  if (pg == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("no placement group ",
                     r.pg_id().empty() ? "named " + r.name() : r.pg_id()));
  }
  return pg->info;
}

void PlacementGroupManager::Remove(const proto::GetPlacementGroupRequest& r) {
  if (PlacementGroupEntry* pg = table_.Find(r)) Release(*pg);
}

void PlacementGroupManager::Release(PlacementGroupEntry& pg) {
  const std::string id = pg.info.pg_id();
  for (const auto& node : table_.Remove(pg)) {
    SendBundles(node, proto::CANCEL_BUNDLES, id, {}, nullptr);
  }
}

void PlacementGroupManager::JobEnded(const std::string& job_id) {
  for (const std::string& id : table_.GroupsOfJob(job_id)) {
    PlacementGroupEntry& pg = *table_.Find(id);
    SHOAL_LOG(INFO) << "removing placement group " << id
                    << (pg.info.spec().name().empty()
                            ? ""
                            : " (\"" + pg.info.spec().name() + "\")")
                    << ": its job " << job_id << " ended";
    Release(pg);
  }
}

void PlacementGroupManager::NodeDied(const proto::NodeInfo& dead,
                                     const std::string& why) {
  bool any = false;
  const int64_t now = options_.now_us();
  for (const std::string& id : table_.LiveGroups()) {
    any |= table_.LoseBundles(id, dead, why, now);
  }
  // Soon, not now: nodes found dead together (a rack, 1% of a cluster)
  // are marked in one pass, and each placement attempt reads every node.
  if (any) RetryPlacementSoon();
}

void PlacementGroupManager::NodeRegistered(const proto::NodeInfo& node) {
  for (const auto& group : table_.StaleGroups(node)) {
    SHOAL_LOG(INFO) << "node " << node.node_id()
                    << " holds bundles of placement group " << group
                    << " that are no longer its; releasing them";
    SendBundles(node.node_id(), proto::CANCEL_BUNDLES, group, {}, nullptr);
  }
}

void PlacementGroupManager::AddToStatus(proto::ClusterStatus* status) const {
  table_.AddToStatus(status, options_.now_us());
}

void PlacementGroupManager::SendBundles(
    const std::string& node_id, int method, const std::string& pg_id,
    const Bundles& bundles, std::function<void(absl::Status)> done) {
  const proto::NodeInfo* node = options_.node(node_id);
  if (node == nullptr || !node->alive()) {
    if (done) done(absl::UnavailableError("node " + node_id + " is dead"));
    return;
  }
  proto::BundleReservation req;
  req.set_pg_id(pg_id);
  for (const auto& [index, shape] : bundles) {
    req.add_indices(index);
    *req.add_bundles() = shape;
  }
  std::weak_ptr<bool> alive = alive_;
  CallAgent<proto::Empty>(
      options_.call_agent, node->address(), method, req,
      [alive, done = std::move(done)](absl::StatusOr<proto::Empty> r) {
        if (alive.expired() || !*alive.lock()) return;
        if (done) done(r.status());
      },
      kBundleCallTimeoutMs);
}

void PlacementGroupManager::SchedulePlacementGroups() {
  const size_t n = table_.pending();
  for (size_t i = 0; i < n && !placing_; ++i) {
    std::optional<std::string> id = table_.NextPending();
    if (!id) return;
    TryPlaceGroup(*id);
  }
}

void PlacementGroupManager::TryPlaceGroup(const std::string& id) {
  PlacementPlan plan =
      table_.Plan(id, options_.placement_nodes, options_.now_us(),
                  options_.infeasible_grace_ms * 1000);
  if (plan.kind == PlacementPlan::kWait) RetryPlacementSoon();
  if (plan.kind != PlacementPlan::kReserve) return;
  // Two-phase: prepare on every node, then commit.
  placing_ = true;
  auto remaining = std::make_shared<size_t>(plan.by_node.size());
  auto ok_nodes = std::make_shared<std::vector<std::string>>();
  auto failure = std::make_shared<absl::Status>();
  for (const auto& [node, bundles] : plan.by_node) {
    SendBundles(node, proto::PREPARE_BUNDLES, id, bundles,
                [this, id, node = node, remaining, ok_nodes, failure,
                 placed = plan.bundle_nodes](absl::Status st) {
                  if (st.ok()) {
                    ok_nodes->push_back(node);
                  } else {
                    *failure = st;
                  }
                  if (--*remaining > 0) return;
                  FinishPrepare(id, placed, *ok_nodes, *failure);
                });
  }
}

void PlacementGroupManager::RetryPlacementSoon() {
  if (retry_timer_armed_) return;
  retry_timer_armed_ = true;
  std::weak_ptr<bool> alive = alive_;
  options_.run_after(options_.retry_ms, [this, alive] {
    if (alive.expired() || !*alive.lock()) return;
    retry_timer_armed_ = false;
    SchedulePlacementGroups();
  });
}

bool PlacementGroupManager::StillPending(const std::string& id) {
  const PlacementGroupEntry* pg = table_.Find(id);
  return pg != nullptr &&
         pg->info.state() == proto::PlacementGroupInfo::PENDING;
}

bool PlacementGroupManager::Abandon(const std::string& id,
                                    const std::vector<std::string>& nodes,
                                    const absl::Status& failure) {
  const bool still_wanted = StillPending(id);
  if (failure.ok() && still_wanted) return false;
  for (const auto& node : nodes) {
    SendBundles(node, proto::CANCEL_BUNDLES, id, {}, nullptr);
  }
  if (still_wanted) {
    SHOAL_LOG(INFO) << "placement group " << id << ": " << failure
                    << "; will try again";
    table_.Requeue(id);
    RetryPlacementSoon();
  }
  SchedulePlacementGroups();
  return true;
}

void PlacementGroupManager::FinishPrepare(
    const std::string& id, const std::vector<std::string>& placed,
    const std::vector<std::string>& ok_nodes, const absl::Status& failure) {
  placing_ = false;
  if (Abandon(id, ok_nodes, failure)) return;
  // Commit everywhere; the group is created once every node confirms.
  placing_ = true;
  auto remaining = std::make_shared<size_t>(ok_nodes.size());
  auto failed = std::make_shared<absl::Status>();
  for (const auto& node : ok_nodes) {
    SendBundles(
        node, proto::COMMIT_BUNDLES, id, {},
        [this, id, placed, ok_nodes, remaining, failed](absl::Status st) {
          if (!st.ok()) *failed = st;
          if (--*remaining > 0) return;
          placing_ = false;
          FinishCommit(id, placed, ok_nodes, *failed);
        });
  }
}

void PlacementGroupManager::FinishCommit(const std::string& id,
                                         const std::vector<std::string>& placed,
                                         const std::vector<std::string>& nodes,
                                         const absl::Status& failure) {
  if (Abandon(id, nodes, failure)) return;
  table_.Created(id, placed);
  SHOAL_LOG(INFO) << "placement group " << id << " created on "
                  << absl::StrJoin(placed, ",");
  // A node it kept may have died while the others were placed.
  for (const std::string& node_id :
       std::set<std::string>(placed.begin(), placed.end())) {
    const proto::NodeInfo* node = options_.node(node_id);
    if (node != nullptr && !node->alive()) {
      table_.LoseBundles(id, *node, "it died while the group was being placed",
                         options_.now_us());
    }
  }
  SchedulePlacementGroups();
}

}  // namespace shoal
