#include "api/core_runtime.h"

#include <cxxabi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "api/actor_arguments.h"
#include "api/blocked_waits.h"
#include "api/job_registration.h"
#include "api/lending.h"
#include "api/object_client.h"
#include "api/object_io.h"
#include "api/owned_objects.h"
#include "api/program_copies.h"
#include "api/program_copy.h"
#include "api/submit_options.h"
#include "api/submit_window.h"
#include "api/task_context.h"
#include "api/task_entry.h"
#include "api/task_error.h"
#include "api/task_path.h"
#include "api/worker_program.h"
#include "common/environment.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "common/net.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "common/task_event_record.h"
#include "common/version.h"
#include "head_client/head_client.h"
#include "object_plane/transfer_client.h"
#include "rpc/event_loop.h"
#include "rpc/rpc.h"
#include "shoal/shoal.pb.h"

namespace shoal::internal {
namespace {

absl::Status OtherError(absl::string_view message) {
  return TaskError(ErrorKind::kOther, message);
}

// How long blocking calls wait for a head that cannot be reached (it
// restarts): SHOAL_HEAD_OUTAGE_WAIT_MS, 30 s by default.
int64_t HeadOutageWaitMs() { return env::GetInt(env::Var::kHeadOutageWaitMs); }

// Pulls stored objects into this process's memory (its host has no agent,
// so no store), presenting `token`.
std::function<absl::Status(const proto::StoredObject&, uint8_t*, uint64_t)>
PullIntoMemoryWith(std::string token) {
  return
      [token](const proto::StoredObject& where, uint8_t* dest, uint64_t size) {
        std::vector<object_plane::TransferSource> sources;
        for (const auto& s : where.sources()) {
          sources.push_back({s.node_id(), s.address()});
        }
        return object_plane::PullObject(where.object_id(), dest, size, sources,
                                        token);
      };
}

// The store of the node agent at `agent`; null when there is none ("") or
// it cannot be reached (objects stay in this process then).
std::unique_ptr<NodeStore> StoreOf(const std::string& agent,
                                   const std::string& token,
                                   const std::string& peer_name) {
  if (agent.empty()) return nullptr;
  auto store = ConnectNodeStore(agent, token, peer_name);
  if (!store.ok()) {
    SHOAL_LOG(INFO) << "objects stay in this process: "
                    << store.status().message();
    return nullptr;
  }
  return std::move(*store);
}

// Gives the head the programs workers run, for nodes of other hosts: this
// one's when `this_program`, and the C++ program at `cpp_program` ("" for
// none). Blocking: any thread but the head client's loop.
absl::StatusOr<ProgramCopies::Hashes> SendPrograms(
    rpc::HeadClient& head, bool this_program, const std::string& cpp_program) {
  ProgramCopies::Hashes sent;
  if (this_program) {
    // Through /proc, in case the file was removed or rebuilt; by pid, as
    // objcopy reads it (its own /proc/self is objcopy).
    ASSIGN_OR_RETURN(
        sent.program,
        SendProgram(head, absl::StrCat("/proc/", getpid(), "/exe")));
  }
  if (!cpp_program.empty()) {
    ASSIGN_OR_RETURN(sent.cpp_program, SendProgram(head, cpp_program));
  }
  return sent;
}

// How the submitters lease workers for job `job_id`: the program's binary
// (and the C++ program's, with `cpp_binary_hash`), the head's copies of
// them, the command workers run.
void FillSubmitOptions(const RuntimeOptions& options,
                       const WorkerProgram& program,
                       const ProgramCopies::Hashes& copies,
                       const std::string& cpp_binary_hash,
                       const std::string& job_id, TaskPath::Options* path) {
  TaskSubmitter::Options& submit = path->submit;
  submit.job_id = job_id;
  submit.binary_path = program.binary_path;
  submit.binary_hash = program.binary_hash;
  submit.blob_hash = copies.program;
  submit.worker_command = options.worker_command;
  submit.lease_idle_ms = options.lease_idle_ms;
  if (!cpp_binary_hash.empty()) {
    TaskSubmitter::Options cpp = submit;
    cpp.binary_path = program.cpp_binary_path;
    cpp.binary_hash = cpp_binary_hash;
    cpp.blob_hash = copies.cpp_program;
    cpp.worker_command = WorkerCommand();
    path->cpp_submit = std::move(cpp);
  }
}

// The head as the task path calls it: the runtime's head client, with the
// deadlines the task path's calls get.
class HeadForTasks : public TaskPath::Head {
 public:
  explicit HeadForTasks(std::unique_ptr<rpc::HeadClient>* head) : head_(head) {}

  void ClusterStatus(
      std::function<void(absl::StatusOr<proto::ClusterStatus>)> done) override {
    (*head_)->ClusterStatus(std::move(done), 5000);
  }
  void GetActor(
      const proto::GetActorRequest& request,
      std::function<void(absl::StatusOr<proto::ActorInfo>)> done) override {
    (*head_)->GetActor(request, std::move(done));
  }
  void ReportTaskEvents(
      std::string batch,
      std::function<void(TaskEventReporter::Delivery, absl::Status)> done)
      override {
    (*head_)->ReportTaskEvents(
        std::move(batch),
        [done = std::move(done)](absl::StatusOr<proto::Empty> r) {
          using Delivery = TaskEventReporter::Delivery;
          done(r.ok()                       ? Delivery::kTaken
               : rpc::NeverSent(r.status()) ? Delivery::kNotSent
                                            : Delivery::kRefused,
               r.status());
        },
        1000);
  }

 private:
  std::unique_ptr<rpc::HeadClient>* const head_;  // made by Start()
};

// Where nodes find the program: a worker's is its driver's copy (the
// agent says which, SHOAL_BLOB_HASH; one started before any copy was
// sent has none and sends its own file when a node needs it: the same
// bytes, so the same copy). A driver sends a copy now when nodes of other
// hosts need one, and so do this host's when the program was removed or
// rebuilt since it started. Otherwise none is sent until a node lacks
// the program: a host that joins later
// (TaskSubmitter::Options::program_wanted).
absl::Status ShareProgram(const RuntimeOptions& options,
                          const WorkerProgram& program, ProgramCopies& copies,
                          const proto::ClusterStatus& status) {
  if (!options.worker_id.empty()) {
    if (std::optional<std::string> blob = env::Find(env::Var::kBlobHash)) {
      copies.Adopt(*blob);
    }
    return absl::OkStatus();
  }
  if (NodesElsewhere(status, HostId()) ||
      (options.workers_run_this_program &&
       !RunsTheFileAt(program.binary_path))) {
    return copies.SendOnce();
  }
  return absl::OkStatus();
}

// The runtime of a driver (and of each worker, for the tasks its tasks
// submit): the public calls on user threads, its start and its shutdown,
// wired to the parts that do the work:
//  - objects_ (OwnedObjects): what this process owns; thread-safe, so Get
//    never waits for the loop;
//  - io_ (ObjectIo): the objects' bytes, in this process or the node's
//    store, pulled when need be;
//  - path_ (TaskPath): on the loop, the nodes, the submitters that lease
//    workers and push tasks and actor calls, what becomes of each task,
//    task events;
//  - registration_ (JobRegistration): the job at the head, across restarts;
//  - copies_ (ProgramCopies): the head's copies of the workers' programs.
// Nothing here turns into exceptions: the public API does that.
class CoreRuntimeImpl : public CoreRuntime {
 public:
  CoreRuntimeImpl(RuntimeOptions options, std::unique_ptr<rpc::EventLoop> loop)
      : options_(std::move(options)),
        loop_(std::move(loop)),
        prefix_(RandomHex(6)),
        objects_([this](const std::string& id, bool stored,
                        std::set<std::string> copy_nodes, bool borrowed) {
          OnForget(id, stored, std::move(copy_nodes), borrowed);
        }),
        blocked_([] { return CurrentTaskDepth(); },
                 [this](int shallowest) { TellBlocked(shallowest); }),
        io_(&objects_, threshold_, ObjectHooks()),
        copies_(
            [this] {
              return SendPrograms(*head_, options_.workers_run_this_program,
                                  cpp_binary_hash_.empty()
                                      ? std::string()
                                      : program_.cpp_binary_path);
            },
            [this](const absl::StatusOr<ProgramCopies::Hashes>& copies) {
              TellSubmitters(copies);
            }) {}

  ~CoreRuntimeImpl() override { Shutdown(); }

  absl::Status Start() {
    head_ = std::make_unique<rpc::HeadClient>(
        loop_.get(), options_.head_address, options_.token, "driver");
    ASSIGN_OR_RETURN(
        program_,
        IdentifyWorkerProgram(options_.workers_run_this_program,
                              options_.worker_command, options_.cpp_program,
                              SelfExecutable(), "/proc/self/exe"));
    registration_ = std::make_unique<JobRegistration>(
        JobRegistration::HeadHooks(head_.get(), loop_.get()));
    RETURN_IF_ERROR(Register());
    // A driver of another version than the cluster's is refused, as Ray
    // refuses one (its job, registered just before, ends as it
    // disconnects): the two may not understand each other's messages.
    if (options_.worker_id.empty()) {
      RETURN_IF_ERROR(rpc::CheckClusterVersion(
          *head_, options_.version.empty() ? ShoalVersion() : options_.version,
          "this driver"));
    }
    ASSIGN_OR_RETURN(auto status, ClusterStatus());
    RETURN_IF_ERROR(ShareProgram(options_, program_, copies_, status));
    std::string store_agent;
    RunOnLoop([&] { store_agent = MakeTaskPath(status); });
    // Large objects go through the store of the node agent on this host.
    io_.SetStore(
        StoreOf(store_agent, options_.token, "driver " + job_id_ + " objects"),
        owner_);
    return absl::OkStatus();
  }

  // ---- User threads ----

  absl::StatusOr<std::shared_ptr<RefHandle>> Submit(
      const std::string& function_name, std::vector<TaskArg> args,
      const TaskOptions& options) override {
    if (!options.in_cpp_program) {
      RETURN_IF_ERROR(CheckRunsTasks(function_name));
    } else if (!path_->has_cpp_program()) {
      return OtherError(absl::StrCat(
          "cannot run C++ function ", function_name,
          ": this driver named no C++ program (shoal.init(cpp_program=PATH), "
          "a program built with Shoal that registers it with SHOAL_REMOTE)"));
    }
    ASSIGN_OR_RETURN(std::unique_ptr<TaskEntry> task,
                     NewTaskEntry(function_name, options));
    return SubmitEntry(std::move(task), std::move(args));
  }

  absl::StatusOr<std::shared_ptr<RefHandle>> SubmitActorTask(
      const std::string& actor_id, const std::string& method,
      std::vector<TaskArg> args) override {
    if (actor_id.empty()) {
      return OtherError(
          "this actor handle is empty: make one with shoal::Actor(...)"
          ".Remote() or find one with shoal::GetActor()");
    }
    auto task = std::make_unique<TaskEntry>();
    task->function = method;
    task->actor_id = actor_id;
    task->retries_left = 0;
    return SubmitEntry(std::move(task), std::move(args));
  }

  absl::StatusOr<std::string> CreateActor(
      const std::string& factory, const std::string& class_type,
      std::vector<TaskArg> args, const ActorOptions& options) override {
    RETURN_IF_ERROR(CheckRunsTasks(factory));
    ASSIGN_OR_RETURN(proto::ActorSpec spec,
                     ActorSpecFor(factory, Demangle(class_type), options));
    spec.set_actor_id(RandomHex(8));
    // An actor made inside a task belongs to the job the task runs for (the
    // driver's): it ends when that job does, not when the worker that made
    // it, which outlives the task in the job's worker pool, happens to exit.
    spec.set_job_id(lease_job_id());
    spec.set_binary_path(program_.binary_path);
    spec.set_binary_hash(program_.binary_hash);
    // The head may place the actor (or restart it) on a node of another
    // host: it needs a copy of the program there.
    RETURN_IF_ERROR(SendProgramsForActors());
    spec.set_blob_hash(copies_.Known().program);
    if (!options_.worker_command.empty()) {
      FillWorkerCommand(options_.worker_command, spec.mutable_worker_command());
    }
    spec.set_owner(owner_);
    spec.set_owner_actor_id(ProcessActorId());
    spec.set_depth(SubmitDepth());
    // Arguments in object stores stay alive with this runtime. Refs still
    // pending (or failed): the actor is registered now (its name taken, its
    // handle usable) and its arguments follow once ready, or their error
    // kills it (ActorArguments), as in Ray.
    std::vector<std::shared_ptr<RefHandle>> keep;
    const bool pending = !io_.ArgsReady(args);
    spec.set_args_pending(pending);
    if (!pending) {
      proto::ActorArgs written;
      RETURN_IF_ERROR(io_.WriteActorArgs(args, &written, &keep, stopping_));
      *spec.mutable_args() = std::move(*written.mutable_args());
      *spec.mutable_stored_args() = std::move(*written.mutable_stored_args());
    }
    auto info = head_->CreateActor(spec);
    if (!info.ok()) {
      return OtherError(absl::StrCat(
          "cannot create actor ", spec.class_name(),
          options.name.empty() ? "" : " \"", options.name,
          options.name.empty() ? "" : "\"", ": ", info.status().message()));
    }
    if (pending) actor_args_.SendWhenReady(spec.actor_id(), std::move(args));
    actor_args_.Keep(std::move(keep));
    return spec.actor_id();
  }

  absl::StatusOr<std::shared_ptr<RefHandle>> Put(
      ObjectValue value,
      std::vector<std::shared_ptr<RefHandle>> contained) override {
    return io_.Put(std::move(value), std::move(contained));
  }

  absl::StatusOr<std::shared_ptr<RefHandle>> PutPieces(
      const std::vector<BufferPiece>& pieces, size_t size) override {
    return io_.PutPieces(pieces, size);
  }

  absl::StatusOr<std::shared_ptr<RefHandle>> HandleFor(
      const std::string& id) override {
    return objects_.HandleFor(id);
  }

  absl::StatusOr<std::string> Lend(
      const std::shared_ptr<RefHandle>& ref) override {
    return lending_->Lend(ref);
  }

  absl::StatusOr<std::shared_ptr<RefHandle>> Borrow(
      const std::string& id, const std::string& owner_address) override {
    return lending_->Borrow(id, owner_address);
  }

  absl::StatusOr<ObjectValue> Get(const RefHandle& ref,
                                  int64_t timeout_ms) override {
    return io_.Get(ref, timeout_ms);
  }

  std::vector<size_t> Wait(const std::vector<const RefHandle*>& refs,
                           size_t num_ready, int64_t timeout_ms) override {
    return io_.Wait(refs, num_ready, timeout_ms);
  }

  void Release(const std::string& object_id) override {
    objects_.Release(object_id);
  }

  rpc::HeadClient& head() override { return *head_; }

  void ActorKilled(const std::string& actor_id) override {
    // Posted, so it reaches the submitter before any call made after this.
    loop_->Post([this, actor_id] {
      if (path_ != nullptr) path_->ActorKilled(actor_id);
    });
  }

  absl::StatusOr<bool> Cancel(const std::string& id, bool force,
                              bool recursive) override {
    if (objects_.IsBorrowed(id)) {
      return lending_->CancelBorrowed(id, force, recursive);
    }
    absl::StatusOr<bool> cancelled = false;
    RunOnLoop([&] {
      cancelled = path_ ? path_->Cancel(id, force, recursive) : false;
    });
    return cancelled;
  }

  int CancelChildren(int32_t parent_token, bool force) override {
    int cancelled = 0;
    RunOnLoop([&] {
      cancelled = path_ ? path_->CancelChildren(parent_token, force) : 0;
    });
    // The loop writes what a turn queued as the turn ends: one more turn
    // has them sent.
    if (cancelled > 0) RunOnLoop([] {});
    return cancelled;
  }

  std::string JobId() const override { return lease_job_id(); }

  absl::StatusOr<proto::ClusterStatus> ClusterStatus() override {
    return head_->ClusterStatus();
  }

  void Shutdown() override {
    if (!loop_) return;
    stopping_ = true;
    if (registration_ != nullptr) registration_->Stop();
    window_.Close();
    // Off the loop: the copies' sends need the loop to finish.
    copies_.Shutdown();
    if (path_ != nullptr) ReturnLeasesAndFreeObjects();
    DropParts();
    loop_->Stop();
    path_.reset();
    loop_.reset();
    objects_.Clear();
  }

 private:
  // ---- Wiring the parts ----

  ObjectIo::Hooks ObjectHooks() {
    return {
        .new_id = [this] { return NewId(); },
        .post =
            [this](std::function<void()> fn) { loop_->Post(std::move(fn)); },
        .rebuild =
            [this](const std::string& id, const proto::StoredObject& failed) {
              absl::Status rebuilding;
              RunOnLoop([&] { rebuilding = path_->Reconstruct(id, failed); });
              return rebuilding;
            },
        .pull_into_memory = PullIntoMemoryWith(options_.token),
        .blocked = [this](bool blocked) { SetBlocked(blocked); },
    };
  }

  // ---- Start ----

  // Registers the job, waiting up to 10 s (or SHOAL_HEAD_OUTAGE_WAIT_MS if
  // lower) for a head that restarts: not long for a typo of an address.
  absl::Status Register() {
    proto::RegisterJobRequest job;
    job.set_driver_host(Hostname());
    job.set_driver_pid(getpid());
    job.set_binary_path(program_.binary_path);
    job.set_binary_hash(program_.binary_hash);
    ASSIGN_OR_RETURN(job_id_,
                     registration_->Register(
                         job, std::min<int64_t>(HeadOutageWaitMs(), 10000),
                         options_.head_address));
    // While the head restarts, blocking calls wait for it (bounded).
    head_->set_outage_wait_ms(HeadOutageWaitMs());
    RunOnLoop([this] {
      head_->OnDisconnect([this](const absl::Status& why) { HeadLost(why); });
    });
    owner_ = absl::StrCat("driver of job ", job_id_, " (pid ", getpid(), ")");
    peer_name_ = "driver " + job_id_;
    if (!program_.cpp_binary_path.empty()) {
      ASSIGN_OR_RETURN(cpp_binary_hash_,
                       CppProgramHash(program_.cpp_binary_path));
    }
    return absl::OkStatus();
  }

  // Loop: the parts that lease workers, record task events and lend refs;
  // returns the agent of this host ("" if none).
  std::string MakeTaskPath(const proto::ClusterStatus& status) {
    TaskPath::Options path;
    path.token = options_.token;
    path.peer_name = peer_name_;
    path.owner = owner_;
    path.inline_threshold = threshold_;
    path.events_job_id = lease_job_id();
    path.task_events_interval_ms = TaskEventsIntervalMs();
    path.worker_id = options_.worker_id;
    path.worker_agent_address = options_.worker_agent_address;
    // Nested tasks lease under the driver's job, to reuse its workers.
    FillSubmitOptions(options_, program_, copies_.Known(), cpp_binary_hash_,
                      lease_job_id(), &path);
    path.submit.program_wanted = [this] {
      if (!stopping_) copies_.Wanted();
    };
    if (path.cpp_submit) {
      path.cpp_submit->program_wanted = path.submit.program_wanted;
    }
    path.borrowed = [this](const std::string& id, const auto& refs) {
      lending_->BorrowFromResult(id, refs);
    };
    path.settled = [this](const std::string& id) { lending_->Settled(id); };
    path_ = std::make_unique<TaskPath>(loop_.get(), &head_for_tasks_, &objects_,
                                       &window_, std::move(path));
    std::string agent = path_->Start(status);
    lending_ =
        std::make_unique<Lending>(loop_.get(), &objects_, &io_, path_.get(),
                                  options_.token, peer_name_, agent);
    return agent;
  }

  // ---- Shutdown ----

  // Returns every lease and frees the stored objects this process owns on
  // every node; waits (briefly) for the agents and the head to answer.
  void ReturnLeasesAndFreeObjects() {
    auto stored = objects_.StoredCopies();
    rpc::RunOnLoopAndWait<void>(loop_.get(), [&](std::function<void()> done) {
      path_->Finish(stored, std::move(done));
    });
  }

  // Stops the parts on the loop; what they hold goes outside it: it keeps
  // refs whose release takes the object table's lock.
  void DropParts() {
    TaskLifecycle::Taken tasks;
    std::unordered_map<std::string, std::vector<std::shared_ptr<RefHandle>>>
        contained;
    std::vector<std::shared_ptr<RefHandle>> lent;
    // Before the head client closes: the senders use it.
    std::vector<std::shared_ptr<RefHandle>> actor_args = actor_args_.Stop();
    RunOnLoop([&] {
      if (path_ != nullptr) tasks = path_->Stop();
      if (head_ != nullptr) head_->Close();
      contained = io_.TakeContained();
      if (lending_ != nullptr) lent = lending_->Stop();
    });
    tasks.lineage.clear();
    contained.clear();
    lent.clear();
    tasks.tasks.clear();
    actor_args.clear();
  }

  // ---- Helpers ----

  // The job this process's workers and actors belong to: in a worker, the
  // driver's.
  const std::string& lease_job_id() const {
    return options_.lease_job_id.empty() ? job_id_ : options_.lease_job_id;
  }

  // How deeply what this thread submits now is nested: one more than the
  // task it runs in (in a worker), 0 in a driver.
  int SubmitDepth() const {
    return options_.worker_id.empty() ? 0 : CurrentTaskDepth() + 1;
  }

  std::string NewId() {
    return absl::StrCat(prefix_, "-", next_id_.fetch_add(1));
  }

  void RunOnLoop(const std::function<void()>& fn) { loop_->RunSync(fn); }

  absl::Status CheckRunsTasks(const std::string& what) const {
    return CheckWorkersRun(options_.workers_run_this_program,
                           options_.worker_command, what);
  }

  // Submits a task or actor call whose kind-specific fields are set: its
  // arguments prepared, a place in the window taken, its result object
  // pending here.
  absl::StatusOr<std::shared_ptr<RefHandle>> SubmitEntry(
      std::unique_ptr<TaskEntry> task, std::vector<TaskArg> args) {
    RETURN_IF_ERROR(io_.PrepareArgs(args));
    RETURN_IF_ERROR(window_.Acquire(/*may_block=*/!loop_->InLoop()));
    task->in_window = true;
    task->id = NewId();
    task->args.args = std::move(args);
    task->depth = SubmitDepth();
    task->parent_id = CurrentTaskId();
    objects_.AddPending(task->id);
    auto handle = objects_.NewHandle(task->id);
    TaskEntry* raw = task.release();
    loop_->Post(
        [this, raw] { path_->Submit(std::unique_ptr<TaskEntry>(raw)); });
    return handle;
  }

  void SetBlocked(bool blocked) override {
    if (options_.worker_id.empty() || options_.worker_agent_address.empty()) {
      return;
    }
    blocked_.Blocked(blocked);
  }

  void TellBlocked(int shallowest) {
    loop_->Post([this, shallowest] {
      if (path_ != nullptr) path_->TellBlocked(shallowest);
    });
  }

  // The last reference to an object is gone (any thread).
  void OnForget(const std::string& id, bool stored,
                std::set<std::string> copy_nodes, bool borrowed) {
    if (loop_ == nullptr) return;
    // The refs it holds go on the loop: their release takes the table's
    // lock, and the refs inside values are the loop's.
    loop_->Post([this, id, stored, nodes = std::move(copy_nodes), borrowed] {
      io_.Forget(id);
      // A borrowed object's owner frees it (and the copies pulled here).
      if (borrowed) {
        if (lending_ != nullptr) lending_->Forgotten(id, nodes);
        return;
      }
      if (!stored) return;
      // Freed on every node holding a copy, with its lineage.
      if (path_ != nullptr) path_->ForgetStored(id, nodes);
    });
  }

  // ---- Program copies (program_copies.h) ----

  // Hands the submitters the copies (or why none were made), on the loop.
  void TellSubmitters(const absl::StatusOr<ProgramCopies::Hashes>& copies) {
    if (loop_ == nullptr) return;
    loop_->Post([this, copies] {
      if (path_ != nullptr) path_->SetProgramCopies(copies);
    });
  }

  // An actor's spec names the copy of its program: one is sent first when
  // the cluster has a node of another host, where the head may place it.
  // User threads.
  absl::Status SendProgramsForActors() {
    if (!options_.workers_run_this_program || copies_.sent()) {
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(proto::ClusterStatus status, ClusterStatus());
    if (!NodesElsewhere(status, HostId())) return absl::OkStatus();
    return copies_.SendOnce();
  }

  // ---- Loop thread ----

  // The connection to the head is gone: once a head answers again (the
  // same, restarted), this process says which job it is, so that what the
  // job owns is kept. Tasks go on meanwhile: they need only the agents.
  void HeadLost(const absl::Status& why) {
    if (stopping_ || head_ == nullptr) return;
    SHOAL_LOG(WARNING) << "lost the head (" << why << "); reconnecting as "
                       << job_id_;
    registration_->Reattach([this] {
      // A head that took over from another folder (a shared storage such
      // as Redis) may not hold this job's binaries, which workers started
      // from now on are made from: they go to it again (a head that has
      // them says so at once). A worker's program is its driver's: the
      // driver uploads it.
      if (options_.worker_id.empty() && !stopping_) copies_.SendAgain();
    });
  }

  RuntimeOptions options_;
  std::unique_ptr<rpc::EventLoop> loop_;
  const std::string prefix_;
  std::atomic<uint64_t> next_id_{1};
  std::atomic<bool> stopping_{false};
  const uint64_t threshold_ = InlineThresholdBytes();
  // Set by Start(), read-only after.
  std::string job_id_;
  std::string owner_;  // names this process as objects' owner
  std::string peer_name_;
  WorkerProgram program_;
  std::string cpp_binary_hash_;  // RuntimeOptions::cpp_program's
  // Made by Start(), closed on the loop by Shutdown(); blocking calls from
  // any thread but the loop, asynchronous ones from the loop.
  std::unique_ptr<rpc::HeadClient> head_;

  // Any thread.
  SubmitWindow window_{MaxPendingTasksFromEnv()};
  OwnedObjects objects_;
  BlockedWaits blocked_;
  ObjectIo io_;
  // Constructor arguments of the actors this process made.
  ActorArguments actor_args_{&io_, [this](const proto::ActorArgs& args) {
                               return head_->ActorArgs(args);
                             }};

  HeadForTasks head_for_tasks_{&head_};
  // Made by Start() on the loop; used there, and by user threads for
  // has_cpp_program().
  std::unique_ptr<TaskPath> path_;
  // Made by Start() on the loop; used there.
  std::unique_ptr<Lending> lending_;

  // Thread-safe.
  ProgramCopies copies_;
  std::unique_ptr<JobRegistration> registration_;  // made by Start()
};

}  // namespace

std::string Demangle(const std::string& name) {
  int status = 0;
  char* out = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  if (status != 0 || out == nullptr) return name;
  std::string demangled(out);
  free(out);
  return demangled;
}

absl::StatusOr<std::unique_ptr<CoreRuntime>> CoreRuntime::Connect(
    const RuntimeOptions& options) {
  ASSIGN_OR_RETURN(auto loop, rpc::EventLoop::Create("shoal-driver"));
  auto runtime = std::make_unique<CoreRuntimeImpl>(options, std::move(loop));
  RETURN_IF_ERROR(runtime->Start());
  return runtime;
}

}  // namespace shoal::internal
