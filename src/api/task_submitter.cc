#include "api/task_submitter.h"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/task_error.h"
#include "common/logging.h"
#include "rpc/rpc.h"

namespace shoal::internal {

void FillWorkerCommand(const WorkerCommand& command,
                       proto::WorkerCommand* out) {
  out->mutable_argv()->Assign(command.argv.begin(), command.argv.end());
  out->mutable_env()->insert(command.env.begin(), command.env.end());
}

namespace {

// CANCEL_TASK to the agent of the worker that runs (or has queued) the task.
void SendCancel(rpc::Channel* agent, const std::string& worker_id,
                const std::string& task_id, bool force, bool recursive) {
  proto::CancelTaskRequest req;
  req.set_worker_id(worker_id);
  req.set_task_id(task_id);
  req.set_force(force);
  req.set_recursive(recursive);
  rpc::CallProto<proto::Empty>(agent, proto::CANCEL_TASK, req,
                               [task_id](absl::StatusOr<proto::Empty> r) {
                                 // A worker that ended has ended the task too.
                                 if (!r.ok() && !absl::IsNotFound(r.status())) {
                                   SHOAL_LOG(WARNING)
                                       << "cancel of task " << task_id << ": "
                                       << r.status();
                                 }
                               });
}

// Gives lease `lease_id` back to `agent`, the agent that granted it; `done`
// (if set) runs once it answered or after `timeout_ms` (0: the channel's).
void SendReturnLease(rpc::Channel* agent, const std::string& lease_id,
                     std::function<void()> done = {}, int64_t timeout_ms = 0) {
  proto::ReturnLeaseRequest req;
  req.set_lease_id(lease_id);
  rpc::CallProto<proto::Empty>(
      agent, proto::RETURN_LEASE, req,
      [done = std::move(done)](absl::StatusOr<proto::Empty>) {
        if (done) done();
      },
      timeout_ms);
}

}  // namespace

TaskSubmitter::TaskSubmitter(rpc::Executor* loop, NodeView* nodes,
                             Delegate* delegate, Options options)
    : loop_(loop),
      nodes_(nodes),
      delegate_(delegate),
      options_(std::move(options)),
      blob_hash_(options_.blob_hash) {}

TaskSubmitter::~TaskSubmitter() { *alive_ = false; }

void TaskSubmitter::Enqueue(const std::string& task_id,
                            const ResourceSet& shape,
                            const LabelSelector& selector,
                            const std::string& shape_key, int depth, bool front,
                            bool pipelined) {
  std::string key = absl::StrCat(shape_key, "@", depth);
  auto it = shapes_.find(key);
  if (it == shapes_.end()) {
    it = shapes_.try_emplace(key, key, shape, depth, selector, pipelined).first;
  }
  it->second.Add(task_id, front);
  Pump(it->second);
}

// Spreads before it pipelines. Tasks of one shape may need to run at once,
// one per host (they meet in a barrier), so:
//  1. idle leased workers get a task each;
//  2. what still waits asks for more leases (at most
//     kMaxPendingLeaseRequests at a time; agents spill them back to other
//     nodes that fit);
//  3. only the tasks those pending leases will not take are pipelined
//     behind running ones, on the least busy workers, as deep as the
//     shape's measured run time makes worthwhile. A long queue of short
//     tasks is pipelined at once; a task never waits behind another while
//     a lease for it may still come;
//  4. a queue that ran dry withdraws the lease requests still out.
void TaskSubmitter::Pump(ShapeQueue& q) {
  for (const auto& w : q.workers()) {
    // A task that is gone is skipped: the worker takes the next one.
    while (!q.empty() && w->in_flight.empty()) Push(q, *w, q.TakeNext());
  }
  for (int wanted = q.LeaseRequestsWanted();
       wanted > 0 && !nodes_->lease_agent().empty(); --wanted) {
    RequestLease(q, nodes_->lease_agent(), /*no_spillback=*/false);
  }
  const size_t reserved = static_cast<size_t>(q.pending_lease_requests());
  while (q.size() > reserved) {
    LeasedWorker* best = q.LeastBusyWorker();
    if (best == nullptr) break;
    Push(q, *best, q.TakeNext());
  }
  if (q.empty() && q.pending_lease_requests() > 0) WithdrawRequests(q);
}

void TaskSubmitter::WithdrawRequests(ShapeQueue& q) {
  for (const auto& [number, agent] : q.Withdraw()) {
    proto::CancelLease req;
    req.set_request_id(absl::StrCat(number));
    rpc::CallProto<proto::CancelLeaseReply>(
        nodes_->Channel(agent), proto::CANCEL_LEASE_REQUEST, req,
        [](absl::StatusOr<proto::CancelLeaseReply>) {});
  }
}

void TaskSubmitter::Push(ShapeQueue& q, LeasedWorker& w,
                         const std::string& task_id) {
  proto::TaskSpec spec;
  if (!delegate_->BuildSpec(task_id, w.node_id, w.worker_id, &spec)) return;
  w.in_flight.push_back(task_id);
  w.channel->Call(proto::PUSH_TASK, spec.SerializeAsString(),
                  [this, alive = alive_, key = q.key(), lease = w.lease_id,
                   task_id](absl::StatusOr<std::string> r) {
                    if (*alive) OnReply(key, lease, task_id, std::move(r));
                  });
}

void TaskSubmitter::OnReply(const std::string& key, const std::string& lease_id,
                            const std::string& task_id,
                            absl::StatusOr<std::string> reply) {
  auto shape = shapes_.find(key);
  if (shape == shapes_.end()) return;  // cleared
  ShapeQueue& q = shape->second;
  LeasedWorker* w = q.FindWorker(lease_id);
  SHOAL_LOG(DEBUG) << "reply for " << task_id << " lease " << lease_id
                   << " worker " << (w != nullptr) << ": "
                   << (reply.ok() ? "ok" : reply.status().ToString());
  if (w == nullptr) return;  // already declared lost
  if (!reply.ok() && reply.status().code() == absl::StatusCode::kUnavailable) {
    // A push that was never written ran nowhere: it costs no retry.
    return OnWorkerLost(q, lease_id, reply.status(),
                        rpc::NeverSent(reply.status()) ? task_id : "");
  }
  absl::StatusOr<proto::TaskResult> result;
  int64_t exec_us = -1;
  if (!reply.ok()) {
    result = TaskError(
        ErrorKind::kOther,
        absl::StrCat("task ", task_id, " failed: ", reply.status().message()));
  } else if (!result.emplace().ParseFromString(*reply)) {
    result = TaskError(
        ErrorKind::kOther,
        absl::StrCat("task ", task_id, ": malformed task result from worker"));
  } else if (result->ok()) {
    exec_us = result->exec_us();
  }
  const bool exiting = result.ok() && result->worker_exiting();
  q.TaskReturned(*w, task_id, loop_->NowUs(), exec_us);
  std::string node = w->node_id;
  delegate_->TaskReplied(task_id, node, std::move(result));
  if (exiting) {
    // The worker ends after this answer (its function's max_calls): nothing
    // more goes to it, and its lease ends with its process.
    return OnWorkerLost(q, lease_id,
                        absl::UnavailableError("the worker reached the "
                                               "function's max_calls"));
  }
  Pump(q);
}

void TaskSubmitter::DropWorker(std::unique_ptr<LeasedWorker> w) {
  std::shared_ptr<rpc::Channel> channel = std::move(w->channel);
  loop_->Post([channel] {});
}

void TaskSubmitter::OnWorkerLost(ShapeQueue& q, const std::string& lease_id,
                                 const absl::Status& why,
                                 const std::string& never_sent) {
  std::string running;
  std::unique_ptr<LeasedWorker> w =
      q.RemoveLost(lease_id, never_sent, &running);
  if (w == nullptr) return;
  std::string agent = w->agent;
  proto::GetWorkerExitRequest req;
  req.set_worker_id(w->worker_id);
  DropWorker(std::move(w));
  rpc::CallProto<proto::GetWorkerExitReply>(
      nodes_->Channel(agent), proto::GET_WORKER_EXIT, req,
      [this, alive = alive_, running, agent, key = q.key(),
       why](absl::StatusOr<proto::GetWorkerExitReply> exit) {
        if (!*alive) return;
        std::string how;
        if (exit.ok() && exit->exited()) {
          how = exit->description();
        } else if (exit.ok()) {
          how = absl::StrCat("connection lost (", why.message(),
                             "); agent says: ", exit->description());
        } else {
          how = absl::StrCat("its node agent at ", agent,
                             " is unreachable too: the node died (",
                             why.message(), ")");
          nodes_->MarkBad(agent);
        }
        if (!running.empty()) delegate_->WorkerDied(running, how);
        auto q = shapes_.find(key);
        if (q != shapes_.end()) Pump(q->second);
      },
      5000);
  Pump(q);
}

// Workers on a node the head declared dead (its heartbeats stopped) are
// lost even while their connections look open: a host cut off by the
// network drops packets, and nothing ever closes them.
void TaskSubmitter::LoseWorkersOnDeadNodes() {
  std::set<std::string> dead = nodes_->DeadAgents();
  if (dead.empty()) return;
  std::vector<std::pair<std::string, std::string>> lost;  // key, lease
  for (auto& [key, q] : shapes_) {
    for (const auto& w : q.workers()) {
      if (dead.count(w->agent)) lost.emplace_back(key, w->lease_id);
    }
  }
  for (const auto& [key, lease_id] : lost) {
    auto q = shapes_.find(key);
    if (q == shapes_.end()) continue;
    OnWorkerLost(
        q->second, lease_id,
        absl::UnavailableError("the head stopped hearing from its node"));
  }
}

void TaskSubmitter::RefreshNodes() {
  delegate_->FetchNodes(
      [this, alive = alive_](absl::StatusOr<proto::ClusterStatus> status) {
        if (!*alive || !status.ok()) return;
        nodes_->Update(*status);
        LoseWorkersOnDeadNodes();
        for (auto& [key, q] : shapes_) Pump(q);
      });
}

void TaskSubmitter::Tick() {
  ReturnIdleLeases();
  if (++ticks_ % 10 == 0) RefreshNodes();
}

void TaskSubmitter::RequestLease(ShapeQueue& q, const std::string& agent,
                                 bool no_spillback) {
  uint64_t number = ++next_request_;
  q.RequestSent(number, agent);
  proto::RequestLeaseRequest req;
  req.set_request_id(absl::StrCat(number));
  req.set_job_id(options_.job_id);
  q.shape().ToProto(req.mutable_shape());
  req.set_binary_path(options_.binary_path);
  req.set_binary_hash(options_.binary_hash);
  req.set_blob_hash(blob_hash_);
  if (!options_.worker_command.empty()) {
    FillWorkerCommand(options_.worker_command, req.mutable_worker_command());
  }
  req.set_no_spillback(no_spillback);
  req.set_depth(q.depth());
  if (!q.selector().empty()) {
    q.selector().ToProto(req.mutable_label_selector());
  }
  rpc::CallProto<proto::RequestLeaseReply>(
      nodes_->Channel(agent), proto::REQUEST_LEASE, req,
      [this, alive = alive_, key = q.key(), agent, number,
       named_copy = !blob_hash_.empty()](
          absl::StatusOr<proto::RequestLeaseReply> reply) {
        if (*alive)
          OnLeaseReply(key, agent, number, named_copy, std::move(reply));
      });
}

void TaskSubmitter::OnLeaseReply(
    const std::string& key, const std::string& agent, uint64_t number,
    bool named_copy, absl::StatusOr<proto::RequestLeaseReply> reply) {
  auto shape = shapes_.find(key);
  if (shape == shapes_.end()) {  // cleared: give back what came
    if (reply.ok() && reply->outcome() == proto::RequestLeaseReply::GRANTED) {
      SendReturnLease(nodes_->Channel(agent), reply->lease_id());
    }
    return;
  }
  ShapeQueue& q = shape->second;
  q.RequestAnswered(number);
  if (!reply.ok()) return OnLeaseRequestFailed(q, agent, reply.status());
  switch (reply->outcome()) {
    case proto::RequestLeaseReply::GRANTED:
      q.StartSucceeded();
      AddWorker(q, agent, *reply);
      break;
    case proto::RequestLeaseReply::SPILLBACK:
      RequestLease(q, reply->spillback_address(), /*no_spillback=*/true);
      break;
    case proto::RequestLeaseReply::CANCELED:
      break;  // withdrawn (WithdrawRequests)
    case proto::RequestLeaseReply::INFEASIBLE:
      FailQueue(q, TaskError(ErrorKind::kInfeasible, reply->error()));
      break;
    case proto::RequestLeaseReply::INVALID:
      FailQueue(q, TaskError(ErrorKind::kOther, reply->error()));
      break;
    default:
      OnLeaseFailed(q, named_copy, *reply);
      break;
  }
  Pump(q);
}

void TaskSubmitter::OnLeaseRequestFailed(ShapeQueue& q,
                                         const std::string& agent,
                                         const absl::Status& error) {
  if (error.code() == absl::StatusCode::kPermissionDenied) {
    return FailQueue(q, TaskError(ErrorKind::kOther, error.message()));
  }
  SHOAL_LOG(WARNING) << "lease request to " << agent << " failed: " << error;
  nodes_->MarkBad(agent);
  // Try again shortly, elsewhere if possible.
  loop_->RunAfter(200, [this, alive = alive_, key = q.key()] {
    if (!*alive) return;
    RefreshNodes();
    auto shape = shapes_.find(key);
    if (shape != shapes_.end()) Pump(shape->second);
  });
}

void TaskSubmitter::OnLeaseFailed(ShapeQueue& q, bool named_copy,
                                  const proto::RequestLeaseReply& reply) {
  // A node without the program, asked before any copy was known: not a
  // failure while the runtime sends one. With a copy named, the head lost
  // it or never had it: a failure.
  if (reply.needs_program() && !named_copy && options_.program_wanted) {
    return AwaitProgram(q, reply.error());
  }
  if (q.CountStartFailure()) {
    FailQueue(
        q, TaskError(ErrorKind::kOther,
                     absl::StrCat("cannot start a worker: ", reply.error())));
  }
}

void TaskSubmitter::AwaitProgram(ShapeQueue& q, const std::string& error) {
  // A copy came while this request was out: lease again with its hash.
  if (!blob_hash_.empty()) return;
  q.AwaitProgram(error);
  if (program_asked_) return;
  program_asked_ = true;
  SHOAL_LOG(INFO) << "a node has no copy of " << options_.binary_path
                  << "; sending the head one";
  options_.program_wanted();
}

void TaskSubmitter::SetProgramCopy(absl::StatusOr<std::string> blob_hash) {
  program_asked_ = false;
  if (blob_hash.ok() && blob_hash->empty()) {
    blob_hash = absl::FailedPreconditionError("there is no program to send");
  }
  if (blob_hash.ok()) blob_hash_ = *blob_hash;
  for (auto& [key, q] : shapes_) {
    if (!q.awaiting_program()) continue;
    std::string lacking = q.EndProgramWait();
    if (blob_hash.ok()) {
      Pump(q);
      continue;
    }
    FailQueue(q, TaskError(ErrorKind::kOther,
                           absl::StrCat("cannot start a worker: ", lacking,
                                        "; and this program could not send "
                                        "the head a copy: ",
                                        blob_hash.status().message())));
  }
}

void TaskSubmitter::AddWorker(ShapeQueue& q, const std::string& agent,
                              const proto::RequestLeaseReply& reply) {
  if (q.empty()) {
    return SendReturnLease(nodes_->Channel(agent), reply.lease_id());
  }
  auto w = std::make_unique<LeasedWorker>();
  w->lease_id = reply.lease_id();
  w->worker_id = reply.worker_id();
  w->node_id = reply.node_id();
  w->agent = agent;
  nodes_->NoteAgent(w->node_id, agent);
  w->channel = nodes_->Connect(reply.worker_address());
  w->idle_since_us = loop_->NowUs();
  w->leased_at_us = w->idle_since_us;
  q.AddWorker(std::move(w));
}

bool TaskSubmitter::CancelPushed(const std::string& task_id, bool force,
                                 bool recursive) {
  for (auto& [key, q] : shapes_) {
    if (const LeasedWorker* w = q.WorkerHolding(task_id)) {
      SendCancel(nodes_->Channel(w->agent), w->worker_id, task_id, force,
                 recursive);
      return true;
    }
  }
  return false;
}

// Returns leases idle for lease_idle_ms, and idle ones held for
// lease_reuse_ms; at once when tasks of another shape are waiting for a
// lease (an idle lease of ours may be what holds the resources they need).
void TaskSubmitter::ReturnIdleLeases() {
  int64_t now = loop_->NowUs();
  bool starving = false;
  for (const auto& [key, q] : shapes_) starving |= q.starving();
  int64_t idle_us = starving ? 0 : options_.lease_idle_ms * 1000;
  int64_t max_age_us = options_.lease_reuse_ms * 1000;
  for (auto& [key, q] : shapes_) {
    for (auto& w : q.TakeIdle(now, idle_us, max_age_us)) {
      SendReturnLease(nodes_->Channel(w->agent), w->lease_id);
    }
  }
}

void TaskSubmitter::ReturnAll(std::function<void()> done) {
  auto remaining = std::make_shared<int>(1);
  auto finish = [done = std::move(done), remaining] {
    if (--*remaining == 0) done();
  };
  for (auto& [key, q] : shapes_) {
    for (auto& w : q.TakeAllWorkers()) {
      ++*remaining;
      SendReturnLease(nodes_->Channel(w->agent), w->lease_id, finish, 1000);
    }
  }
  finish();
}

void TaskSubmitter::FailQueue(ShapeQueue& q, const absl::Status& error) {
  for (const std::string& task : q.TakeAll()) {
    delegate_->TaskFailed(task, error);
  }
}

size_t TaskSubmitter::queued() const {
  size_t n = 0;
  for (const auto& [key, q] : shapes_) n += q.size();
  return n;
}

size_t TaskSubmitter::leased_workers() const {
  size_t n = 0;
  for (const auto& [key, q] : shapes_) n += q.workers().size();
  return n;
}

}  // namespace shoal::internal
