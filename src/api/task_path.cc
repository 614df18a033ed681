#include "api/task_path.h"

#include <utility>

#include "api/node_view.h"
#include "api/task_error.h"
#include "rpc/event_loop.h"
#include "rpc/rpc.h"
#include "shoal/shoal.pb.h"

namespace shoal::internal {
namespace {

// How often the maintenance timer fires (lease ticks, task events).
constexpr int64_t kMaintenanceMs = 100;

}  // namespace

TaskPath::TaskPath(rpc::EventLoop* loop, Head* head, OwnedObjects* objects,
                   SubmitWindow* window, Options options)
    : loop_(loop),
      head_(head),
      options_(std::move(options)),
      nodes_(std::make_unique<NodeView>(
          loop, NodeView::Options{.token = options_.token,
                                  .peer_name = options_.peer_name})),
      lifecycle_(objects, window, options_.inline_threshold, LifecycleHooks()),
      actors_(loop, this),
      events_(options_.events_job_id, options_.task_events_interval_ms,
              [this](std::string batch, auto done) {
                head_->ReportTaskEvents(std::move(batch), std::move(done));
              }) {
  if (options_.cpp_submit.has_value()) {
    cpp_submitter_ = std::make_unique<TaskSubmitter>(loop_, nodes_.get(), this,
                                                     *options_.cpp_submit);
  }
  submitter_ = std::make_unique<TaskSubmitter>(loop_, nodes_.get(), this,
                                               options_.submit);
  lifecycle_.SetOwner(options_.owner);
  lifecycle_.SetEvents(&events_.buffer());
}

TaskPath::~TaskPath() { *alive_ = false; }

TaskLifecycle::Hooks TaskPath::LifecycleHooks() {
  return {
      .enqueue =
          [this](TaskEntry& t, bool front) {
            TaskSubmitter& submitter =
                t.in_cpp_program ? *cpp_submitter_ : *submitter_;
            submitter.Enqueue(t.id, t.shape, t.selector, t.shape_key, t.depth,
                              front, /*pipelined=*/!t.worker_may_end);
          },
      .actor_ready = [this](
                         const std::string& actor,
                         const std::string& id) { actors_.Ready(actor, id); },
      .actor_drop = [this](const std::string& actor,
                           const std::string& id) { actors_.Drop(actor, id); },
      .post = [this](std::function<void()> fn) { loop_->Post(std::move(fn)); },
      .transfer_address_of =
          [this](const std::string& node) {
            return nodes_->TransferAddressOf(node);
          },
      .cancel_sent =
          [this](const TaskEntry& t, bool force, bool recursive) {
            TaskSubmitter& submitter =
                t.in_cpp_program ? *cpp_submitter_ : *submitter_;
            return submitter.CancelPushed(t.id, force, recursive);
          },
      .borrowed = options_.borrowed,
      .settled = options_.settled,
  };
}

std::string TaskPath::Start(const proto::ClusterStatus& status) {
  nodes_->Update(status);
  ScheduleMaintenance();
  return nodes_->LocalAgent();
}

void TaskPath::Submit(std::unique_ptr<TaskEntry> task) {
  if (!task->actor_id.empty()) actors_.Add(task->actor_id, task->id);
  lifecycle_.Submit(std::move(task));
}

void TaskPath::ForgetStored(const std::string& id,
                            const std::set<std::string>& nodes) {
  lifecycle_.Forget(id);
  DeleteEverywhere(id, nodes, nullptr, 10000);
}

void TaskPath::SetProgramCopies(
    const absl::StatusOr<ProgramCopies::Hashes>& copies) {
  auto hash = [&](std::string ProgramCopies::Hashes::*which)
      -> absl::StatusOr<std::string> {
    if (!copies.ok()) return copies.status();
    return (*copies).*which;
  };
  submitter_->SetProgramCopy(hash(&ProgramCopies::Hashes::program));
  if (cpp_submitter_ != nullptr) {
    cpp_submitter_->SetProgramCopy(hash(&ProgramCopies::Hashes::cpp_program));
  }
}

void TaskPath::TellBlocked(int shallowest) {
  proto::WorkerBlockedRequest req;
  req.set_worker_id(options_.worker_id);
  if (shallowest >= 0) req.set_depth(shallowest);
  rpc::CallProto<proto::Empty>(
      nodes_->Channel(options_.worker_agent_address),
      shallowest >= 0 ? proto::WORKER_BLOCKED : proto::WORKER_UNBLOCKED, req,
      [](absl::StatusOr<proto::Empty>) {}, 5000);
}

void TaskPath::TellLending(bool lending) {
  if (options_.worker_agent_address.empty()) return;
  proto::WorkerLendingRequest req;
  req.set_worker_id(options_.worker_id);
  req.set_lending(lending);
  rpc::CallProto<proto::Empty>(
      nodes_->Channel(options_.worker_agent_address), proto::WORKER_LENDING,
      req, [](absl::StatusOr<proto::Empty>) {}, 5000);
}

void TaskPath::Finish(
    const std::vector<std::pair<std::string, std::set<std::string>>>& stored,
    std::function<void()> done) {
  auto remaining = std::make_shared<int>(1);
  auto finish = [done = std::move(done), remaining] {
    if (--*remaining == 0) done();
  };
  for (const auto& [id, nodes] : stored) {
    *remaining += DeleteEverywhere(id, nodes, finish, 1000);
  }
  ForEachSubmitter([&](TaskSubmitter& submitter) {
    ++*remaining;
    submitter.ReturnAll(finish);
  });
  // What the last tasks did reaches the head.
  ++*remaining;
  events_.Flush(finish);
  finish();
}

TaskLifecycle::Taken TaskPath::Stop() {
  *alive_ = false;
  // The entries it lists are taken below.
  events_.buffer().Clear();
  actors_.Shutdown();
  ForEachSubmitter([](TaskSubmitter& submitter) { submitter.Clear(); });
  nodes_->CloseChannels();
  return lifecycle_.TakeAll();
}

void TaskPath::ScheduleMaintenance() {
  loop_->RunAfter(kMaintenanceMs, [this, alive = alive_] {
    if (!*alive) return;
    ForEachSubmitter([](TaskSubmitter& submitter) { submitter.Tick(); });
    events_.Tick(kMaintenanceMs);
    ScheduleMaintenance();
  });
}

int TaskPath::DeleteEverywhere(const std::string& id,
                               const std::set<std::string>& nodes,
                               const std::function<void()>& done,
                               int64_t timeout_ms) {
  proto::ObjectRequest req;
  req.set_object_id(id);
  int asked = 0;
  for (const std::string& node : nodes) {
    std::string agent = nodes_->AgentOf(node);
    if (agent.empty()) continue;
    ++asked;
    rpc::CallProto<proto::Empty>(
        nodes_->Channel(agent), proto::OBJECT_DELETE, req,
        [done](absl::StatusOr<proto::Empty>) {
          if (done) done();
        },
        timeout_ms);
  }
  return asked;
}

void TaskPath::ForEachSubmitter(const std::function<void(TaskSubmitter&)>& fn) {
  if (submitter_ != nullptr) fn(*submitter_);
  if (cpp_submitter_ != nullptr) fn(*cpp_submitter_);
}

// ---- TaskSubmitter::Delegate ----

bool TaskPath::BuildSpec(const std::string& task_id, const std::string& node_id,
                         const std::string& worker_id, proto::TaskSpec* spec) {
  return lifecycle_.FillSpec(task_id, node_id, worker_id, spec);
}

void TaskPath::TaskReplied(const std::string& task_id,
                           const std::string& node_id,
                           absl::StatusOr<proto::TaskResult> result) {
  lifecycle_.TaskReplied(task_id, node_id, std::move(result));
}

void TaskPath::WorkerDied(const std::string& task_id, const std::string& how) {
  lifecycle_.WorkerDied(task_id, how);
}

void TaskPath::TaskFailed(const std::string& task_id, absl::Status error) {
  lifecycle_.Fail(task_id, std::move(error));
}

void TaskPath::FetchNodes(
    std::function<void(absl::StatusOr<proto::ClusterStatus>)> done) {
  head_->ClusterStatus(std::move(done));
}

// ---- ActorSubmitter::Delegate ----

bool TaskPath::BuildCall(const std::string& task_id, const std::string& node_id,
                         proto::TaskSpec* spec) {
  return lifecycle_.FillSpec(task_id, node_id, "", spec);
}

void TaskPath::CallReplied(const std::string& task_id,
                           const std::string& node_id,
                           proto::TaskResult result) {
  lifecycle_.CallReplied(task_id, node_id, std::move(result));
}

void TaskPath::CallFailed(const std::string& task_id,
                          ActorSubmitter::Failure failure,
                          const std::string& message) {
  lifecycle_.CallFailed(task_id,
                        failure == ActorSubmitter::Failure::kInfeasible
                            ? ErrorKind::kInfeasible
                            : ErrorKind::kActorDied,
                        message);
}

void TaskPath::GetActor(
    const proto::GetActorRequest& request,
    std::function<void(absl::StatusOr<proto::ActorInfo>)> done) {
  head_->GetActor(request, std::move(done));
}

std::unique_ptr<rpc::Channel> TaskPath::ConnectTo(const std::string& address) {
  return std::make_unique<rpc::TcpChannel>(loop_, address, options_.token,
                                           options_.peer_name);
}

}  // namespace shoal::internal
