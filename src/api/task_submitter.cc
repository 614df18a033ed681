#include "api/task_submitter.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "api/task_error.h"
#include "common/logging.h"
#include "common/util.h"

namespace shoal::internal {

void FillWorkerCommand(const WorkerCommand& command,
                       proto::WorkerCommand* out) {
  out->mutable_argv()->Assign(command.argv.begin(), command.argv.end());
  out->mutable_env()->insert(command.env.begin(), command.env.end());
}

namespace {

// Tasks pushed to one worker before earlier ones return. Pipelining pays for
// tiny tasks (it hides the round trip) and hurts long ones (they would queue
// behind each other on one worker while other leases sit idle), so the depth
// follows the shape's measured run time: about 2 ms of work in flight.
constexpr size_t kMaxInFlightPerWorker = 32;
constexpr double kInFlightWorkUs = 2000;
constexpr int kMaxPendingLeaseRequests = 10;
constexpr int kMaxLeaseFailures = 3;

}  // namespace

size_t TaskSubmitter::ShapeQueue::MaxInFlight() const {
  if (avg_exec_us < 0) return 1;
  double depth = kInFlightWorkUs / std::max(avg_exec_us, 1.0);
  return static_cast<size_t>(
      std::clamp(depth, 1.0, static_cast<double>(kMaxInFlightPerWorker)));
}

TaskSubmitter::TaskSubmitter(rpc::EventLoop* loop, NodeView* nodes,
                             Delegate* delegate, Options options)
    : loop_(loop),
      nodes_(nodes),
      delegate_(delegate),
      options_(std::move(options)),
      blob_hash_(options_.blob_hash) {}

void TaskSubmitter::Enqueue(const std::string& task_id,
                            const ResourceSet& shape,
                            const std::string& shape_key, int depth,
                            bool front) {
  std::string key = absl::StrCat(shape_key, "@", depth);
  ShapeQueue& q = shapes_[key];
  if (q.key.empty()) {
    q.key = std::move(key);
    q.shape = shape;
    q.depth = depth;
  }
  if (front) {
    q.queue.push_front({task_id});
  } else {
    q.queue.push_back({task_id});
  }
  Pump(q);
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
  for (auto& w : q.workers) {
    // A task that is gone is skipped: the worker takes the next one.
    while (!q.queue.empty() && w->in_flight.empty()) {
      Queued task = std::move(q.queue.front());
      q.queue.pop_front();
      Push(q, *w, task);
    }
  }
  int wanted = static_cast<int>(std::min<size_t>(
      q.queue.size(), static_cast<size_t>(kMaxPendingLeaseRequests)));
  while (!q.awaiting_program && q.pending_lease_requests < wanted &&
         !nodes_->lease_agent().empty()) {
    RequestLease(q, nodes_->lease_agent(), /*no_spillback=*/false);
  }
  const size_t depth = q.MaxInFlight();
  const size_t reserved = static_cast<size_t>(q.pending_lease_requests);
  while (q.queue.size() > reserved) {
    LeasedWorker* best = nullptr;
    for (auto& w : q.workers) {
      if (w->in_flight.size() >= depth) continue;
      if (best == nullptr || w->in_flight.size() < best->in_flight.size()) {
        best = w.get();
      }
    }
    if (best == nullptr) break;
    Queued task = std::move(q.queue.front());
    q.queue.pop_front();
    Push(q, *best, task);
  }
  if (q.queue.empty() && q.pending_lease_requests > 0) WithdrawRequests(q);
}

void TaskSubmitter::WithdrawRequests(ShapeQueue& q) {
  for (auto& [number, out] : q.requests_out) {
    if (out.canceling) continue;
    out.canceling = true;
    --q.pending_lease_requests;
    proto::CancelLease req;
    req.set_request_id(absl::StrCat(number));
    rpc::CallProto<proto::CancelLeaseReply>(
        nodes_->Channel(out.agent), proto::CANCEL_LEASE_REQUEST, req,
        [](absl::StatusOr<proto::CancelLeaseReply>) {});
  }
}

void TaskSubmitter::Push(ShapeQueue& q, LeasedWorker& w, const Queued& task) {
  proto::TaskSpec spec;
  if (!delegate_->BuildSpec(task.task_id, w.node_id, w.worker_id, &spec))
    return;
  w.in_flight.push_back(task);
  w.channel->Call(proto::PUSH_TASK, spec.SerializeAsString(),
                  [this, key = q.key, lease = w.lease_id,
                   id = task.task_id](absl::StatusOr<std::string> r) {
                    OnReply(key, lease, id, std::move(r));
                  });
}

void TaskSubmitter::OnReply(const std::string& key, const std::string& lease_id,
                            const std::string& task_id,
                            absl::StatusOr<std::string> reply) {
  auto shape = shapes_.find(key);
  if (shape == shapes_.end()) return;  // cleared
  ShapeQueue& q = shape->second;
  auto found =
      std::find_if(q.workers.begin(), q.workers.end(),
                   [&](const auto& w) { return w->lease_id == lease_id; });
  SHOAL_LOG(DEBUG) << "reply for " << task_id << " lease " << lease_id
                   << " worker " << (found != q.workers.end()) << ": "
                   << (reply.ok() ? "ok" : reply.status().ToString());
  if (found == q.workers.end()) return;  // already declared lost
  LeasedWorker* w = found->get();
  if (!reply.ok() && reply.status().code() == absl::StatusCode::kUnavailable) {
    // A push that was never written ran nowhere: it costs no retry.
    return OnWorkerLost(q, lease_id, reply.status(),
                        rpc::NeverSent(reply.status()) ? task_id : "");
  }
  auto pos =
      std::find_if(w->in_flight.begin(), w->in_flight.end(),
                   [&](const Queued& t) { return t.task_id == task_id; });
  if (pos != w->in_flight.end()) w->in_flight.erase(pos);
  if (w->in_flight.empty()) w->idle_since_us = MonotonicUs();
  std::string node = w->node_id;
  absl::StatusOr<proto::TaskResult> result;
  if (!reply.ok()) {
    result = TaskError(
        ErrorKind::kOther,
        absl::StrCat("task ", task_id, " failed: ", reply.status().message()));
  } else if (!result.emplace().ParseFromString(*reply)) {
    result = TaskError(
        ErrorKind::kOther,
        absl::StrCat("task ", task_id, ": malformed task result from worker"));
  } else if (result->ok()) {
    double exec = static_cast<double>(result->exec_us());
    q.avg_exec_us = q.avg_exec_us < 0 ? exec : 0.8 * q.avg_exec_us + 0.2 * exec;
  }
  delegate_->TaskReplied(task_id, node, std::move(result));
  Pump(q);
}

// A worker's connection broke: the oldest task in flight was running (unless
// it is `never_sent`, whose push was never written) and is the delegate's to
// retry or fail; the others never started and go back to the queue.
void TaskSubmitter::OnWorkerLost(ShapeQueue& q, const std::string& lease_id,
                                 const absl::Status& why,
                                 const std::string& never_sent) {
  auto pos =
      std::find_if(q.workers.begin(), q.workers.end(),
                   [&](const auto& w) { return w->lease_id == lease_id; });
  if (pos == q.workers.end()) return;
  std::unique_ptr<LeasedWorker> w = std::move(*pos);
  q.workers.erase(pos);
  std::string running =
      w->in_flight.empty() ? "" : w->in_flight.front().task_id;
  if (running == never_sent) running.clear();
  for (auto it = w->in_flight.rbegin(); it != w->in_flight.rend(); ++it) {
    if (it->task_id != running) q.queue.push_front(*it);
  }
  std::string agent = w->agent;
  // The channel is in the middle of failing its calls: free it later.
  rpc::Channel* channel = w->channel.release();
  loop_->Post([channel] { delete channel; });

  proto::GetWorkerExitRequest req;
  req.set_worker_id(w->worker_id);
  rpc::CallProto<proto::GetWorkerExitReply>(
      nodes_->Channel(agent), proto::GET_WORKER_EXIT, req,
      [this, running, agent, key = q.key,
       why](absl::StatusOr<proto::GetWorkerExitReply> exit) {
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
    for (const auto& w : q.workers) {
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
  delegate_->FetchNodes([this](absl::StatusOr<proto::ClusterStatus> status) {
    if (!status.ok()) return;
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
  q.requests_out[number] = {agent};
  ++q.pending_lease_requests;
  proto::RequestLeaseRequest req;
  req.set_request_id(absl::StrCat(number));
  req.set_job_id(options_.job_id);
  q.shape.ToProto(req.mutable_shape());
  req.set_binary_path(options_.binary_path);
  req.set_binary_hash(options_.binary_hash);
  req.set_blob_hash(blob_hash_);
  if (!options_.worker_command.empty()) {
    FillWorkerCommand(options_.worker_command, req.mutable_worker_command());
  }
  req.set_no_spillback(no_spillback);
  req.set_depth(q.depth);
  rpc::CallProto<proto::RequestLeaseReply>(
      nodes_->Channel(agent), proto::REQUEST_LEASE, req,
      [this, key = q.key, agent, number, named_copy = !blob_hash_.empty()](
          absl::StatusOr<proto::RequestLeaseReply> reply) {
        auto shape = shapes_.find(key);
        if (shape == shapes_.end()) {  // cleared: give back what came
          if (reply.ok() &&
              reply->outcome() == proto::RequestLeaseReply::GRANTED) {
            ReturnLease(agent, reply->lease_id());
          }
          return;
        }
        ShapeQueue& q = shape->second;
        if (auto out = q.requests_out.find(number);
            out != q.requests_out.end()) {
          if (!out->second.canceling) --q.pending_lease_requests;
          q.requests_out.erase(out);
        }
        if (!reply.ok()) {
          if (reply.status().code() == absl::StatusCode::kPermissionDenied) {
            return FailQueue(
                q, TaskError(ErrorKind::kOther, reply.status().message()));
          }
          SHOAL_LOG(WARNING)
              << "lease request to " << agent << " failed: " << reply.status();
          nodes_->MarkBad(agent);
          // Try again shortly, elsewhere if possible.
          loop_->RunAfter(200, [this, key] {
            RefreshNodes();
            auto shape = shapes_.find(key);
            if (shape != shapes_.end()) Pump(shape->second);
          });
          return;
        }
        switch (reply->outcome()) {
          case proto::RequestLeaseReply::GRANTED:
            q.consecutive_failures = 0;
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
            // A node without the program, asked before any copy was
            // known: not a failure while the runtime sends one. With a
            // copy named, the head lost it or never had it: a failure.
            if (reply->needs_program() && !named_copy &&
                options_.program_wanted) {
              AwaitProgram(q, reply->error());
              break;
            }
            if (++q.consecutive_failures >= kMaxLeaseFailures) {
              FailQueue(q, TaskError(ErrorKind::kOther,
                                     absl::StrCat("cannot start a worker: ",
                                                  reply->error())));
              q.consecutive_failures = 0;
            }
            break;
        }
        Pump(q);
      });
}

void TaskSubmitter::AwaitProgram(ShapeQueue& q, const std::string& error) {
  // A copy came while this request was out: lease again with its hash.
  if (!blob_hash_.empty()) return;
  q.awaiting_program = true;
  q.lacking = error;
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
    if (!q.awaiting_program) continue;
    q.awaiting_program = false;
    if (blob_hash.ok()) {
      Pump(q);
      continue;
    }
    FailQueue(q, TaskError(ErrorKind::kOther,
                           absl::StrCat("cannot start a worker: ", q.lacking,
                                        "; and this program could not send "
                                        "the head a copy: ",
                                        blob_hash.status().message())));
  }
}

void TaskSubmitter::AddWorker(ShapeQueue& q, const std::string& agent,
                              const proto::RequestLeaseReply& reply) {
  if (q.queue.empty()) return ReturnLease(agent, reply.lease_id());
  auto w = std::make_unique<LeasedWorker>();
  w->lease_id = reply.lease_id();
  w->worker_id = reply.worker_id();
  w->node_id = reply.node_id();
  w->agent = agent;
  nodes_->NoteAgent(w->node_id, agent);
  w->channel = std::make_unique<rpc::Channel>(
      loop_, reply.worker_address(), options_.token, options_.peer_name);
  w->idle_since_us = MonotonicUs();
  q.workers.push_back(std::move(w));
}

void TaskSubmitter::ReturnLease(const std::string& agent,
                                const std::string& lease_id) {
  proto::ReturnLeaseRequest req;
  req.set_lease_id(lease_id);
  rpc::CallProto<proto::Empty>(nodes_->Channel(agent), proto::RETURN_LEASE, req,
                               [](absl::StatusOr<proto::Empty>) {});
}

// Returns leases idle for lease_idle_ms; at once when tasks of another
// shape are waiting for a lease (an idle lease of ours may be what holds
// the resources they need).
void TaskSubmitter::ReturnIdleLeases() {
  int64_t now = MonotonicUs();
  bool starving = false;
  for (const auto& [key, q] : shapes_) {
    starving |= !q.queue.empty() && q.pending_lease_requests > 0;
  }
  for (auto& [key, q] : shapes_) {
    if (!q.queue.empty()) continue;
    int64_t idle_us = starving ? 0 : options_.lease_idle_ms * 1000;
    for (auto it = q.workers.begin(); it != q.workers.end();) {
      LeasedWorker& w = **it;
      if (w.in_flight.empty() && now - w.idle_since_us >= idle_us) {
        ReturnLease(w.agent, w.lease_id);
        it = q.workers.erase(it);
      } else {
        ++it;
      }
    }
  }
}

void TaskSubmitter::ReturnAll(std::function<void()> done) {
  auto remaining = std::make_shared<int>(1);
  auto finish = [done = std::move(done), remaining] {
    if (--*remaining == 0) done();
  };
  for (auto& [key, q] : shapes_) {
    for (auto& w : q.workers) {
      ++*remaining;
      proto::ReturnLeaseRequest req;
      req.set_lease_id(w->lease_id);
      rpc::CallProto<proto::Empty>(
          nodes_->Channel(w->agent), proto::RETURN_LEASE, req,
          [finish](absl::StatusOr<proto::Empty>) { finish(); }, 1000);
    }
    q.workers.clear();
  }
  finish();
}

void TaskSubmitter::FailQueue(ShapeQueue& q, const absl::Status& error) {
  std::deque<Queued> queue = std::move(q.queue);
  q.queue.clear();
  for (const Queued& task : queue) delegate_->TaskFailed(task.task_id, error);
}

size_t TaskSubmitter::queued() const {
  size_t n = 0;
  for (const auto& [key, q] : shapes_) n += q.queue.size();
  return n;
}

size_t TaskSubmitter::leased_workers() const {
  size_t n = 0;
  for (const auto& [key, q] : shapes_) n += q.workers.size();
  return n;
}

}  // namespace shoal::internal
