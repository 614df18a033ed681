#include "head/actor_placer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "rpc/rpc.h"
#include "scheduling/label_selector.h"

namespace shoal {

std::optional<size_t> ChooseActorNode(const ResourceSet& shape,
                                      const std::vector<ActorNode>& nodes) {
  auto better = [&](size_t i, size_t j) {
    int64_t cpu_i = nodes[i].available.Get("CPU");
    int64_t cpu_j = nodes[j].available.Get("CPU");
    if (cpu_i != cpu_j) return cpu_i > cpu_j;
    return nodes[i].num_actors < nodes[j].num_actors;
  };
  auto best_of = [&](auto fits) {
    std::optional<size_t> best;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (fits(nodes[i]) && (!best || better(i, *best))) best = i;
    }
    return best;
  };
  if (auto b = best_of(
          [&](const ActorNode& n) { return n.available.Contains(shape); })) {
    return b;
  }
  if (auto b = best_of(
          [&](const ActorNode& n) { return n.total.Contains(shape); })) {
    return b;
  }
  std::optional<size_t> fewest;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!fewest || nodes[i].num_actors < nodes[*fewest].num_actors) fewest = i;
  }
  return fewest;
}

ActorPlacer::ActorPlacer(rpc::Executor* loop, ActorPlacerOptions options,
                         ActorAttempts* attempts, Delegate* delegate)
    : loop_(loop),
      options_(std::move(options)),
      attempts_(attempts),
      delegate_(delegate) {}

ActorPlacer::~ActorPlacer() { *alive_ = false; }

namespace {

// Narrows `nodes` to those the actor's label selector matches (all of them
// when it has none, or none matches).
void KeepSelected(const proto::ActorSpec& spec, std::vector<ActorNode>* nodes) {
  if (!spec.has_label_selector()) return;
  // Read when the actor was made (ActorSpecFor): it parses.
  absl::StatusOr<LabelSelector> selector =
      LabelSelector::FromProto(spec.label_selector());
  if (!selector.ok() || selector->empty()) return;
  std::vector<ActorNode> selected;
  for (ActorNode& n : *nodes) {
    if (selector->Matches(n.labels)) selected.push_back(std::move(n));
  }
  // None matches: any node is asked, and its agent says why none can take
  // the actor (or, for a soft selector, takes it).
  if (!selected.empty()) nodes->swap(selected);
}

}  // namespace

void ActorPlacer::Place(const std::string& actor_id, uint64_t attempt) {
  ActorAttempt* a = attempts_->Find(actor_id, attempt);
  const proto::ActorSpec* spec = delegate_->SpecOf(actor_id);
  if (a == nullptr || spec == nullptr) return;
  a->agent.clear();
  a->node_id.clear();
  std::vector<ActorNode> nodes = CandidateNodes();
  if (!a->withdrawn_from.empty()) {
    std::vector<ActorNode> others;
    for (ActorNode& n : nodes) {
      if (n.node_id != a->withdrawn_from) others.push_back(std::move(n));
    }
    if (!others.empty()) nodes.swap(others);
    a->withdrawn_from.clear();
  }
  KeepSelected(*spec, &nodes);
  std::optional<size_t> pick =
      ChooseActorNode(ResourceSet::FromProto(spec->shape()), nodes);
  if (!pick) {
    // No node yet: the actor waits, as a task does.
    return RetryPlacement(actor_id, attempt);
  }
  SHOAL_LOG(INFO) << "actor " << actor_id << ": asking node "
                  << nodes[*pick].node_id << " for a worker";
  RequestLease(actor_id, attempt, nodes[*pick].address, nodes[*pick].node_id,
               /*no_spillback=*/false);
}

void ActorPlacer::NoteUnreachable(const std::string& agent) {
  unreachable_[agent] = loop_->NowUs();
}

std::vector<ActorNode> ActorPlacer::CandidateNodes() const {
  std::vector<ActorNode> nodes = options_.alive_nodes();
  std::vector<ActorNode> reachable;
  int64_t now = loop_->NowUs();
  for (const ActorNode& n : nodes) {
    auto failed = unreachable_.find(n.address);
    if (failed == unreachable_.end() ||
        now - failed->second > options_.avoid_unreachable_ms * 1000) {
      reachable.push_back(n);
    }
  }
  if (!reachable.empty()) nodes.swap(reachable);
  std::map<std::string, int64_t> per_node = attempts_->ActorsPerNode();
  for (ActorNode& n : nodes) n.num_actors = per_node[n.node_id];
  return nodes;
}

void ActorPlacer::CheckWaiting(const std::string& actor_id, uint64_t attempt,
                               uint64_t request) {
  ActorAttempt* a = attempts_->Find(actor_id, attempt);
  const proto::ActorSpec* spec = delegate_->SpecOf(actor_id);
  if (a == nullptr || spec == nullptr || a->request != request ||
      !a->lease_id.empty()) {
    return;
  }
  ResourceSet shape = ResourceSet::FromProto(spec->shape());
  bool granted = false;  // its worker is starting there
  std::vector<ActorNode> roomy;
  for (ActorNode& n : CandidateNodes()) {
    if (n.node_id == a->node_id) {
      granted = n.leased_actors.count(actor_id) > 0;
    } else if (n.available.Contains(shape)) {
      roomy.push_back(std::move(n));
    }
  }
  std::optional<size_t> pick = ChooseActorNode(shape, roomy);
  if (granted || !pick) {
    After(options_.waiting_check_ms, [this, actor_id, attempt, request] {
      CheckWaiting(actor_id, attempt, request);
    });
    return;
  }
  // Its CANCELED answer places the actor again (OnLeaseReply). A cancel
  // that comes too late (the node granted or spilled the request meanwhile)
  // changes nothing: that answer is followed as usual.
  SHOAL_LOG(INFO) << "actor " << actor_id << ": still waiting at node "
                  << a->node_id << " while node " << roomy[*pick].node_id
                  << " has room; withdrawing the request";
  a->withdrawn_from = a->node_id;
  WithdrawRequest(actor_id, *a);
}

void ActorPlacer::WithdrawRequest(const std::string& actor_id,
                                  const ActorAttempt& a) {
  if (!a.request_out || a.agent.empty()) return;
  proto::CancelLease req;
  req.set_request_id(absl::StrCat(actor_id, "/", a.request));
  rpc::CallProto<proto::CancelLeaseReply>(
      options_.agent_channel(a.agent), proto::CANCEL_LEASE_REQUEST, req,
      [](absl::StatusOr<proto::CancelLeaseReply>) {},
      options_.cancel_timeout_ms);
}

void ActorPlacer::RequestLease(const std::string& actor_id, uint64_t attempt,
                               const std::string& agent,
                               const std::string& node_id, bool no_spillback) {
  ActorAttempt* a = attempts_->Find(actor_id, attempt);
  const proto::ActorSpec* spec = delegate_->SpecOf(actor_id);
  if (a == nullptr || spec == nullptr) return;
  a->agent = agent;
  a->node_id = node_id;
  proto::RequestLeaseRequest req;
  req.set_job_id(spec->job_id());
  *req.mutable_shape() = spec->shape();
  req.set_binary_path(spec->binary_path());
  req.set_binary_hash(spec->binary_hash());
  req.set_blob_hash(spec->blob_hash());
  if (spec->has_worker_command()) {
    *req.mutable_worker_command() = spec->worker_command();
  }
  req.set_no_spillback(no_spillback);
  req.set_actor_id(actor_id);
  req.set_depth(spec->depth());
  if (spec->has_label_selector()) {
    *req.mutable_label_selector() = spec->label_selector();
  }
  uint64_t request = ++a->request;
  a->request_out = true;
  req.set_request_id(absl::StrCat(actor_id, "/", request));
  After(options_.waiting_check_ms, [this, actor_id, attempt, request] {
    CheckWaiting(actor_id, attempt, request);
  });
  std::weak_ptr<bool> alive = alive_;
  rpc::CallProto<proto::RequestLeaseReply>(
      options_.agent_channel(agent), proto::REQUEST_LEASE, req,
      [this, alive, actor_id, attempt, agent,
       node_id](absl::StatusOr<proto::RequestLeaseReply> reply) {
        if (alive.expired()) return;
        OnLeaseReply(actor_id, attempt, agent, node_id, reply);
      });
}

void ActorPlacer::OnLeaseReply(
    const std::string& actor_id, uint64_t attempt, const std::string& agent,
    const std::string& node_id,
    const absl::StatusOr<proto::RequestLeaseReply>& reply) {
  ActorAttempt* a = attempts_->Find(actor_id, attempt);
  if (a == nullptr) {
    // The actor died or moved on meanwhile: the worker is nobody's.
    if (reply.ok() && reply->outcome() == proto::RequestLeaseReply::GRANTED) {
      delegate_->ReturnLease(agent, reply->lease_id());
    }
    return;
  }
  a->request_out = false;
  if (!reply.ok()) {
    if (reply.status().code() == absl::StatusCode::kPermissionDenied) {
      return delegate_->CannotPlace(
          actor_id, /*infeasible=*/false,
          absl::StrCat("the agent at ", agent,
                       " refused the head: ", reply.status().message()));
    }
    SHOAL_LOG(WARNING) << "lease request for actor " << actor_id << " to "
                       << agent << " failed: " << reply.status()
                       << "; trying again";
    NoteUnreachable(agent);
    return RetryPlacement(actor_id, attempt);
  }
  switch (reply->outcome()) {
    case proto::RequestLeaseReply::GRANTED:
      return delegate_->Granted(actor_id, attempt, agent, node_id, *reply);
    case proto::RequestLeaseReply::SPILLBACK:
      SHOAL_LOG(INFO) << "actor " << actor_id << ": node " << node_id
                      << " sent its lease request on to node "
                      << reply->spillback_node_id();
      return RequestLease(actor_id, attempt, reply->spillback_address(),
                          reply->spillback_node_id(), /*no_spillback=*/true);
    case proto::RequestLeaseReply::CANCELED:
      // Withdrawn from a node that kept it waiting (CheckWaiting).
      return Place(actor_id, attempt);
    case proto::RequestLeaseReply::INFEASIBLE:
      return delegate_->CannotPlace(actor_id, /*infeasible=*/true,
                                    reply->error());
    case proto::RequestLeaseReply::INVALID:
      return delegate_->CannotPlace(actor_id, /*infeasible=*/false,
                                    reply->error());
    default:
      return OnStartFailed(actor_id, *a, node_id, reply->error());
  }
}

void ActorPlacer::OnStartFailed(const std::string& actor_id, ActorAttempt& a,
                                const std::string& node_id,
                                const std::string& error) {
  if (++a.failures > options_.max_start_retries) {
    return delegate_->CannotPlace(
        actor_id, /*infeasible=*/false,
        absl::StrCat("its worker could not be started (", a.failures,
                     " tries, the last on node ", node_id, "): ", error,
                     "; see the node's agent log in the session folder"));
  }
  SHOAL_LOG(WARNING) << "actor " << actor_id
                     << ": a worker could not be started on node " << node_id
                     << ": " << error << "; trying again";
  RetryPlacement(actor_id, a.number);
}

void ActorPlacer::RetryPlacement(const std::string& actor_id,
                                 uint64_t attempt) {
  ActorAttempt* a = attempts_->Find(actor_id, attempt);
  if (a == nullptr) return;
  a->placing = true;
  After(options_.retry_ms,
        [this, actor_id, attempt] { Place(actor_id, attempt); });
}

void ActorPlacer::After(int64_t ms, std::function<void()> fn) {
  std::weak_ptr<bool> alive = alive_;
  loop_->RunAfter(ms, [alive, fn = std::move(fn)] {
    if (!alive.expired()) fn();
  });
}

}  // namespace shoal
