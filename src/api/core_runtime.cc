#include "api/core_runtime.h"

#include <cxxabi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "agent/object_transfer.h"
#include "api/actor_submitter.h"
#include "api/dependency_resolver.h"
#include "api/node_view.h"
#include "api/object_client.h"
#include "api/object_recovery.h"
#include "api/owned_objects.h"
#include "api/program_copy.h"
#include "api/submit_window.h"
#include "api/task_context.h"
#include "api/task_entry.h"
#include "api/task_error.h"
#include "api/task_events.h"
#include "api/task_submitter.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/util.h"
#include "head_client/head_client.h"
#include "rpc/event_loop.h"
#include "rpc/rpc.h"
#include "scheduling/resource_set.h"
#include "shoal/shoal.pb.h"

namespace shoal::internal {
namespace {

// The resources a task or actor asks for, as agents name them: inside a
// placement group's bundle, that bundle's own resources.
absl::StatusOr<ResourceSet> ShapeFor(std::map<std::string, double> resources,
                                     const std::string& placement_group_id,
                                     int bundle_index) {
  if (!placement_group_id.empty()) {
    std::map<std::string, double> in_bundle;
    for (const auto& [name, amount] : resources) {
      if (amount <= 0) continue;
      in_bundle[absl::StrCat(name, "_group_", bundle_index, "_",
                             placement_group_id)] = amount;
    }
    resources = std::move(in_bundle);
  }
  return ResourceSet::FromDoubles(resources);
}

absl::Status OtherError(absl::string_view message) {
  return TaskError(ErrorKind::kOther, message);
}

// How often a driver tries to reach a restarting head again.
constexpr int64_t kReattachRetryMs = 200;
// Task events kept for a head that is away, at most.
constexpr size_t kMaxUnsentEventBytes = 16 << 20;

// How long blocking calls wait for a head that cannot be reached (it
// restarts): SHOAL_HEAD_OUTAGE_WAIT_MS, 30 s by default.
int64_t HeadOutageWaitMs() {
  const char* v = getenv("SHOAL_HEAD_OUTAGE_WAIT_MS");
  int64_t ms = 30000;
  if (v != nullptr && *v != '\0' && !absl::SimpleAtoi(v, &ms)) ms = 30000;
  return std::max<int64_t>(0, ms);
}

// The runtime of a driver (and of each worker, for the tasks its tasks
// submit): the public calls on user threads, and the parts that do the
// work on one event loop:
//  - objects_ (OwnedObjects): what this process owns; thread-safe, so Get
//    never waits for the loop;
//  - deps_ (DependencyResolver): tasks waiting for their ref arguments;
//  - submitter_ (TaskSubmitter): shape queues, leases, pushes to workers;
//  - actors_ (ActorSubmitter): per-actor ordered calls and restarts;
//  - recovery_ (ObjectRecovery): lineage, to rebuild lost objects;
//  - nodes_ (NodeView): the cluster's nodes and channels to their agents.
// This class decides what each outcome means for a task (done, retried,
// failed) and turns nothing into exceptions: the public API does that.
class CoreRuntimeImpl : public CoreRuntime,
                        public ActorSubmitter::Delegate,
                        public TaskSubmitter::Delegate {
 public:
  CoreRuntimeImpl(RuntimeOptions options, std::unique_ptr<rpc::EventLoop> loop)
      : options_(std::move(options)),
        loop_(std::move(loop)),
        prefix_(RandomHex(6)),
        objects_([this](const std::string& id, bool stored,
                        std::set<std::string> copy_nodes) {
          OnForget(id, stored, std::move(copy_nodes));
        }),
        deps_(&objects_),
        actors_(loop_.get(), this) {}

  ~CoreRuntimeImpl() override { Shutdown(); }

  // A head being started again (after a crash, on the same port) refuses
  // connections for a moment: a driver that starts then waits for it, and
  // says so. Up to 10 s (SHOAL_HEAD_OUTAGE_WAIT_MS, if lower): an address
  // where no head will ever listen (a typo) is not waited on for long.
  // Other errors (a bad token, TLS) fail at once.
  absl::StatusOr<proto::RegisterJobReply> RegisterJobWaitingForTheHead(
      const proto::RegisterJobRequest& job) {
    const int64_t wait_ms = std::min<int64_t>(HeadOutageWaitMs(), 10000);
    const int64_t give_up_us = MonotonicUs() + wait_ms * 1000;
    bool told = false;
    while (true) {
      absl::StatusOr<proto::RegisterJobReply> reply = head_->RegisterJob(job);
      if (reply.ok() || !absl::IsUnavailable(reply.status()) ||
          !absl::StrContains(reply.status().message(), "Connection refused") ||
          MonotonicUs() >= give_up_us) {
        return reply;
      }
      if (!told) {
        told = true;
        SHOAL_LOG(WARNING) << "the head at " << options_.head_address
                           << " refuses connections (" << reply.status()
                           << "); waiting up to " << wait_ms / 1000
                           << " s for it to come back "
                              "(SHOAL_HEAD_OUTAGE_WAIT_MS)";
      }
      usleep(200000);
    }
  }

  absl::Status Start() {
    head_ = std::make_unique<rpc::HeadClient>(
        loop_.get(), options_.head_address, options_.token, "driver");
    if (options_.workers_run_this_program) {
      binary_path_ = SelfExecutable();
      // Read through /proc: the file may have been replaced or removed.
      ASSIGN_OR_RETURN(binary_hash_, Sha256File("/proc/self/exe"));
    } else if (!options_.worker_command.empty()) {
      // Names the command, so that idle workers are reused only by leases
      // of the same command.
      std::string text;
      for (const auto& arg : options_.worker_command.argv) {
        absl::StrAppend(&text, arg.size(), ":", arg);
      }
      for (const auto& [k, v] : options_.worker_command.env) {
        absl::StrAppend(&text, k.size(), ":", k, v.size(), ":", v);
      }
      binary_hash_ = "command-" + Sha256Hex(text);
    }
    proto::RegisterJobRequest job;
    job.set_driver_host(Hostname());
    job.set_driver_pid(getpid());
    job.set_binary_path(binary_path_);
    job.set_binary_hash(binary_hash_);
    ASSIGN_OR_RETURN(auto reply, RegisterJobWaitingForTheHead(job));
    job_id_ = reply.job_id();
    register_request_ = job;
    // While the head restarts, blocking calls wait for it (bounded).
    head_->set_outage_wait_ms(HeadOutageWaitMs());
    RunOnLoop([this] {
      head_->OnDisconnect([this](const absl::Status& why) { HeadLost(why); });
    });
    owner_ = absl::StrCat("driver of job ", job_id_, " (pid ", getpid(), ")");
    peer_name_ = "driver " + job_id_;
    if (!options_.cpp_program.empty()) {
      cpp_binary_path_ =
          std::filesystem::absolute(options_.cpp_program).string();
      auto hash = Sha256File(cpp_binary_path_);
      if (!hash.ok()) {
        return OtherError(
            absl::StrCat("the C++ program ", cpp_binary_path_,
                         " cannot be read: ", hash.status().message()));
      }
      cpp_binary_hash_ = *hash;
    }
    ASSIGN_OR_RETURN(auto status, ClusterStatus());
    if (!options_.worker_id.empty()) {
      // A worker runs its driver's program: the agent says which copy the
      // head holds, for the tasks this worker submits. One started before
      // any copy was sent has none: it sends its own file when a node
      // needs it (the same bytes, so the same copy).
      const char* blob = getenv("SHOAL_BLOB_HASH");
      if (blob != nullptr && blob[0] != '\0') {
        std::lock_guard<std::mutex> lock(copies_mu_);
        blob_hash_ = blob;
        copies_sent_ = true;
      }
    } else if (NodesElsewhere(status, HostId()) ||
               (options_.workers_run_this_program &&
                !RunsTheFileAt(binary_path_))) {
      // Nodes of other hosts need a copy, and so do this host's when the
      // program was removed or rebuilt since it started. Otherwise none is
      // sent until a node lacks the program: a host that joins later
      // (TaskSubmitter::Options::program_wanted).
      RETURN_IF_ERROR(SendProgramsOnce());
    }
    ProgramCopies copies = KnownCopies();
    std::string store_agent;
    RunOnLoop([&] {
      nodes_ = std::make_unique<NodeView>(
          loop_.get(),
          NodeView::Options{.token = options_.token, .peer_name = peer_name_});
      TaskSubmitter::Options submit;
      // Nested tasks lease under the driver's job, to reuse its workers.
      submit.job_id = lease_job_id();
      submit.binary_path = binary_path_;
      submit.binary_hash = binary_hash_;
      submit.blob_hash = copies.program;
      submit.worker_command = options_.worker_command;
      submit.lease_idle_ms = options_.lease_idle_ms;
      submit.program_wanted = [this] { ProgramWanted(); };
      if (!cpp_binary_hash_.empty()) {
        TaskSubmitter::Options cpp = submit;
        cpp.binary_path = cpp_binary_path_;
        cpp.binary_hash = cpp_binary_hash_;
        cpp.blob_hash = copies.cpp_program;
        cpp.worker_command = WorkerCommand();
        cpp_submitter_ = std::make_unique<TaskSubmitter>(
            loop_.get(), nodes_.get(), this, std::move(cpp));
      }
      submitter_ = std::make_unique<TaskSubmitter>(loop_.get(), nodes_.get(),
                                                   this, std::move(submit));
      events_ = std::make_unique<TaskEventBuffer>(lease_job_id(),
                                                  TaskEventsIntervalMs() > 0);
      nodes_->Update(status);
      store_agent = nodes_->LocalAgent();
      ScheduleMaintenance();
    });
    ConnectStore(store_agent);
    return absl::OkStatus();
  }

  // Large objects go through the store of the node agent on this host.
  void ConnectStore(const std::string& agent) {
    if (agent.empty()) {
      store_error_ = "no node agent runs on this host";
      return;
    }
    auto client = ObjectClient::Connect(agent, options_.token,
                                        "driver " + job_id_ + " objects");
    if (!client.ok()) {
      store_error_ = std::string(client.status().message());
      SHOAL_LOG(INFO) << "objects stay in this process: " << store_error_;
      return;
    }
    store_ = std::move(*client);
    objects_.SetLocalNode(store_->node_id());
  }

  // ---- User threads ----

  absl::Status CheckRunsTasks(const std::string& what) const {
    if (options_.workers_run_this_program || !options_.worker_command.empty()) {
      return absl::OkStatus();
    }
    return OtherError(absl::StrCat(
        "cannot run ", what,
        ": this driver's program cannot be its workers "
        "(a Python driver runs C++ functions only from a C++ program)"));
  }

  absl::StatusOr<std::shared_ptr<RefHandle>> Submit(
      const std::string& function_name, std::vector<TaskArg> args,
      const TaskOptions& options) override {
    if (!options.in_cpp_program) {
      RETURN_IF_ERROR(CheckRunsTasks(function_name));
    } else if (cpp_submitter_ == nullptr) {
      return OtherError(absl::StrCat(
          "cannot run C++ function ", function_name,
          ": this driver named no C++ program (shoal.init(cpp_program=PATH), "
          "a program built with Shoal that registers it with SHOAL_REMOTE)"));
    }
    std::map<std::string, double> resources = options.resources;
    if (resources.count("CPU") == 0) resources["CPU"] = 1;
    auto shape =
        ShapeFor(resources, options.placement_group_id, options.bundle_index);
    if (!shape.ok()) {
      return OtherError(absl::StrCat("bad resources for task ", function_name,
                                     ": ", shape.status().message()));
    }
    if (options.max_retries < 0) {
      return OtherError("max_retries must be 0 or more");
    }
    RETURN_IF_ERROR(PrepareArgs(args));
    RETURN_IF_ERROR(window_.Acquire(/*may_block=*/!loop_->InLoop()));
    auto task = std::make_unique<TaskEntry>();
    task->in_window = true;
    task->id = NewId();
    task->function = function_name;
    task->args.args = std::move(args);
    task->shape = *shape;
    task->shape_key = shape->DebugString();
    task->retries_left = options.max_retries;
    task->depth = SubmitDepth();
    task->in_cpp_program = options.in_cpp_program;
    objects_.AddPending(task->id);
    auto handle = objects_.NewHandle(task->id);
    TaskEntry* raw = task.release();
    loop_->Post([this, raw] { OnSubmit(std::unique_ptr<TaskEntry>(raw)); });
    return handle;
  }

  absl::StatusOr<std::shared_ptr<RefHandle>> SubmitActorTask(
      const std::string& actor_id, const std::string& method,
      std::vector<TaskArg> args) override {
    if (actor_id.empty()) {
      return OtherError(
          "this actor handle is empty: make one with shoal::Actor(...)"
          ".Remote() or find one with shoal::GetActor()");
    }
    RETURN_IF_ERROR(PrepareArgs(args));
    RETURN_IF_ERROR(window_.Acquire(/*may_block=*/!loop_->InLoop()));
    auto task = std::make_unique<TaskEntry>();
    task->in_window = true;
    task->id = NewId();
    task->function = method;
    task->args.args = std::move(args);
    task->actor_id = actor_id;
    task->retries_left = 0;
    task->depth = SubmitDepth();
    objects_.AddPending(task->id);
    auto handle = objects_.NewHandle(task->id);
    TaskEntry* raw = task.release();
    loop_->Post([this, raw] {
      actors_.Add(raw->actor_id, raw->id);
      OnSubmit(std::unique_ptr<TaskEntry>(raw));
    });
    return handle;
  }

  absl::StatusOr<std::string> CreateActor(
      const std::string& factory, const std::string& class_type,
      std::vector<TaskArg> args, const ActorOptions& options) override {
    RETURN_IF_ERROR(CheckRunsTasks(factory));
    if (options.max_concurrency < 1) {
      return OtherError(
          "SetMaxConcurrency: an actor runs at least 1 call at a time");
    }
    if (options.max_restarts < -1 || options.max_task_retries < -1) {
      return OtherError(
          "SetMaxRestarts and SetMaxTaskRetries take 0 or more, or -1 for "
          "no limit");
    }
    if (options.detached && options.name.empty()) {
      return OtherError(
          "a detached actor outlives its driver: give it a name (SetName) "
          "so that shoal::GetActor() can find it again");
    }
    if (!options.placement_group_id.empty() && options.resources.empty()) {
      return OtherError(
          "an actor in a placement group takes its resources from its "
          "bundle: say which with SetResources (e.g. {{\"CPU\", 1}})");
    }
    auto shape = ShapeFor(options.resources, options.placement_group_id,
                          options.bundle_index);
    if (!shape.ok()) {
      return OtherError(absl::StrCat("bad resources for actor ",
                                     Demangle(class_type), ": ",
                                     shape.status().message()));
    }
    proto::ActorSpec spec;
    spec.set_actor_id(RandomHex(8));
    spec.set_name(options.name);
    spec.set_factory(factory);
    spec.set_class_name(Demangle(class_type));
    shape->ToProto(spec.mutable_shape());
    spec.set_max_restarts(options.max_restarts);
    spec.set_max_task_retries(options.max_task_retries);
    spec.set_max_concurrency(options.max_concurrency);
    spec.set_detached(options.detached);
    // An actor made inside a task belongs to the job the task runs for (the
    // driver's): it ends when that job does, not when the worker that made
    // it, which outlives the task in the job's worker pool, happens to exit.
    spec.set_job_id(lease_job_id());
    spec.set_binary_path(binary_path_);
    spec.set_binary_hash(binary_hash_);
    // The head may place the actor (or restart it) on a node of another
    // host: it needs a copy of the program there.
    RETURN_IF_ERROR(SendProgramsForActors());
    spec.set_blob_hash(KnownCopies().program);
    if (!options_.worker_command.empty()) {
      FillWorkerCommand(options_.worker_command, spec.mutable_worker_command());
    }
    spec.set_owner(owner_);
    spec.set_placement_group_id(options.placement_group_id);
    spec.set_bundle_index(options.bundle_index);
    spec.set_depth(SubmitDepth());
    // The constructor's arguments travel in the spec, so that a restart
    // (even after this process is gone) makes the actor the same way;
    // arguments in object stores stay alive with this runtime.
    RETURN_IF_ERROR(PrepareArgs(args));
    std::vector<std::shared_ptr<RefHandle>> keep;
    for (size_t i = 0; i < args.size(); ++i) {
      TaskArg& arg = args[i];
      if (arg.ref == nullptr) {
        spec.add_args(std::string(arg.value.data));
        for (auto& c : arg.contained) keep.push_back(std::move(c));
        continue;
      }
      ASSIGN_OR_RETURN(OwnedObjects::Ready ready,
                       objects_.WaitReady(arg.ref->id(), -1, blocked_fn_));
      if (ready.stored) {
        spec.add_args("");
        (*spec.mutable_stored_args())[static_cast<int>(i)] =
            ready.stored_object;
      } else {
        spec.add_args(*ready.value);
      }
      keep.push_back(arg.ref);
    }
    auto info = head_->CreateActor(spec);
    if (!info.ok()) {
      return OtherError(absl::StrCat(
          "cannot create actor ", spec.class_name(),
          options.name.empty() ? "" : " \"", options.name,
          options.name.empty() ? "" : "\"", ": ", info.status().message()));
    }
    if (!keep.empty()) {
      std::lock_guard<std::mutex> lock(actor_args_mu_);
      for (auto& k : keep) actor_arg_refs_.push_back(std::move(k));
    }
    return spec.actor_id();
  }

  absl::StatusOr<std::shared_ptr<RefHandle>> Put(
      ObjectValue value,
      std::vector<std::shared_ptr<RefHandle>> contained) override {
    std::string id = NewId();
    if (store_ != nullptr && value.data.size() >= threshold_) {
      RETURN_IF_ERROR(
          Store(id, value.data.size(), value.raw, [&](uint8_t* dest) {
            memcpy(dest, value.data.data(), value.data.size());
          }));
    } else {
      objects_.AddValue(id,
                        std::make_shared<const std::string>(ToMsgpack(value)));
    }
    if (!contained.empty()) {
      // Kept with the object (on the loop, where it is dropped too).
      loop_->Post([this, id, contained = std::move(contained)]() mutable {
        contained_[id] = std::move(contained);
      });
    }
    return objects_.NewHandle(id);
  }

  absl::StatusOr<std::shared_ptr<RefHandle>> PutPieces(
      const std::vector<BufferPiece>& pieces, size_t size) override {
    for (const BufferPiece& p : pieces) {
      if (p.offset > size || p.bytes.size() > size - p.offset) {
        return OtherError(absl::StrCat(
            "a piece of ", p.bytes.size(), " bytes at offset ", p.offset,
            " does not fit an object of ", size, " bytes"));
      }
    }
    // The gaps between pieces are zeroed, not the whole object: one pass
    // over the memory.
    std::vector<const BufferPiece*> in_order;
    for (const BufferPiece& p : pieces) in_order.push_back(&p);
    std::sort(in_order.begin(), in_order.end(),
              [](const BufferPiece* a, const BufferPiece* b) {
                return a->offset < b->offset;
              });
    auto fill = [&](uint8_t* dest) {
      size_t covered = 0;
      for (const BufferPiece* p : in_order) {
        if (p->offset > covered) memset(dest + covered, 0, p->offset - covered);
        memcpy(dest + p->offset, p->bytes.data(), p->bytes.size());
        covered = std::max(covered, p->offset + p->bytes.size());
      }
      if (covered < size) memset(dest + covered, 0, size - covered);
    };
    if (store_ == nullptr || size < threshold_) {
      auto bytes = std::make_shared<std::string>(size, '\0');
      fill(reinterpret_cast<uint8_t*>(bytes->data()));
      return Put(ObjectValue{*bytes, /*raw=*/true, bytes}, {});
    }
    std::string id = NewId();
    RETURN_IF_ERROR(Store(id, size, /*raw=*/true, fill));
    return objects_.NewHandle(id);
  }

  // Writes object `id` of `size` bytes into this node's store with `fill`
  // and records it as owned here.
  absl::Status Store(const std::string& id, size_t size, bool raw,
                     const std::function<void(uint8_t*)>& fill) {
    const char format = raw ? kFormatRaw : kFormatMsgpack;
    absl::Status put =
        store_->Put(id, owner_, size, std::string_view(&format, 1), fill,
                    /*owned_here=*/true);
    if (!put.ok()) {
      return OtherError(
          absl::StrCat("Put of ", size, " bytes failed: ", put.message()));
    }
    proto::StoredObject so;
    so.set_object_id(id);
    so.set_data_size(size);
    so.set_metadata_size(1);
    so.set_owner(owner_);
    proto::ObjectSource* source = so.add_sources();
    source->set_node_id(store_->node_id());
    source->set_address(store_->transfer_address());
    objects_.AddStored(id, std::move(so));
    return absl::OkStatus();
  }

  absl::StatusOr<std::shared_ptr<RefHandle>> HandleFor(
      const std::string& id) override {
    return objects_.HandleFor(id);
  }

  absl::StatusOr<ObjectValue> Get(const RefHandle& ref,
                                  int64_t timeout_ms) override {
    int64_t deadline_us =
        timeout_ms < 0 ? -1 : MonotonicUs() + timeout_ms * 1000;
    while (true) {
      int64_t left_ms =
          deadline_us < 0
              ? -1
              : std::max<int64_t>(0, (deadline_us - MonotonicUs()) / 1000);
      ASSIGN_OR_RETURN(OwnedObjects::Ready ready,
                       objects_.WaitReady(ref.id(), left_ms, blocked_fn_));
      if (!ready.stored) return ObjectValue{*ready.value, false, ready.value};
      absl::StatusOr<ObjectValue> value =
          FetchStored(ready.stored_object, ready.local_copy);
      if (value.ok()) return value;
      if (value.status().code() != absl::StatusCode::kDataLoss) {
        return OtherError(absl::StrCat("Get of object ", ref.id(),
                                       " failed: ", value.status().message()));
      }
      // Every copy is gone: rebuild it from its task, or say it is lost.
      absl::Status rebuilding;
      RunOnLoop(
          [&] { rebuilding = Reconstruct(ref.id(), ready.stored_object); });
      if (!rebuilding.ok()) {
        return TaskError(
            ErrorKind::kObjectLost,
            absl::StrCat(value.status().message(), "; ", rebuilding.message()));
      }
    }
  }

  std::vector<size_t> Wait(const std::vector<const RefHandle*>& refs,
                           size_t num_ready, int64_t timeout_ms) override {
    std::vector<std::string> ids;
    ids.reserve(refs.size());
    for (const RefHandle* ref : refs) ids.push_back(ref->id());
    return objects_.WaitAny(ids, num_ready, timeout_ms, blocked_fn_);
  }

  void Release(const std::string& object_id) override {
    objects_.Release(object_id);
  }

  rpc::HeadClient& head() override { return *head_; }

  std::string JobId() const override { return lease_job_id(); }

  absl::StatusOr<proto::ClusterStatus> ClusterStatus() override {
    return head_->ClusterStatus();
  }

  void Shutdown() override {
    if (!loop_) return;
    stopping_ = true;
    window_.Close();
    {
      // Off the loop: the uploader's calls need the loop to finish.
      std::thread uploader;
      {
        std::lock_guard<std::mutex> lock(uploader_mu_);
        uploader = std::move(uploader_);
      }
      if (uploader.joinable()) uploader.join();
      std::thread copier;
      {
        std::lock_guard<std::mutex> lock(copier_mu_);
        copier = std::move(copier_);
      }
      if (copier.joinable()) copier.join();
    }
    // Stored objects this process owns go with it, on every node.
    auto stored = objects_.StoredCopies();
    if (submitter_ != nullptr) {
      rpc::RunOnLoopAndWait<void>(loop_.get(), [&](std::function<void()> done) {
        // Return every lease; wait (briefly) for the agents to answer.
        auto remaining = std::make_shared<int>(1);
        auto finish = [done, remaining] {
          if (--*remaining == 0) done();
        };
        for (const auto& [id, nodes] : stored) {
          proto::ObjectRequest req;
          req.set_object_id(id);
          for (const std::string& node : nodes) {
            std::string agent = nodes_->AgentOf(node);
            if (agent.empty()) continue;
            ++*remaining;
            rpc::CallProto<proto::Empty>(
                nodes_->Channel(agent), proto::OBJECT_DELETE, req,
                [finish](absl::StatusOr<proto::Empty>) { finish(); }, 1000);
          }
        }
        ForEachSubmitter([&](TaskSubmitter& submitter) {
          ++*remaining;
          submitter.ReturnAll(finish);
        });
        // What the last tasks did reaches the head.
        ++*remaining;
        FlushTaskEvents(finish);
        finish();
      });
    }
    // Outside the loop: what the parts hold keeps refs whose release takes
    // the object table's lock.
    ObjectRecovery::Lineage lineage;
    std::unordered_map<std::string, std::vector<std::shared_ptr<RefHandle>>>
        contained;
    std::unordered_map<std::string, std::unique_ptr<TaskEntry>> tasks;
    RunOnLoop([&] {
      // The entries it lists go below.
      if (events_ != nullptr) events_->Clear();
      actors_.Shutdown();
      ForEachSubmitter([](TaskSubmitter& submitter) { submitter.Clear(); });
      if (nodes_ != nullptr) nodes_->CloseChannels();
      if (head_ != nullptr) head_->Close();
      lineage = recovery_.TakeAll();
      contained = std::move(contained_);
      tasks = std::move(tasks_);
    });
    lineage.clear();
    contained.clear();
    tasks.clear();
    std::vector<std::shared_ptr<RefHandle>> actor_args;
    {
      std::lock_guard<std::mutex> lock(actor_args_mu_);
      actor_args.swap(actor_arg_refs_);
    }
    actor_args.clear();
    loop_->Stop();
    submitter_.reset();
    cpp_submitter_.reset();
    nodes_.reset();
    loop_.reset();
    objects_.Clear();
  }

 private:
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

  // Large arguments passed by value go through the store like Put; the
  // task holds their refs until it is done. Small ones are copied now, so
  // nothing the caller owns is read after Remote() returns.
  absl::Status PrepareArgs(std::vector<TaskArg>& args) {
    for (TaskArg& arg : args) {
      if (arg.ref != nullptr) continue;
      if (store_ != nullptr && arg.value.data.size() >= threshold_) {
        ASSIGN_OR_RETURN(arg.ref,
                         Put(std::move(arg.value), std::move(arg.contained)));
        arg.value = {};
      } else if (arg.value.raw || arg.value.keepalive == nullptr) {
        arg.value = ObjectValue::Owned(ToMsgpack(arg.value));
      }
    }
    return absl::OkStatus();
  }

  // Maps a stored object from this node's store, pulling it here first
  // when the node has no copy.
  absl::StatusOr<ObjectValue> FetchStored(const proto::StoredObject& where,
                                          bool have_copy) {
    if (store_ == nullptr) return FetchIntoHeap(where);
    absl::StatusOr<std::shared_ptr<StoredView>> view =
        absl::NotFoundError("no copy here");
    if (have_copy) view = store_->Get(where.object_id());
    if (!view.ok() && view.status().code() == absl::StatusCode::kNotFound) {
      view = store_->Pull(where, 0);
      if (view.ok()) {
        objects_.AddCopy(where.object_id(), store_->node_id(),
                         store_->transfer_address());
      }
    }
    if (!view.ok()) return view.status();
    std::string_view metadata = (*view)->metadata();
    return ObjectValue{(*view)->data(),
                       !metadata.empty() && metadata[0] == kFormatRaw, *view};
  }

  // Without a store on this host (a driver on a machine that is no node):
  // the object's bytes are pulled straight into this process's memory.
  absl::StatusOr<ObjectValue> FetchIntoHeap(const proto::StoredObject& where) {
    std::vector<agent::TransferSource> sources;
    for (const auto& s : where.sources()) {
      sources.push_back({s.node_id(), s.address()});
    }
    uint64_t size = where.data_size() + where.metadata_size();
    auto bytes = std::make_shared<std::string>(size, '\0');
    absl::Status pulled = agent::PullObject(
        where.object_id(), reinterpret_cast<uint8_t*>(bytes->data()), size,
        sources, options_.token);
    if (!pulled.ok()) return pulled;
    std::string_view all(*bytes);
    std::string_view metadata = all.substr(where.data_size());
    return ObjectValue{all.substr(0, where.data_size()),
                       !metadata.empty() && metadata[0] == kFormatRaw, bytes};
  }

  // While a thread of a worker waits in Get or Wait, its node may give the
  // worker's CPU to deeper requests (the nested tasks the wait is for). The
  // node hears the depth of the shallowest waiting task whenever it changes,
  // and hears when no thread waits any more. Called on the waiting thread
  // before and after its wait.
  void SetBlocked(bool blocked) {
    if (options_.worker_id.empty() || options_.worker_agent_address.empty()) {
      return;
    }
    // The depth the wait began at (a thread a task started reads the depth
    // of the latest task, which may change while it waits).
    thread_local int waiting_at = 0;
    if (blocked) waiting_at = CurrentTaskDepth();
    int depth = waiting_at;
    std::lock_guard<std::mutex> lock(blocked_mu_);
    int before = blocked_depths_.empty() ? -1 : *blocked_depths_.begin();
    if (blocked) {
      blocked_depths_.insert(depth);
    } else if (auto it = blocked_depths_.find(depth);
               it != blocked_depths_.end()) {
      blocked_depths_.erase(it);
    }
    int after = blocked_depths_.empty() ? -1 : *blocked_depths_.begin();
    if (after == before) return;
    // Posted under the lock so that the node hears the changes in order.
    loop_->Post([this, after] {
      proto::WorkerBlockedRequest req;
      req.set_worker_id(options_.worker_id);
      if (after >= 0) req.set_depth(after);
      rpc::CallProto<proto::Empty>(
          nodes_->Channel(options_.worker_agent_address),
          after >= 0 ? proto::WORKER_BLOCKED : proto::WORKER_UNBLOCKED, req,
          [](absl::StatusOr<proto::Empty>) {}, 5000);
    });
  }

  // ---- Program copies (program_copy.h) ----

  // The hashes of the head's copies of the programs workers run: this
  // process's own, and RuntimeOptions::cpp_program's. Empty: none (not
  // sent, or no such program).
  struct ProgramCopies {
    std::string program;
    std::string cpp_program;
  };

  ProgramCopies KnownCopies() {
    std::lock_guard<std::mutex> lock(copies_mu_);
    return {blob_hash_, cpp_blob_hash_};
  }

  // Gives the head the programs workers run, for nodes of other hosts; the
  // hashes of its copies go in every lease request and actor from then on.
  // Blocking: any thread but the loop.
  absl::StatusOr<ProgramCopies> SendPrograms() {
    ProgramCopies sent;
    if (options_.workers_run_this_program) {
      // Through /proc, in case the file was removed or rebuilt; by pid, as
      // objcopy reads it (its own /proc/self is objcopy).
      ASSIGN_OR_RETURN(
          sent.program,
          SendProgram(*head_, absl::StrCat("/proc/", getpid(), "/exe")));
    }
    if (!cpp_binary_hash_.empty()) {
      ASSIGN_OR_RETURN(sent.cpp_program, SendProgram(*head_, cpp_binary_path_));
    }
    return sent;
  }

  // SendPrograms, then every part that names the copies learns them (or
  // why there are none). Blocking: any thread but the loop.
  absl::Status SendAndRecordCopies() {
    absl::StatusOr<ProgramCopies> sent = SendPrograms();
    if (sent.ok()) {
      std::lock_guard<std::mutex> lock(copies_mu_);
      blob_hash_ = sent->program;
      cpp_blob_hash_ = sent->cpp_program;
      copies_sent_ = true;
    }
    TellSubmitters(sent);
    return sent.status();
  }

  // Hands the submitters the copies (or why none were made), on the loop.
  void TellSubmitters(const absl::StatusOr<ProgramCopies>& copies) {
    if (loop_ == nullptr) return;
    loop_->Post([this, copies] {
      auto hash = [&](std::string ProgramCopies::*which)
          -> absl::StatusOr<std::string> {
        if (!copies.ok()) return copies.status();
        return (*copies).*which;
      };
      if (submitter_ != nullptr) {
        submitter_->SetProgramCopy(hash(&ProgramCopies::program));
      }
      if (cpp_submitter_ != nullptr) {
        cpp_submitter_->SetProgramCopy(hash(&ProgramCopies::cpp_program));
      }
    });
  }

  // Sends the copies unless they were sent: a caller that finds a send
  // under way waits for it, and one that failed lets the next caller try
  // again. Blocking: any thread but the loop.
  absl::Status SendProgramsOnce() {
    {
      std::unique_lock<std::mutex> lock(copies_mu_);
      copies_cv_.wait(lock, [this] { return !copies_sending_; });
      if (copies_sent_) {
        ProgramCopies known{blob_hash_, cpp_blob_hash_};
        lock.unlock();
        TellSubmitters(known);
        return absl::OkStatus();
      }
      copies_sending_ = true;
    }
    absl::Status sent = SendAndRecordCopies();
    {
      std::lock_guard<std::mutex> lock(copies_mu_);
      copies_sending_ = false;
    }
    copies_cv_.notify_all();
    return sent;
  }

  // An actor's spec names the copy of its program: one is sent first when
  // the cluster has a node of another host, where the head may place it.
  // User threads.
  absl::Status SendProgramsForActors() {
    if (!options_.workers_run_this_program) return absl::OkStatus();
    {
      std::lock_guard<std::mutex> lock(copies_mu_);
      if (copies_sent_) return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(proto::ClusterStatus status, ClusterStatus());
    if (!NodesElsewhere(status, HostId())) return absl::OkStatus();
    return SendProgramsOnce();
  }

  // ---- Loop thread ----

  void ScheduleMaintenance() {
    loop_->RunAfter(100, [this] {
      ForEachSubmitter([](TaskSubmitter& submitter) { submitter.Tick(); });
      const int64_t interval = TaskEventsIntervalMs();
      if (interval > 0 && ++event_ticks_ * 100 >= interval) {
        event_ticks_ = 0;
        FlushTaskEvents(nullptr);
      }
      ScheduleMaintenance();
    });
  }

  // A submitter met a node without the program (one of a host that joined
  // after this process started): the copies are sent on a thread of their
  // own (SendProgram blocks), and the submitters hear of them on the loop.
  // A wish made while that thread runs is taken up by it before it ends.
  void ProgramWanted() {
    std::lock_guard<std::mutex> lock(copier_mu_);
    if (stopping_) return;
    copy_wanted_ = true;
    if (copier_running_) return;
    if (copier_.joinable()) copier_.join();  // it has ended
    copier_running_ = true;
    copier_ = std::thread([this] {
      while (true) {
        {
          std::lock_guard<std::mutex> lock(copier_mu_);
          if (!copy_wanted_ || stopping_) {
            copier_running_ = false;
            return;
          }
          copy_wanted_ = false;
        }
        absl::Status sent = SendProgramsOnce();
        if (!sent.ok()) {
          SHOAL_LOG(WARNING) << "a node has no copy of this program, and "
                                "none could be sent: "
                             << sent;
        }
      }
    });
  }

  // ---- The head restarting ----

  // The connection to the head is gone: once a head answers again (the
  // same, restarted), this process says which job it is, so that what the
  // job owns is kept. Tasks go on meanwhile: they need only the agents.
  void HeadLost(const absl::Status& why) {
    if (stopping_) return;
    SHOAL_LOG(WARNING) << "lost the head (" << why << "); reconnecting as "
                       << job_id_;
    Reattach();
  }

  void Reattach() {
    if (stopping_ || head_ == nullptr) return;
    proto::RegisterJobRequest request = register_request_;
    request.set_resume_job_id(job_id_);
    head_->RegisterJob(
        request,
        [this](absl::StatusOr<proto::RegisterJobReply> reply) {
          if (stopping_) return;
          if (!reply.ok()) {
            loop_->RunAfter(kReattachRetryMs, [this] { Reattach(); });
            return;
          }
          SHOAL_LOG(INFO) << "the head is back; " << job_id_ << " carries on";
          UploadBinariesAgain();
        },
        2000);
  }

  // A head that took over from another folder (a shared storage such as
  // Redis) may not hold this job's binaries, which workers started from
  // now on are made from: they go to it again (a head that has them says
  // so at once). Blocking calls, so on a thread of their own.
  void UploadBinariesAgain() {
    // A worker's program is its driver's: the driver uploads it. Programs
    // never sent (every node was on this host) are not sent now either.
    if (!options_.worker_id.empty()) return;
    {
      std::lock_guard<std::mutex> lock(copies_mu_);
      if (!copies_sent_) return;
    }
    std::lock_guard<std::mutex> lock(uploader_mu_);
    if (stopping_ || uploading_.exchange(true)) return;
    if (uploader_.joinable()) uploader_.join();  // done: uploading_ was false
    uploader_ = std::thread([this] {
      absl::Status st = SendAndRecordCopies();
      if (!st.ok()) {
        SHOAL_LOG(WARNING) << "cannot give the head this job's binary again ("
                           << st << "); workers it starts may fail";
      }
      uploading_ = false;
    });
  }

  // Sends the task events gathered since the last batch (one batch at a
  // time: while one is out, the next keeps filling); `done`, if set, once
  // the head answered or nothing was to be sent.
  void FlushTaskEvents(std::function<void()> done) {
    std::string batch;
    if (events_ != nullptr && !events_in_flight_) {
      // A batch the head could not take (it was away) goes again, ahead of
      // the new one: serialized messages of one type concatenate into one.
      batch = std::move(unsent_events_) + events_->Take();
      unsent_events_.clear();
    }
    if (batch.empty()) {
      if (done) done();
      return;
    }
    events_in_flight_ = true;
    auto kept = std::make_shared<std::string>(batch);
    head_->ReportTaskEvents(
        std::move(batch),
        [this, done = std::move(done), kept](absl::StatusOr<proto::Empty> r) {
          events_in_flight_ = false;
          if (!r.ok() && rpc::NeverSent(r.status()) &&
              kept->size() <= kMaxUnsentEventBytes) {
            unsent_events_ = std::move(*kept);
          } else if (!r.ok() && !events_warned_) {
            events_warned_ = true;
            SHOAL_LOG(WARNING)
                << "the head did not take a batch of task events ("
                << r.status() << "); shoal list tasks misses them";
          }
          if (done) done();
        },
        1000);
  }

  void RecordTask(TaskEntry& task, TaskEventBuffer::Change change) {
    if (events_ != nullptr) events_->Record(task, change);
  }

  // The last reference to an object is gone (any thread).
  void OnForget(const std::string& id, bool stored,
                std::set<std::string> copy_nodes) {
    if (loop_ == nullptr) return;
    // The refs it holds go on the loop: their release takes the table's
    // lock, and contained_ is the loop's.
    loop_->Post([this, id, stored, nodes = std::move(copy_nodes)] {
      contained_.erase(id);
      if (!stored) return;
      // Freed on every node holding a copy, with its lineage.
      recovery_.Forget(id);
      proto::ObjectRequest req;
      req.set_object_id(id);
      for (const std::string& node : nodes) {
        std::string agent = nodes_->AgentOf(node);
        if (agent.empty()) continue;
        rpc::CallProto<proto::Empty>(
            nodes_->Channel(agent), proto::OBJECT_DELETE, req,
            [](absl::StatusOr<proto::Empty>) {}, 10000);
      }
    });
  }

  void OnSubmit(std::unique_ptr<TaskEntry> task) {
    TaskEntry* t = task.get();
    tasks_[t->id] = std::move(task);
    absl::Status resolved = deps_.Resolve(t->id, &t->args);
    if (!resolved.ok()) {
      // Failed from the loop's next turn: the caller may be inside the
      // completion of another task.
      loop_->Post([this, id = t->id, resolved] { FailTask(id, resolved); });
      return;
    }
    if (t->args.pending == 0) {
      Enqueue(t);
    } else {
      RecordTask(*t, {.state = proto::TaskEvent::PENDING_ARGS_AVAIL});
    }
  }

  void Enqueue(TaskEntry* t, bool front = false) {
    RecordTask(*t, {.state = proto::TaskEvent::PENDING_NODE_ASSIGNMENT});
    if (!t->actor_id.empty()) return actors_.Ready(t->actor_id, t->id);
    TaskSubmitter& submitter =
        t->in_cpp_program ? *cpp_submitter_ : *submitter_;
    submitter.Enqueue(t->id, t->shape, t->shape_key, t->depth, front);
  }

  // The submitter of this program's workers, and that of the C++ program
  // when there is one.
  void ForEachSubmitter(const std::function<void(TaskSubmitter&)>& fn) {
    if (submitter_ != nullptr) fn(*submitter_);
    if (cpp_submitter_ != nullptr) fn(*cpp_submitter_);
  }

  // The spec of task `t` for a worker on `node_id` (which will pull its
  // stored arguments: freed there too, and a source for later pulls).
  bool FillSpec(const std::string& task_id, const std::string& node_id,
                const std::string& worker_id, proto::TaskSpec* spec) {
    auto it = tasks_.find(task_id);
    if (it == tasks_.end()) return false;
    TaskEntry& t = *it->second;
    RecordTask(t, {.state = proto::TaskEvent::SUBMITTED_TO_WORKER,
                   .node_id = node_id,
                   .worker_id = worker_id});
    spec->set_task_id(t.id);
    spec->set_function_name(t.function);
    for (const auto& v : t.args.values) spec->add_args(v);
    for (const auto& [index, object] : t.args.stored) {
      (*spec->mutable_stored_args())[index] = object;
      objects_.AddCopy(object.object_id(), node_id,
                       nodes_->TransferAddressOf(node_id));
    }
    spec->set_attempt(t.attempt);
    spec->set_result_id(t.id);
    spec->set_owner(owner_);
    spec->set_inline_threshold(threshold_);
    spec->set_depth(t.depth);
    return true;
  }

  std::string FunctionOf(const std::string& task_id) const {
    auto t = tasks_.find(task_id);
    return t != tasks_.end() ? t->second->function : "?";
  }

  // ---- TaskSubmitter::Delegate ----

  bool BuildSpec(const std::string& task_id, const std::string& node_id,
                 const std::string& worker_id, proto::TaskSpec* spec) override {
    return FillSpec(task_id, node_id, worker_id, spec);
  }

  void TaskReplied(const std::string& task_id, const std::string& node_id,
                   absl::StatusOr<proto::TaskResult> result) override {
    if (!result.ok()) return FailTask(task_id, result.status());
    if (result->ok()) return CompleteTask(task_id, std::move(*result));
    if (result->error_type() == "shoal::ObjectLost") {
      // Runs again once the argument is rebuilt, if it can be.
      absl::Status rebuilding = RebuildArgument(task_id, result->lost_object());
      if (!rebuilding.ok()) {
        FailTask(task_id, TaskError(ErrorKind::kObjectLost,
                                    absl::StrCat("task ", task_id,
                                                 " cannot run on node ",
                                                 node_id, ": ", result->error(),
                                                 "; ", rebuilding.message())));
      }
      return;
    }
    FailTask(task_id, RemoteFailure(FunctionOf(task_id), node_id,
                                    result->error(), result->error_data()));
  }

  void WorkerDied(const std::string& task_id, const std::string& how) override {
    auto t = tasks_.find(task_id);
    if (t == tasks_.end()) return;
    TaskEntry& task = *t->second;
    if (task.retries_left > 0) {
      --task.retries_left;
      ++task.attempt;
      SHOAL_LOG(WARNING) << "task " << task.function << " (" << task.id
                         << "): " << how << "; retrying (" << task.retries_left
                         << " retries left)";
      return Enqueue(&task, /*front=*/true);
    }
    FailTask(task.id,
             TaskError(ErrorKind::kWorkerDied,
                       absl::StrCat("task ", task.function, " (", task.id,
                                    ") failed: the worker running it died: ",
                                    how, ". It ran ", task.attempt + 1,
                                    " time(s); raise SetMaxRetries() or look "
                                    "in the worker's log (session folder, "
                                    "logs/worker-*.log)")));
  }

  void TaskFailed(const std::string& task_id, absl::Status error) override {
    FailTask(task_id, std::move(error));
  }

  void FetchNodes(
      std::function<void(absl::StatusOr<proto::ClusterStatus>)> done) override {
    head_->ClusterStatus(std::move(done), 5000);
  }

  // ---- ActorSubmitter::Delegate ----

  bool BuildCall(const std::string& task_id, const std::string& node_id,
                 proto::TaskSpec* spec) override {
    return FillSpec(task_id, node_id, "", spec);
  }

  void CallReplied(const std::string& task_id, const std::string& node_id,
                   proto::TaskResult result) override {
    if (result.ok()) return CompleteTask(task_id, std::move(result));
    FailTask(task_id, RemoteFailure(FunctionOf(task_id), node_id,
                                    result.error(), result.error_data()));
  }

  void CallFailed(const std::string& task_id, ActorSubmitter::Failure failure,
                  const std::string& message) override {
    auto t = tasks_.find(task_id);
    std::string text = t != tasks_.end()
                           ? absl::StrCat("call ", t->second->function, " (",
                                          task_id, ") failed: ", message)
                           : message;
    FailTask(task_id, TaskError(failure == ActorSubmitter::Failure::kInfeasible
                                    ? ErrorKind::kInfeasible
                                    : ErrorKind::kActorDied,
                                text));
  }

  void GetActor(
      const proto::GetActorRequest& request,
      std::function<void(absl::StatusOr<proto::ActorInfo>)> done) override {
    head_->GetActor(request, std::move(done));
  }

  std::unique_ptr<rpc::Channel> ConnectTo(const std::string& address) override {
    return std::make_unique<rpc::TcpChannel>(loop_.get(), address,
                                             options_.token, peer_name_);
  }

  // ---- Outcomes ----

  // The task ended: its place in the window goes to the next submitter
  // (once: a task run again to rebuild a lost object holds none).
  void LeaveWindow(TaskEntry& task) {
    if (!task.in_window) return;
    task.in_window = false;
    window_.Release();
  }

  // `id` is a copy: the task entry that may hold it is erased here.
  void CompleteTask(std::string id, proto::TaskResult result) {
    std::unique_ptr<TaskEntry> done;
    if (auto t = tasks_.find(id); t != tasks_.end()) {
      done = std::move(t->second);
      tasks_.erase(t);
      LeaveWindow(*done);
      // Both times as the worker saw them.
      if (result.start_time_ms() != 0) {
        RecordTask(*done, {.state = proto::TaskEvent::RUNNING,
                           .time_ms = result.start_time_ms()});
      }
      RecordTask(*done, {.state = proto::TaskEvent::FINISHED,
                         .time_ms = result.start_time_ms() != 0
                                        ? result.start_time_ms() +
                                              result.exec_us() / 1000
                                        : 0});
      if (events_ != nullptr) events_->Ended(*done);
    }
    // The task that made a stored object can make it again if every copy
    // is lost; it (and the arguments it holds) is kept while the object is.
    if (objects_.Complete(id, &result) && done != nullptr) {
      recovery_.Keep(std::move(done));
    }
    done.reset();
    ObjectDone(id);
  }

  void FailTask(std::string id, absl::Status error) {
    if (auto t = tasks_.find(id); t != tasks_.end()) {
      const std::string message(error.message());
      RecordTask(*t->second, {.state = proto::TaskEvent::FAILED,
                              .error = message,
                              .error_type = TaskErrorTypeName(error)});
      if (events_ != nullptr) events_->Ended(*t->second);
      LeaveWindow(*t->second);
      std::string actor = t->second->actor_id;
      tasks_.erase(t);
      if (!actor.empty()) actors_.Drop(actor, id);
    }
    objects_.Fail(id, std::move(error));
    ObjectDone(id);
  }

  // Object `id` is no longer pending: the tasks waiting for it go on.
  void ObjectDone(const std::string& id) {
    std::vector<std::string> ready;
    std::vector<std::pair<std::string, absl::Status>> failed;
    deps_.ObjectDone(
        id,
        [this](const std::string& task_id) -> TaskArgs* {
          auto t = tasks_.find(task_id);
          return t == tasks_.end() ? nullptr : &t->second->args;
        },
        &ready, &failed);
    objects_.ForgetIfReleased(id);
    for (auto& [task_id, error] : failed) FailTask(task_id, error);
    for (const std::string& task_id : ready) {
      auto t = tasks_.find(task_id);
      if (t != tasks_.end()) Enqueue(t->second.get());
    }
  }

  // Every copy of stored object `id` (as `failed` described it) is gone.
  // Starts running the task that made it again (OK), or says why it
  // cannot be rebuilt.
  absl::Status Reconstruct(const std::string& id,
                           const proto::StoredObject& failed) {
    switch (objects_.NeedsRebuild(id, failed)) {
      case OwnedObjects::Rebuild::kGone:
        return TaskError(ErrorKind::kObjectLost, "it was released");
      case OwnedObjects::Rebuild::kUnderway:
        return absl::OkStatus();
      case OwnedObjects::Rebuild::kNeeded:
        break;
    }
    ASSIGN_OR_RETURN(std::unique_ptr<TaskEntry> task,
                     recovery_.TakeForRebuild(id));
    objects_.MarkPending(id);
    OnSubmit(std::move(task));
    return absl::OkStatus();
  }

  // A worker could not get argument `lost` of task `task_id` from any node:
  // rebuilds it and runs the task once it is back.
  absl::Status RebuildArgument(const std::string& task_id,
                               const std::string& lost) {
    auto t = tasks_.find(task_id);
    if (t == tasks_.end()) {
      return TaskError(ErrorKind::kObjectLost, "the task is gone");
    }
    RETURN_IF_ERROR(Reconstruct(lost, objects_.StoredObjectOf(lost)));
    TaskEntry& task = *t->second;
    if (!deps_.WaitAgain(task_id, &task.args, lost)) {
      Enqueue(&task, /*front=*/true);
    }
    return absl::OkStatus();
  }

  RuntimeOptions options_;
  std::unique_ptr<rpc::EventLoop> loop_;
  const std::string prefix_;
  std::atomic<uint64_t> next_id_{1};
  // Set by Start(), read-only after.
  std::string job_id_;
  std::string owner_;  // names this process as objects' owner
  std::string peer_name_;
  std::string binary_path_;
  std::string binary_hash_;
  // The head's copies of the programs (program_copy.h): sent at Start when
  // the cluster has nodes of other hosts, else when a node first lacks one
  // (ProgramWanted) or an actor may need one; in a worker, its agent's
  // SHOAL_BLOB_HASH.
  std::mutex copies_mu_;
  std::condition_variable copies_cv_;
  bool copies_sending_ ABSL_GUARDED_BY(copies_mu_) = false;
  bool copies_sent_ ABSL_GUARDED_BY(copies_mu_) = false;
  // Empty: none (not sent, or no such program).
  std::string blob_hash_ ABSL_GUARDED_BY(copies_mu_);
  std::string cpp_blob_hash_ ABSL_GUARDED_BY(copies_mu_);
  // This node's object store (null when the host has no agent with one)
  // and the size from which values go there.
  std::shared_ptr<ObjectClient> store_;
  std::string store_error_;
  const uint64_t threshold_ = InlineThresholdBytes();
  // Made by Start(), closed on the loop by Shutdown(); blocking calls from
  // any thread but the loop, asynchronous ones from the loop.
  std::unique_ptr<rpc::HeadClient> head_;

  // Any thread.
  OwnedObjects objects_;
  const OwnedObjects::BlockedFn blocked_fn_ = [this](bool blocked) {
    SetBlocked(blocked);
  };
  std::mutex blocked_mu_;
  // The task depths of the threads that wait in Get or Wait.
  std::multiset<int> blocked_depths_ ABSL_GUARDED_BY(blocked_mu_);
  std::mutex actor_args_mu_;
  // Constructor arguments of the actors this process made, kept for their
  // restarts.
  std::vector<std::shared_ptr<RefHandle>> actor_arg_refs_
      ABSL_GUARDED_BY(actor_args_mu_);

  // Loop thread only.
  DependencyResolver deps_;
  ObjectRecovery recovery_;
  std::unique_ptr<NodeView> nodes_;           // made by Start()
  std::unique_ptr<TaskSubmitter> submitter_;  // made by Start()
  // The workers of RuntimeOptions::cpp_program, when it is set.
  std::unique_ptr<TaskSubmitter> cpp_submitter_;
  std::string cpp_binary_path_;
  std::string cpp_binary_hash_;
  ActorSubmitter actors_;
  std::unordered_map<std::string, std::unique_ptr<TaskEntry>> tasks_;
  // Any thread.
  SubmitWindow window_{MaxPendingTasksFromEnv()};
  // Loop thread only.
  std::unique_ptr<TaskEventBuffer> events_;     // made by Start()
  proto::RegisterJobRequest register_request_;  // set by Start()
  std::atomic<bool> stopping_{false};
  // UploadBinariesAgain's thread: started on the loop thread, joined there
  // once done or by Shutdown.
  std::mutex uploader_mu_;
  std::thread uploader_ ABSL_GUARDED_BY(uploader_mu_);
  std::atomic<bool> uploading_{false};
  // ProgramWanted's thread: started on the loop thread, joined there once
  // it has ended, or by Shutdown.
  std::mutex copier_mu_;
  std::thread copier_ ABSL_GUARDED_BY(copier_mu_);
  bool copier_running_ ABSL_GUARDED_BY(copier_mu_) = false;
  bool copy_wanted_ ABSL_GUARDED_BY(copier_mu_) = false;
  bool events_in_flight_ = false;
  std::string unsent_events_;  // a batch to send again (the head was away)
  bool events_warned_ = false;
  int64_t event_ticks_ = 0;
  // Refs inside each object's value, by object id: kept while it lives.
  std::unordered_map<std::string, std::vector<std::shared_ptr<RefHandle>>>
      contained_;
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
