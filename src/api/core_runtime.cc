#include "api/core_runtime.h"

#include <cxxabi.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "agent/object_transfer.h"
#include "api/actor_submitter.h"
#include "api/object_client.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/util.h"
#include "rpc/head_client.h"
#include "rpc/rpc.h"
#include "scheduling/resource_set.h"
#include "shoal/shoal.pb.h"
#include "worker/worker_main.h"

namespace shoal::internal {
namespace {

// Tasks pushed to one worker before earlier ones return. Pipelining pays for
// tiny tasks (it hides the round trip) and hurts long ones (they would queue
// behind each other on one worker while other leases sit idle), so the depth
// follows the shape's measured run time: about 2 ms of work in flight.
constexpr size_t kMaxInFlightPerWorker = 32;
constexpr double kInFlightWorkUs = 2000;
constexpr int kMaxPendingLeaseRequests = 10;
constexpr int kMaxLeaseFailures = 3;
constexpr int64_t kBlobChunk = 4 << 20;

enum class ErrorKind {
  kNone,
  kRemote,
  kWorkerDied,
  kInfeasible,
  kObjectLost,
  kActorDied,
  kOther
};

struct ObjectEntry {
  enum class State { kPending, kReady, kFailed };
  State state = State::kPending;
  std::shared_ptr<const std::string> value;  // msgpack, when inline
  // In node object stores instead: where, and every node that holds or is
  // about to hold a copy (freed there when the last reference goes).
  bool stored = false;
  proto::StoredObject stored_object;
  std::set<std::string> copy_nodes;
  ErrorKind error_kind = ErrorKind::kNone;
  std::string error;  // full message
  std::string function, node, remote_message;
  bool released = false;
};

struct TaskEntry {
  std::string id;
  std::string function;
  std::vector<TaskArg> args;
  std::vector<std::string> values;            // resolved arguments (msgpack)
  std::map<int, proto::StoredObject> stored;  // or resolved to stored objects
  ResourceSet shape;
  std::string shape_key;
  int retries_left = 3;
  int attempt = 0;
  int deps_pending = 0;
  std::string actor_id;  // a call of this actor's method
  int depth = 0;         // how deeply it is nested (a driver's: 0)
};

struct LeasedWorker {
  std::string lease_id;
  std::string worker_id;
  std::string address;
  std::string node_id;
  std::string agent_address;
  std::unique_ptr<rpc::Channel> channel;
  std::deque<std::string> in_flight;  // task ids, in push order
  int64_t idle_since_us = 0;
};

struct ShapeQueue {
  ResourceSet shape;
  std::deque<std::string> queue;
  std::vector<std::unique_ptr<LeasedWorker>> workers;
  int pending_lease_requests = 0;
  int consecutive_failures = 0;
  double avg_exec_us = -1;  // moving average of the function's run time

  size_t MaxInFlight() const {
    if (avg_exec_us < 0) return 1;
    double depth = kInFlightWorkUs / std::max(avg_exec_us, 1.0);
    return static_cast<size_t>(
        std::clamp(depth, 1.0, static_cast<double>(kMaxInFlightPerWorker)));
  }
};

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

class CoreRuntimeImpl : public CoreRuntime, public ActorSubmitter::Delegate {
 public:
  CoreRuntimeImpl(RuntimeOptions options, std::unique_ptr<rpc::EventLoop> loop)
      : options_(std::move(options)),
        loop_(std::move(loop)),
        prefix_(RandomHex(6)),
        actors_(loop_.get(), this) {}

  ~CoreRuntimeImpl() override { Shutdown(); }

  absl::Status Start() {
    head_ = std::make_unique<rpc::HeadClient>(
        loop_.get(), options_.head_address, options_.token, "driver");
    binary_path_ = SelfExecutable();
    // Read through /proc: the file may have been replaced or removed.
    ASSIGN_OR_RETURN(binary_hash_, Sha256File("/proc/self/exe"));
    proto::RegisterJobRequest job;
    job.set_driver_host(Hostname());
    job.set_driver_pid(getpid());
    job.set_binary_path(binary_path_);
    job.set_binary_hash(binary_hash_);
    ASSIGN_OR_RETURN(auto reply, head_->RegisterJob(job));
    job_id_ = reply.job_id();
    owner_ = absl::StrCat("driver of job ", job_id_, " (pid ", getpid(), ")");
    RETURN_IF_ERROR(UploadBinary());
    ASSIGN_OR_RETURN(auto status, ClusterStatus());
    std::string store_agent;
    RunOnLoop([&] {
      SetNodes(status);
      ScheduleMaintenance();
      for (const auto& n : nodes_) {
        if (n.address() == local_agent_ && IsLocalAddress(n.node_ip())) {
          store_agent = n.address();
        }
      }
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
  }

  // ---- User-thread API ----

  std::shared_ptr<RefHandle> Submit(const std::string& function_name,
                                    std::vector<TaskArg> args,
                                    const TaskOptions& options) override {
    std::map<std::string, double> resources = options.resources;
    if (resources.count("CPU") == 0) resources["CPU"] = 1;
    auto shape =
        ShapeFor(resources, options.placement_group_id, options.bundle_index);
    if (!shape.ok()) {
      throw Error(absl::StrCat("bad resources for task ", function_name, ": ",
                               shape.status().message()));
    }
    if (options.max_retries < 0) {
      throw Error("max_retries must be 0 or more");
    }
    PrepareArgs(args);
    auto task = std::make_unique<TaskEntry>();
    task->id = NewId();
    task->function = function_name;
    task->args = std::move(args);
    task->shape = *shape;
    task->shape_key = shape->DebugString();
    task->retries_left = options.max_retries;
    task->depth = SubmitDepth();
    {
      std::lock_guard<std::mutex> lock(obj_mu_);
      objects_[task->id];
    }
    auto handle = NewHandle(task->id);
    TaskEntry* raw = task.release();
    loop_->Post([this, raw] { OnSubmit(std::unique_ptr<TaskEntry>(raw)); });
    return handle;
  }

  // Large arguments passed by value go through the store like Put; the
  // task holds their refs until it is done. Small ones are copied now, so
  // nothing the caller owns is read after Remote() returns.
  void PrepareArgs(std::vector<TaskArg>& args) {
    for (TaskArg& arg : args) {
      if (arg.ref != nullptr) continue;
      if (store_ != nullptr && arg.value.data.size() >= threshold_) {
        arg.ref = Put(std::move(arg.value), std::move(arg.contained));
        arg.value = {};
      } else if (arg.value.raw || arg.value.keepalive == nullptr) {
        arg.value = ObjectValue::Owned(ToMsgpack(arg.value));
      }
    }
  }

  std::shared_ptr<RefHandle> SubmitActorTask(
      const std::string& actor_id, const std::string& method,
      std::vector<TaskArg> args) override {
    if (actor_id.empty()) {
      throw Error(
          "this actor handle is empty: make one with shoal::Actor(...)"
          ".Remote() or find one with shoal::GetActor()");
    }
    PrepareArgs(args);
    auto task = std::make_unique<TaskEntry>();
    task->id = NewId();
    task->function = method;
    task->args = std::move(args);
    task->actor_id = actor_id;
    task->retries_left = 0;
    task->depth = SubmitDepth();
    {
      std::lock_guard<std::mutex> lock(obj_mu_);
      objects_[task->id];
    }
    auto handle = NewHandle(task->id);
    TaskEntry* raw = task.release();
    loop_->Post([this, raw] {
      actors_.Add(raw->actor_id, raw->id);
      OnSubmit(std::unique_ptr<TaskEntry>(raw));
    });
    return handle;
  }

  std::string CreateActor(const std::string& factory,
                          const std::string& class_type,
                          std::vector<TaskArg> args,
                          const ActorOptions& options) override {
    if (options.max_concurrency < 1) {
      throw Error("SetMaxConcurrency: an actor runs at least 1 call at a time");
    }
    if (options.max_restarts < -1 || options.max_task_retries < -1) {
      throw Error(
          "SetMaxRestarts and SetMaxTaskRetries take 0 or more, or -1 for "
          "no limit");
    }
    if (options.detached && options.name.empty()) {
      throw Error(
          "a detached actor outlives its driver: give it a name (SetName) "
          "so that shoal::GetActor() can find it again");
    }
    if (!options.placement_group_id.empty() && options.resources.empty()) {
      throw Error(
          "an actor in a placement group takes its resources from its "
          "bundle: say which with SetResources (e.g. {{\"CPU\", 1}})");
    }
    auto shape = ShapeFor(options.resources, options.placement_group_id,
                          options.bundle_index);
    if (!shape.ok()) {
      throw Error(absl::StrCat("bad resources for actor ", Demangle(class_type),
                               ": ", shape.status().message()));
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
    spec.set_job_id(options_.lease_job_id.empty() ? job_id_
                                                  : options_.lease_job_id);
    spec.set_binary_path(binary_path_);
    spec.set_binary_hash(binary_hash_);
    spec.set_owner(owner_);
    spec.set_placement_group_id(options.placement_group_id);
    spec.set_bundle_index(options.bundle_index);
    spec.set_depth(SubmitDepth());
    // The constructor's arguments travel in the spec, so that a restart
    // (even after this process is gone) makes the actor the same way;
    // arguments in object stores stay alive with this runtime.
    PrepareArgs(args);
    std::vector<std::shared_ptr<RefHandle>> keep;
    for (size_t i = 0; i < args.size(); ++i) {
      TaskArg& arg = args[i];
      if (arg.ref == nullptr) {
        spec.add_args(std::string(arg.value.data));
        for (auto& c : arg.contained) keep.push_back(std::move(c));
        continue;
      }
      std::unique_lock<std::mutex> lock(obj_mu_);
      const ObjectEntry& e = WaitReady(lock, *arg.ref, -1);
      if (e.stored) {
        spec.add_args("");
        (*spec.mutable_stored_args())[static_cast<int>(i)] = e.stored_object;
      } else {
        spec.add_args(*e.value);
      }
      keep.push_back(arg.ref);
    }
    auto info = head_->CreateActor(spec);
    if (!info.ok()) {
      throw Error(absl::StrCat("cannot create actor ", spec.class_name(),
                               options.name.empty() ? "" : " \"", options.name,
                               options.name.empty() ? "" : "\"", ": ",
                               info.status().message()));
    }
    if (!keep.empty()) {
      std::lock_guard<std::mutex> lock(obj_mu_);
      for (auto& k : keep) actor_arg_refs_.push_back(std::move(k));
    }
    return spec.actor_id();
  }

  std::shared_ptr<RefHandle> Put(
      ObjectValue value,
      std::vector<std::shared_ptr<RefHandle>> contained) override {
    std::string id = NewId();
    ObjectEntry entry;
    entry.state = ObjectEntry::State::kReady;
    if (store_ != nullptr && value.data.size() >= threshold_) {
      const char format = value.raw ? kFormatRaw : kFormatMsgpack;
      absl::Status put = store_->Put(
          id, owner_, value.data.size(), std::string_view(&format, 1),
          [&](uint8_t* dest) {
            memcpy(dest, value.data.data(), value.data.size());
          },
          /*owned_here=*/true);
      if (!put.ok()) {
        throw Error(absl::StrCat("Put of ", value.data.size(),
                                 " bytes failed: ", put.message()));
      }
      entry.stored = true;
      proto::StoredObject& so = entry.stored_object;
      so.set_object_id(id);
      so.set_data_size(value.data.size());
      so.set_metadata_size(1);
      so.set_owner(owner_);
      AddSource(&so, store_->node_id(), store_->transfer_address());
      entry.copy_nodes.insert(store_->node_id());
    } else {
      entry.value = std::make_shared<const std::string>(ToMsgpack(value));
    }
    {
      std::lock_guard<std::mutex> lock(obj_mu_);
      objects_[id] = std::move(entry);
    }
    if (!contained.empty()) {
      // Kept with the object (on the loop, where it is dropped too).
      loop_->Post([this, id, contained = std::move(contained)]() mutable {
        contained_[id] = std::move(contained);
      });
    }
    return NewHandle(id);
  }

  std::shared_ptr<RefHandle> HandleFor(const std::string& id) override {
    std::lock_guard<std::mutex> lock(obj_mu_);
    auto it = handles_.find(id);
    std::shared_ptr<RefHandle> handle =
        it == handles_.end() ? nullptr : it->second.lock();
    if (handle == nullptr) {
      throw Error(absl::StrCat(
          "a value refers to object ", id,
          ", which this process does not reference: refs inside values can "
          "be read back only by the process that owns the objects"));
    }
    return handle;
  }

  std::shared_ptr<RefHandle> NewHandle(const std::string& id) {
    auto handle = std::make_shared<RefHandle>(id);
    std::lock_guard<std::mutex> lock(obj_mu_);
    handles_[id] = handle;
    return handle;
  }

  ObjectValue Get(const RefHandle& ref, int64_t timeout_ms) override {
    int64_t deadline_us =
        timeout_ms < 0 ? -1 : MonotonicUs() + timeout_ms * 1000;
    while (true) {
      int64_t left_ms =
          deadline_us < 0
              ? -1
              : std::max<int64_t>(0, (deadline_us - MonotonicUs()) / 1000);
      proto::StoredObject where;
      bool have_copy = false;
      {
        std::unique_lock<std::mutex> lock(obj_mu_);
        const ObjectEntry& e = WaitReady(lock, ref, left_ms);
        if (!e.stored) return {*e.value, false, e.value};
        where = e.stored_object;
        have_copy = store_ != nullptr && e.copy_nodes.count(store_->node_id());
      }
      absl::StatusOr<ObjectValue> value = FetchStored(where, have_copy);
      if (value.ok()) return *value;
      if (value.status().code() != absl::StatusCode::kDataLoss) {
        throw Error(absl::StrCat("Get of object ", ref.id(),
                                 " failed: ", value.status().message()));
      }
      // Every copy is gone: rebuild it from its task, or say it is lost.
      std::string why;
      bool rebuilding = false;
      RunOnLoop([&] { rebuilding = Reconstruct(ref.id(), where, &why); });
      if (!rebuilding) {
        throw ObjectLostError(
            absl::StrCat(value.status().message(), "; ", why));
      }
    }
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
        std::lock_guard<std::mutex> lock(obj_mu_);
        auto it = objects_.find(where.object_id());
        if (it != objects_.end()) {
          it->second.copy_nodes.insert(store_->node_id());
          AddSource(&it->second.stored_object, store_->node_id(),
                    store_->transfer_address());
        }
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

  // Waits until `ref`'s object is no longer pending and returns it, or
  // throws its error.
  const ObjectEntry& WaitReady(std::unique_lock<std::mutex>& lock,
                               const RefHandle& ref, int64_t timeout_ms) {
    auto it = objects_.find(ref.id());
    if (it == objects_.end()) {
      throw Error(absl::StrCat("object ", ref.id(),
                               " is not known to this process (it was made by "
                               "another driver or before a Shutdown)"));
    }
    auto ready = [&] {
      it = objects_.find(ref.id());
      return it == objects_.end() ||
             it->second.state != ObjectEntry::State::kPending;
    };
    if (!ready()) {
      BlockedScope blocked(this);
      if (timeout_ms < 0) {
        ++waiters_;
        obj_cv_.wait(lock, ready);
        --waiters_;
      } else {
        ++waiters_;
        bool ok = obj_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                                   ready);
        --waiters_;
        if (!ok) {
          throw TimeoutError(absl::StrCat("object ", ref.id(),
                                          " was not ready within ", timeout_ms,
                                          " ms"));
        }
      }
    }
    if (it == objects_.end()) throw Error("object released while waiting");
    const ObjectEntry& e = it->second;
    if (e.state == ObjectEntry::State::kReady) return e;
    switch (e.error_kind) {
      case ErrorKind::kRemote:
        throw RemoteError(e.function, e.node, e.remote_message);
      case ErrorKind::kWorkerDied:
        throw WorkerDiedError(e.error);
      case ErrorKind::kInfeasible:
        throw InfeasibleError(e.error);
      case ErrorKind::kObjectLost:
        throw ObjectLostError(e.error);
      case ErrorKind::kActorDied:
        throw ActorDiedError(e.error);
      default:
        throw Error(e.error);
    }
  }

  std::vector<size_t> Wait(const std::vector<const RefHandle*>& refs,
                           size_t num_ready, int64_t timeout_ms) override {
    num_ready = std::min(num_ready, refs.size());
    std::unique_lock<std::mutex> lock(obj_mu_);
    std::vector<size_t> ready;
    auto check = [&] {
      ready.clear();
      for (size_t i = 0; i < refs.size(); ++i) {
        auto it = objects_.find(refs[i]->id());
        if (it == objects_.end() ||
            it->second.state != ObjectEntry::State::kPending) {
          ready.push_back(i);
        }
      }
      return ready.size() >= num_ready;
    };
    if (check()) return ready;
    BlockedScope blocked(this);
    ++waiters_;
    if (timeout_ms < 0) {
      obj_cv_.wait(lock, check);
    } else {
      obj_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), check);
    }
    --waiters_;
    return ready;
  }

  void Release(const std::string& object_id) override {
    std::lock_guard<std::mutex> lock(obj_mu_);
    handles_.erase(object_id);
    auto it = objects_.find(object_id);
    if (it == objects_.end()) return;
    if (it->second.state == ObjectEntry::State::kPending) {
      it->second.released = true;
    } else {
      ForgetLocked(it);
    }
  }

  rpc::HeadClient& head() override { return *head_; }

  absl::StatusOr<proto::ClusterStatus> ClusterStatus() override {
    return head_->ClusterStatus();
  }

  void Shutdown() override {
    if (!loop_) return;
    int pending_returns = 0;
    // Stored objects this process owns go with it, on every node.
    std::vector<std::pair<std::string, std::set<std::string>>> stored;
    {
      std::lock_guard<std::mutex> lock(obj_mu_);
      for (auto& [id, e] : objects_) {
        if (e.stored) stored.emplace_back(id, std::move(e.copy_nodes));
      }
    }
    rpc::RunOnLoopAndWait<void>(loop_.get(), [&](std::function<void()> done) {
      // Return every lease; wait (briefly) for the agents to take them back.
      auto remaining = std::make_shared<int>(0);
      auto finish = [done, remaining] {
        if (--*remaining == 0) done();
      };
      for (const auto& [id, nodes] : stored) {
        proto::ObjectRequest req;
        req.set_object_id(id);
        for (const std::string& node : nodes) {
          auto agent = agent_of_node_.find(node);
          if (agent == agent_of_node_.end()) continue;
          ++*remaining;
          rpc::CallProto<proto::Empty>(
              AgentChannel(agent->second), proto::OBJECT_DELETE, req,
              [finish](absl::StatusOr<proto::Empty>) { finish(); }, 1000);
        }
      }
      for (auto& [key, q] : shapes_) {
        for (auto& w : q.workers) {
          ++*remaining;
          ++pending_returns;
          proto::ReturnLeaseRequest req;
          req.set_lease_id(w->lease_id);
          rpc::CallProto<proto::Empty>(
              AgentChannel(w->agent_address), proto::RETURN_LEASE, req,
              [finish](absl::StatusOr<proto::Empty>) { finish(); }, 1000);
        }
      }
      if (*remaining == 0) done();
    });
    RunOnLoop([&] {
      actors_.Shutdown();
      shapes_.clear();
      agents_.clear();
      if (head_ != nullptr) head_->Close();
    });
    // Outside the loop: lineage holds refs whose release takes obj_mu_.
    std::unordered_map<std::string, std::unique_ptr<TaskEntry>> lineage;
    std::unordered_map<std::string, std::vector<std::shared_ptr<RefHandle>>>
        contained;
    RunOnLoop([&] {
      lineage = std::move(lineage_);
      contained = std::move(contained_);
      tasks_.clear();
    });
    lineage.clear();
    contained.clear();
    std::vector<std::shared_ptr<RefHandle>> actor_args;
    {
      std::lock_guard<std::mutex> lock(obj_mu_);
      actor_args.swap(actor_arg_refs_);
    }
    actor_args.clear();
    loop_->Stop();
    loop_.reset();
    std::lock_guard<std::mutex> lock(obj_mu_);
    objects_.clear();
  }

 private:
  // How deeply what this thread submits now is nested: one more than the
  // task it runs in (in a worker), 0 in a driver.
  int SubmitDepth() const {
    return options_.worker_id.empty() ? 0 : CurrentTaskDepth() + 1;
  }

  // While a thread of a worker waits in Get or Wait, its node may give the
  // worker's CPU to other work (nested tasks that the wait is for).
  class BlockedScope {
   public:
    explicit BlockedScope(CoreRuntimeImpl* rt) : rt_(rt) {
      rt_->SetBlocked(true);
    }
    ~BlockedScope() { rt_->SetBlocked(false); }

   private:
    CoreRuntimeImpl* rt_;
  };

  void SetBlocked(bool blocked) {
    if (options_.worker_id.empty() || options_.worker_agent_address.empty()) {
      return;
    }
    int before =
        blocked ? blocked_threads_.fetch_add(1) : blocked_threads_.fetch_sub(1);
    if (blocked ? before != 0 : before != 1) return;
    loop_->Post([this, blocked] {
      proto::WorkerBlockedRequest req;
      req.set_worker_id(options_.worker_id);
      rpc::CallProto<proto::Empty>(
          AgentChannel(options_.worker_agent_address),
          blocked ? proto::WORKER_BLOCKED : proto::WORKER_UNBLOCKED, req,
          [](absl::StatusOr<proto::Empty>) {}, 5000);
    });
  }

  // ---- ActorSubmitter::Delegate (loop thread) ----

  bool BuildCall(const std::string& task_id, const std::string& node_id,
                 proto::TaskSpec* spec) override {
    auto it = tasks_.find(task_id);
    if (it == tasks_.end()) return false;
    FillSpec(*it->second, node_id, spec);
    return true;
  }

  void CallReplied(const std::string& task_id, const std::string& node_id,
                   proto::TaskResult result) override {
    if (result.ok()) return CompleteTask(task_id, std::move(result));
    auto t = tasks_.find(task_id);
    ObjectEntry e;
    e.error_kind = ErrorKind::kRemote;
    e.function = t != tasks_.end() ? t->second->function : "?";
    e.node = node_id;
    e.remote_message = result.error();
    FailTask(task_id, e);
  }

  void CallFailed(const std::string& task_id, ActorSubmitter::Failure failure,
                  const std::string& message) override {
    ObjectEntry e;
    e.error_kind = failure == ActorSubmitter::Failure::kInfeasible
                       ? ErrorKind::kInfeasible
                       : ErrorKind::kActorDied;
    auto t = tasks_.find(task_id);
    e.error = t != tasks_.end()
                  ? absl::StrCat("call ", t->second->function, " (", task_id,
                                 ") failed: ", message)
                  : message;
    FailTask(task_id, e);
  }

  void GetActor(
      const proto::GetActorRequest& request,
      std::function<void(absl::StatusOr<proto::ActorInfo>)> done) override {
    head_->GetActor(request, std::move(done));
  }

  std::unique_ptr<rpc::Channel> ConnectTo(const std::string& address) override {
    return std::make_unique<rpc::Channel>(loop_.get(), address, options_.token,
                                          "driver " + job_id_);
  }

  std::string NewId() {
    return absl::StrCat(prefix_, "-", next_id_.fetch_add(1));
  }

  static void AddSource(proto::StoredObject* object, const std::string& node,
                        const std::string& address) {
    for (const auto& s : object->sources()) {
      if (s.node_id() == node) return;
    }
    proto::ObjectSource* source = object->add_sources();
    source->set_node_id(node);
    source->set_address(address);
  }

  // The last reference is gone: forget the object, and free a stored one on
  // every node holding a copy (and its lineage). REQUIRES: obj_mu_ held.
  void ForgetLocked(std::unordered_map<std::string, ObjectEntry>::iterator it) {
    if (loop_ != nullptr) {
      // The refs it holds go on the loop: their release takes obj_mu_.
      loop_->Post([this, id = it->first] { contained_.erase(id); });
    }
    if (it->second.stored && loop_ != nullptr) {
      loop_->Post(
          [this, id = it->first, nodes = std::move(it->second.copy_nodes)] {
            FreeStored(id, nodes);
          });
    }
    objects_.erase(it);
  }

  void RunOnLoop(const std::function<void()>& fn) { loop_->RunSync(fn); }

  absl::Status UploadBinary() {
    proto::BlobRef ref;
    ref.set_hash(binary_hash_);
    ASSIGN_OR_RETURN(auto has, head_->HasBlob(ref));
    if (has.present()) return absl::OkStatus();
    ASSIGN_OR_RETURN(std::string data, ReadFile("/proc/self/exe"));
    int64_t offset = 0;
    do {
      proto::BlobChunk chunk;
      chunk.set_hash(binary_hash_);
      chunk.set_offset(offset);
      int64_t n = std::min<int64_t>(kBlobChunk, data.size() - offset);
      chunk.set_data(data.substr(offset, n));
      offset += n;
      chunk.set_last(offset >= static_cast<int64_t>(data.size()));
      chunk.set_total_size(data.size());
      RETURN_IF_ERROR(head_->PutBlobChunk(chunk));
    } while (offset < static_cast<int64_t>(data.size()));
    return absl::OkStatus();
  }

  // ---- Loop thread ----

  void SetNodes(const proto::ClusterStatus& status) {
    nodes_.assign(status.nodes().begin(), status.nodes().end());
    for (const auto& n : nodes_) {
      agent_of_node_[n.node_id()] = n.address();
      transfer_of_node_[n.node_id()] = n.object_transfer_address();
    }
    if (!local_agent_.empty() && !bad_agents_.count(local_agent_)) return;
    local_agent_.clear();
    // Prefer an agent on this host; else any alive one.
    for (const auto& n : nodes_) {
      if (n.alive() && !bad_agents_.count(n.address()) &&
          IsLocalAddress(n.node_ip())) {
        local_agent_ = n.address();
        return;
      }
    }
    for (const auto& n : nodes_) {
      if (n.alive() && !bad_agents_.count(n.address())) {
        local_agent_ = n.address();
        return;
      }
    }
  }

  void RefreshNodes() {
    head_->ClusterStatus(
        [this](absl::StatusOr<proto::ClusterStatus> s) {
          if (!s.ok()) return;
          // Agents the head reports alive get another chance.
          for (const auto& n : s->nodes()) {
            if (n.alive() && bad_agents_.count(n.address()) &&
                MonotonicUs() - bad_agents_[n.address()] > 2000000) {
              bad_agents_.erase(n.address());
            }
          }
          SetNodes(*s);
          LoseWorkersOnDeadNodes();
          for (auto& [key, q] : shapes_) Pump(q);
        },
        5000);
  }

  // Workers on a node the head declared dead (its heartbeats stopped) are
  // lost even while their connections look open: a host cut off by the
  // network drops packets, and nothing ever closes them.
  void LoseWorkersOnDeadNodes() {
    std::set<std::string> dead;
    for (const auto& n : nodes_) {
      if (!n.alive()) dead.insert(n.address());
    }
    if (dead.empty()) return;
    struct Lost {
      std::string key, lease_id, running_task;
    };
    std::vector<Lost> lost;
    for (auto& [key, q] : shapes_) {
      for (const auto& w : q.workers) {
        if (!dead.count(w->agent_address)) continue;
        lost.push_back({key, w->lease_id,
                        w->in_flight.empty() ? "" : w->in_flight.front()});
      }
    }
    for (const Lost& l : lost) {
      auto q = shapes_.find(l.key);
      if (q == shapes_.end()) continue;
      OnWorkerLost(
          q->second, l.lease_id, l.running_task,
          absl::UnavailableError("the head stopped hearing from its node"));
    }
  }

  void ScheduleMaintenance() {
    loop_->RunAfter(100, [this] {
      ReturnIdleLeases();
      if (++maintenance_ticks_ % 10 == 0) RefreshNodes();
      ScheduleMaintenance();
    });
  }

  rpc::Channel* AgentChannel(const std::string& address) {
    auto& ch = agents_[address];
    if (ch == nullptr) {
      ch = std::make_unique<rpc::Channel>(loop_.get(), address, options_.token,
                                          "driver " + job_id_);
    }
    return ch.get();
  }

  void OnSubmit(std::unique_ptr<TaskEntry> task) {
    TaskEntry* t = task.get();
    tasks_[t->id] = std::move(task);
    t->values.assign(t->args.size(), std::string());
    t->stored.clear();
    t->deps_pending = 0;
    std::string failed_dep;
    {
      std::lock_guard<std::mutex> lock(obj_mu_);
      for (size_t i = 0; i < t->args.size(); ++i) {
        if (t->args[i].ref == nullptr) {
          // Kept in args too: a rebuilt object's task runs again.
          t->values[i] = std::string(t->args[i].value.data);
          continue;
        }
        const std::string& dep = t->args[i].ref->id();
        auto it = objects_.find(dep);
        if (it == objects_.end()) {
          failed_dep = dep;
          break;
        }
        if (it->second.state == ObjectEntry::State::kPending) {
          ++t->deps_pending;
          dependents_[dep].push_back(t->id);
        } else if (it->second.state == ObjectEntry::State::kReady) {
          SetArg(*t, i, it->second);
        } else {
          ObjectEntry copy = it->second;
          copy.state = ObjectEntry::State::kPending;
          // Dependents fail with the error of what they depend on.
          loop_->Post([this, id = t->id, copy] { FailTask(id, copy); });
          return;
        }
      }
    }
    if (!failed_dep.empty()) {
      ObjectEntry e;
      e.error_kind = ErrorKind::kOther;
      e.error = absl::StrCat("argument object ", failed_dep,
                             " is not owned by this driver; pass values or "
                             "refs this driver created");
      return FailTask(t->id, e);
    }
    if (t->deps_pending == 0) Enqueue(t);
  }

  // Argument i of `t` is the ready object `e`.
  static void SetArg(TaskEntry& t, size_t i, const ObjectEntry& e) {
    if (e.stored) {
      t.stored[static_cast<int>(i)] = e.stored_object;
      t.values[i].clear();
    } else {
      t.stored.erase(static_cast<int>(i));
      t.values[i] = *e.value;
    }
  }

  void Enqueue(TaskEntry* t, bool front = false) {
    if (!t->actor_id.empty()) return actors_.Ready(t->actor_id, t->id);
    ShapeQueue& q = shapes_[t->shape_key];
    if (q.shape.empty()) q.shape = t->shape;
    if (front) {
      q.queue.push_front(t->id);
    } else {
      q.queue.push_back(t->id);
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
  //     a lease for it may still come.
  void Pump(ShapeQueue& q) {
    for (auto& w : q.workers) {
      if (q.queue.empty()) break;
      if (!w->in_flight.empty()) continue;
      std::string id = q.queue.front();
      q.queue.pop_front();
      Push(q, *w, id);
    }
    int wanted = static_cast<int>(std::min<size_t>(
        q.queue.size(), static_cast<size_t>(kMaxPendingLeaseRequests)));
    while (q.pending_lease_requests < wanted && !local_agent_.empty()) {
      RequestLease(q, local_agent_, {}, /*no_spillback=*/false);
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
      std::string id = q.queue.front();
      q.queue.pop_front();
      Push(q, *best, id);
    }
  }

  void Push(ShapeQueue& q, LeasedWorker& w, const std::string& task_id) {
    auto it = tasks_.find(task_id);
    if (it == tasks_.end()) return;
    TaskEntry& t = *it->second;
    proto::TaskSpec spec;
    FillSpec(t, w.node_id, &spec);
    w.in_flight.push_back(t.id);
    std::string key = t.shape_key;
    std::string lease = w.lease_id;
    w.channel->Call(proto::PUSH_TASK, spec.SerializeAsString(),
                    [this, key, lease, task_id](absl::StatusOr<std::string> r) {
                      OnTaskReply(key, lease, task_id, std::move(r));
                    });
  }

  // The spec of task `t` for a worker on `node_id` (which will pull its
  // stored arguments: freed there too, and a source for later pulls).
  void FillSpec(const TaskEntry& t, const std::string& node_id,
                proto::TaskSpec* out) {
    proto::TaskSpec& spec = *out;
    spec.set_task_id(t.id);
    spec.set_function_name(t.function);
    for (const auto& v : t.values) spec.add_args(v);
    if (!t.stored.empty()) {
      std::lock_guard<std::mutex> lock(obj_mu_);
      for (const auto& [index, object] : t.stored) {
        (*spec.mutable_stored_args())[index] = object;
        // The worker's node pulls a copy: free it there too, and let later
        // pulls fall back on it.
        auto it = objects_.find(object.object_id());
        if (it == objects_.end() || node_id.empty()) continue;
        it->second.copy_nodes.insert(node_id);
        auto transfer = transfer_of_node_.find(node_id);
        if (transfer != transfer_of_node_.end() && !transfer->second.empty()) {
          AddSource(&it->second.stored_object, node_id, transfer->second);
        }
      }
    }
    spec.set_attempt(t.attempt);
    spec.set_result_id(t.id);
    spec.set_owner(owner_);
    spec.set_inline_threshold(threshold_);
    spec.set_depth(t.depth);
  }

  LeasedWorker* FindWorker(ShapeQueue& q, const std::string& lease_id) {
    for (auto& w : q.workers) {
      if (w->lease_id == lease_id) return w.get();
    }
    return nullptr;
  }

  void OnTaskReply(const std::string& key, const std::string& lease_id,
                   const std::string& task_id,
                   absl::StatusOr<std::string> reply) {
    ShapeQueue& q = shapes_[key];
    LeasedWorker* w = FindWorker(q, lease_id);
    SHOAL_LOG(DEBUG) << "reply for " << task_id << " lease " << lease_id
                     << " worker " << (w != nullptr) << ": "
                     << (reply.ok() ? "ok" : reply.status().ToString());
    if (w == nullptr) return;  // the worker was already declared lost
    if (!reply.ok() &&
        reply.status().code() == absl::StatusCode::kUnavailable) {
      return OnWorkerLost(q, lease_id, task_id, reply.status());
    }
    auto pos = std::find(w->in_flight.begin(), w->in_flight.end(), task_id);
    if (pos != w->in_flight.end()) w->in_flight.erase(pos);
    if (w->in_flight.empty()) w->idle_since_us = MonotonicUs();
    std::string node = w->node_id;
    if (!reply.ok()) {
      ObjectEntry e;
      e.error_kind = ErrorKind::kOther;
      e.error =
          absl::StrCat("task ", task_id, " failed: ", reply.status().message());
      FailTask(task_id, e);
    } else {
      proto::TaskResult result;
      if (!result.ParseFromString(*reply)) {
        ObjectEntry e;
        e.error_kind = ErrorKind::kOther;
        e.error = "malformed task result from worker";
        FailTask(task_id, e);
      } else if (result.ok()) {
        double exec = static_cast<double>(result.exec_us());
        q.avg_exec_us =
            q.avg_exec_us < 0 ? exec : 0.8 * q.avg_exec_us + 0.2 * exec;
        CompleteTask(task_id, std::move(result));
      } else if (result.error_type() == "shoal::ObjectLost") {
        // Runs again once the argument is rebuilt, if it can be.
        std::string why;
        if (!RebuildArgument(task_id, result.lost_object(), &why)) {
          ObjectEntry e;
          e.error_kind = ErrorKind::kObjectLost;
          e.error = absl::StrCat("task ", task_id, " cannot run on node ", node,
                                 ": ", result.error(), "; ", why);
          FailTask(task_id, e);
        }
      } else {
        auto t = tasks_.find(task_id);
        ObjectEntry e;
        e.error_kind = ErrorKind::kRemote;
        e.function = t != tasks_.end() ? t->second->function : "?";
        e.node = node;
        e.remote_message = result.error();
        FailTask(task_id, e);
      }
    }
    Pump(q);
  }

  // A worker's connection broke: the oldest task in flight was running and
  // is charged one retry; the others never started and go back to the queue.
  void OnWorkerLost(ShapeQueue& q, const std::string& lease_id,
                    const std::string& failed_task, const absl::Status& why) {
    auto pos =
        std::find_if(q.workers.begin(), q.workers.end(),
                     [&](const auto& w) { return w->lease_id == lease_id; });
    if (pos == q.workers.end()) return;
    std::unique_ptr<LeasedWorker> w = std::move(*pos);
    q.workers.erase(pos);
    std::deque<std::string> in_flight = std::move(w->in_flight);
    for (auto it = in_flight.rbegin(); it != in_flight.rend(); ++it) {
      if (*it == failed_task) continue;
      auto t = tasks_.find(*it);
      if (t != tasks_.end()) q.queue.push_front(*it);
    }
    std::string worker_id = w->worker_id;
    std::string agent = w->agent_address;
    // The channel is in the middle of failing its calls: free it later.
    rpc::Channel* channel = w->channel.release();
    loop_->Post([channel] { delete channel; });

    proto::GetWorkerExitRequest req;
    req.set_worker_id(worker_id);
    rpc::CallProto<proto::GetWorkerExitReply>(
        AgentChannel(agent), proto::GET_WORKER_EXIT, req,
        [this, failed_task, agent, key = q.shape.DebugString(),
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
            bad_agents_[agent] = MonotonicUs();
            if (local_agent_ == agent) {
              local_agent_.clear();
              SetNodes(ClusterStatusFromNodes());
            }
          }
          auto t = tasks_.find(failed_task);
          if (t != tasks_.end()) {
            TaskEntry& task = *t->second;
            if (task.retries_left > 0) {
              --task.retries_left;
              ++task.attempt;
              SHOAL_LOG(WARNING)
                  << "task " << task.function << " (" << task.id << "): " << how
                  << "; retrying (" << task.retries_left << " retries left)";
              Enqueue(&task, /*front=*/true);
            } else {
              ObjectEntry e;
              e.error_kind = ErrorKind::kWorkerDied;
              e.error = absl::StrCat(
                  "task ", task.function, " (", task.id,
                  ") failed: the worker running it died: ", how, ". It ran ",
                  task.attempt + 1,
                  " time(s); raise SetMaxRetries() or look in the worker's "
                  "log (session folder, logs/worker-*.log)");
              FailTask(task.id, e);
            }
          }
          auto q = shapes_.find(key);
          if (q != shapes_.end()) Pump(q->second);
        },
        5000);
    Pump(q);
  }

  proto::ClusterStatus ClusterStatusFromNodes() const {
    proto::ClusterStatus s;
    for (const auto& n : nodes_) *s.add_nodes() = n;
    return s;
  }

  void RequestLease(ShapeQueue& q, const std::string& agent,
                    std::vector<std::string> excluded, bool no_spillback) {
    ++q.pending_lease_requests;
    proto::RequestLeaseRequest req;
    req.set_job_id(options_.lease_job_id.empty() ? job_id_
                                                 : options_.lease_job_id);
    q.shape.ToProto(req.mutable_shape());
    req.set_binary_path(binary_path_);
    req.set_binary_hash(binary_hash_);
    for (const auto& e : excluded) req.add_excluded_nodes(e);
    req.set_no_spillback(no_spillback);
    // The queue's first task says how deep its tasks are nested (a worker
    // runs tasks of any depth over its life).
    int depth = 0;
    if (!q.queue.empty()) {
      auto front = tasks_.find(q.queue.front());
      if (front != tasks_.end()) depth = front->second->depth;
    }
    req.set_depth(depth);
    std::string key = q.shape.DebugString();
    rpc::CallProto<proto::RequestLeaseReply>(
        AgentChannel(agent), proto::REQUEST_LEASE, req,
        [this, key, agent,
         excluded](absl::StatusOr<proto::RequestLeaseReply> reply) mutable {
          ShapeQueue& q = shapes_[key];
          --q.pending_lease_requests;
          if (!reply.ok()) {
            if (reply.status().code() == absl::StatusCode::kPermissionDenied) {
              return FailQueue(q, ErrorKind::kOther,
                               std::string(reply.status().message()));
            }
            SHOAL_LOG(WARNING) << "lease request to " << agent
                               << " failed: " << reply.status();
            bad_agents_[agent] = MonotonicUs();
            if (local_agent_ == agent) {
              local_agent_.clear();
              SetNodes(ClusterStatusFromNodes());
            }
            // Try again shortly, elsewhere if possible.
            loop_->RunAfter(200, [this, key] {
              RefreshNodes();
              Pump(shapes_[key]);
            });
            return;
          }
          switch (reply->outcome()) {
            case proto::RequestLeaseReply::GRANTED:
              q.consecutive_failures = 0;
              AddWorker(q, agent, *reply);
              break;
            case proto::RequestLeaseReply::SPILLBACK:
              RequestLease(q, reply->spillback_address(), excluded,
                           /*no_spillback=*/true);
              break;
            case proto::RequestLeaseReply::INFEASIBLE:
              FailQueue(q, ErrorKind::kInfeasible, reply->error());
              break;
            case proto::RequestLeaseReply::INVALID:
              FailQueue(q, ErrorKind::kOther, reply->error());
              break;
            default:
              if (++q.consecutive_failures >= kMaxLeaseFailures) {
                FailQueue(
                    q, ErrorKind::kOther,
                    absl::StrCat("cannot start a worker: ", reply->error()));
                q.consecutive_failures = 0;
              }
              break;
          }
          Pump(q);
        });
  }

  void AddWorker(ShapeQueue& q, const std::string& agent,
                 const proto::RequestLeaseReply& reply) {
    if (q.queue.empty()) {
      proto::ReturnLeaseRequest ret;
      ret.set_lease_id(reply.lease_id());
      rpc::CallProto<proto::Empty>(AgentChannel(agent), proto::RETURN_LEASE,
                                   ret, [](absl::StatusOr<proto::Empty>) {});
      return;
    }
    auto w = std::make_unique<LeasedWorker>();
    w->lease_id = reply.lease_id();
    w->worker_id = reply.worker_id();
    w->address = reply.worker_address();
    w->node_id = reply.node_id();
    w->agent_address = agent;
    agent_of_node_[w->node_id] = agent;
    w->channel = std::make_unique<rpc::Channel>(
        loop_.get(), w->address, options_.token, "driver " + job_id_);
    w->idle_since_us = MonotonicUs();
    q.workers.push_back(std::move(w));
  }

  // Returns leases idle for lease_idle_ms; at once when tasks of another
  // shape are waiting for a lease (an idle lease of ours may be what holds
  // the resources they need).
  void ReturnIdleLeases() {
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
          proto::ReturnLeaseRequest req;
          req.set_lease_id(w.lease_id);
          rpc::CallProto<proto::Empty>(AgentChannel(w.agent_address),
                                       proto::RETURN_LEASE, req,
                                       [](absl::StatusOr<proto::Empty>) {});
          it = q.workers.erase(it);
        } else {
          ++it;
        }
      }
    }
  }

  void FailQueue(ShapeQueue& q, ErrorKind kind, const std::string& error) {
    std::deque<std::string> queue = std::move(q.queue);
    q.queue.clear();
    ObjectEntry e;
    e.error_kind = kind;
    e.error = error;
    for (const auto& id : queue) FailTask(id, e);
  }

  // `id` is a copy: the task entry that may hold it is erased here.
  void CompleteTask(std::string id, proto::TaskResult result) {
    std::unique_ptr<TaskEntry> done;
    if (auto t = tasks_.find(id); t != tasks_.end()) {
      done = std::move(t->second);
      tasks_.erase(t);
    }
    bool keep_lineage = false;
    {
      std::lock_guard<std::mutex> lock(obj_mu_);
      auto it = objects_.find(id);
      if (it != objects_.end()) {
        ObjectEntry& e = it->second;
        if (result.has_stored()) {
          e.stored = true;
          e.stored_object = std::move(*result.mutable_stored());
          for (const auto& source : e.stored_object.sources()) {
            e.copy_nodes.insert(source.node_id());
          }
        } else {
          e.stored = false;
          e.value = std::make_shared<const std::string>(
              std::move(*result.mutable_value()));
        }
        if (e.released && dependents_.count(id) == 0) {
          ForgetLocked(it);
        } else {
          e.state = ObjectEntry::State::kReady;
          keep_lineage = e.stored;
        }
      }
      if (waiters_ > 0) obj_cv_.notify_all();
    }
    // The task that made a stored object can make it again if every copy
    // is lost; it (and the arguments it holds) is kept while the object is.
    // (An actor call is not run again: the actor's state has moved on.)
    if (keep_lineage && done != nullptr && done->actor_id.empty()) {
      lineage_[id] = std::move(done);
    }
    done.reset();
    ResolveDependents(id);
  }

  // Every copy of stored object `id` (as `failed` described it) is gone.
  // Starts running the task that made it again; false, with *why, when it
  // cannot be rebuilt.
  bool Reconstruct(const std::string& id, const proto::StoredObject& failed,
                   std::string* why) {
    {
      std::lock_guard<std::mutex> lock(obj_mu_);
      auto it = objects_.find(id);
      if (it == objects_.end()) {
        *why = "it was released";
        return false;
      }
      const ObjectEntry& e = it->second;
      if (e.state == ObjectEntry::State::kPending) return true;  // rebuilding
      if (e.stored &&
          e.stored_object.SerializeAsString() != failed.SerializeAsString()) {
        return true;  // rebuilt, or copied elsewhere, since that attempt
      }
    }
    auto l = lineage_.find(id);
    if (l == lineage_.end()) {
      *why =
          "it was made by shoal::Put (not by a task), so nothing can rebuild "
          "it";
      return false;
    }
    TaskEntry& t = *l->second;
    if (t.retries_left <= 0) {
      *why = absl::StrCat("the task that made it (", t.function,
                          ") has no retries left to rebuild it; raise "
                          "SetMaxRetries() to let Shoal re-run it");
      return false;
    }
    --t.retries_left;
    ++t.attempt;
    SHOAL_LOG(WARNING) << "object " << id
                       << " was lost with every node that held it; "
                          "rebuilding it by running "
                       << t.function << " again (" << t.retries_left
                       << " retries left)";
    std::unique_ptr<TaskEntry> task = std::move(l->second);
    lineage_.erase(l);
    {
      std::lock_guard<std::mutex> lock(obj_mu_);
      ObjectEntry& e = objects_[id];
      e.state = ObjectEntry::State::kPending;
      e.stored = false;
      e.stored_object.Clear();
    }
    OnSubmit(std::move(task));
    return true;
  }

  // A worker could not get argument `lost` of task `task_id` from any node:
  // rebuilds it and runs the task once it is back. False, with *why, when
  // it cannot be rebuilt.
  bool RebuildArgument(const std::string& task_id, const std::string& lost,
                       std::string* why) {
    auto t = tasks_.find(task_id);
    if (t == tasks_.end()) {
      *why = "the task is gone";
      return false;
    }
    proto::StoredObject failed;
    {
      std::lock_guard<std::mutex> lock(obj_mu_);
      auto it = objects_.find(lost);
      if (it != objects_.end()) failed = it->second.stored_object;
    }
    if (!Reconstruct(lost, failed, why)) return false;
    TaskEntry& task = *t->second;
    bool pending = false;
    {
      std::lock_guard<std::mutex> lock(obj_mu_);
      auto it = objects_.find(lost);
      pending = it == objects_.end() ||
                it->second.state == ObjectEntry::State::kPending;
      for (size_t i = 0; i < task.args.size(); ++i) {
        if (task.args[i].ref == nullptr || task.args[i].ref->id() != lost) {
          continue;
        }
        if (pending) {
          ++task.deps_pending;
        } else {
          SetArg(task, i, it->second);
        }
      }
    }
    if (pending) {
      dependents_[lost].push_back(task_id);
    } else {
      Enqueue(&task, /*front=*/true);
    }
    return true;
  }

  // Frees a released stored object on every node that holds a copy.
  void FreeStored(const std::string& id, const std::set<std::string>& nodes) {
    lineage_.erase(id);
    proto::ObjectRequest req;
    req.set_object_id(id);
    for (const std::string& node : nodes) {
      auto agent = agent_of_node_.find(node);
      if (agent == agent_of_node_.end()) continue;
      rpc::CallProto<proto::Empty>(
          AgentChannel(agent->second), proto::OBJECT_DELETE, req,
          [](absl::StatusOr<proto::Empty>) {}, 10000);
    }
  }

  void FailTask(std::string id, const ObjectEntry& error) {
    if (auto t = tasks_.find(id); t != tasks_.end()) {
      std::string actor = t->second->actor_id;
      tasks_.erase(t);
      if (!actor.empty()) actors_.Drop(actor, id);
    }
    {
      std::lock_guard<std::mutex> lock(obj_mu_);
      auto it = objects_.find(id);
      if (it != objects_.end()) {
        ObjectEntry& e = it->second;
        e.state = ObjectEntry::State::kFailed;
        e.error_kind = error.error_kind;
        e.error = error.error_kind == ErrorKind::kRemote
                      ? absl::StrCat(error.function, " raised on node ",
                                     error.node, ": ", error.remote_message)
                      : error.error;
        e.function = error.function;
        e.node = error.node;
        e.remote_message = error.remote_message;
      }
      if (waiters_ > 0) obj_cv_.notify_all();
    }
    ResolveDependents(id);
  }

  void ResolveDependents(const std::string& object_id) {
    auto deps = dependents_.find(object_id);
    if (deps == dependents_.end()) return;
    std::vector<std::string> waiting = std::move(deps->second);
    dependents_.erase(deps);
    ObjectEntry entry;
    {
      std::lock_guard<std::mutex> lock(obj_mu_);
      auto it = objects_.find(object_id);
      if (it != objects_.end()) {
        entry = it->second;
        if (it->second.released) ForgetLocked(it);
      }
    }
    for (const auto& task_id : waiting) {
      auto t = tasks_.find(task_id);
      if (t == tasks_.end()) continue;
      TaskEntry* task = t->second.get();
      if (entry.state != ObjectEntry::State::kReady) {
        FailTask(task_id, entry);
        continue;
      }
      for (size_t i = 0; i < task->args.size(); ++i) {
        if (task->args[i].ref && task->args[i].ref->id() == object_id) {
          SetArg(*task, i, entry);
          --task->deps_pending;
        }
      }
      if (task->deps_pending == 0) Enqueue(task);
    }
  }

  RuntimeOptions options_;
  std::unique_ptr<rpc::EventLoop> loop_;
  const std::string prefix_;
  std::atomic<uint64_t> next_id_{1};
  std::string job_id_;
  std::string owner_;  // names this process as objects' owner
  // This node's object store (null when the host has no agent with one)
  // and the size from which values go there.
  std::shared_ptr<ObjectClient> store_;
  std::string store_error_;
  uint64_t threshold_ = InlineThresholdBytes();
  std::string binary_path_;
  std::string binary_hash_;
  // Made by Start(), closed on the loop by Shutdown(); blocking calls from
  // any thread but the loop, asynchronous ones from the loop.
  std::unique_ptr<rpc::HeadClient> head_;

  // Object table (any thread).
  std::mutex obj_mu_;
  std::condition_variable obj_cv_;
  std::unordered_map<std::string, ObjectEntry> objects_;
  // Every live handle, for refs unpacked from values.
  std::unordered_map<std::string, std::weak_ptr<RefHandle>> handles_;
  int waiters_ = 0;
  // Constructor arguments of the actors this process made, kept for their
  // restarts.
  std::vector<std::shared_ptr<RefHandle>> actor_arg_refs_;
  std::atomic<int> blocked_threads_{0};

  // Loop-thread state.
  std::map<std::string, std::unique_ptr<rpc::Channel>> agents_;
  std::vector<proto::NodeInfo> nodes_;
  std::string local_agent_;
  std::map<std::string, int64_t> bad_agents_;
  std::unordered_map<std::string, std::unique_ptr<TaskEntry>> tasks_;
  std::unordered_map<std::string, std::vector<std::string>> dependents_;
  // Tasks that made stored objects still referenced, by object id.
  std::unordered_map<std::string, std::unique_ptr<TaskEntry>> lineage_;
  // Refs inside each object's value, by object id: kept while it lives.
  std::unordered_map<std::string, std::vector<std::shared_ptr<RefHandle>>>
      contained_;
  std::map<std::string, std::string> agent_of_node_;     // node id -> address
  std::map<std::string, std::string> transfer_of_node_;  // -> transfer port
  std::map<std::string, ShapeQueue> shapes_;
  ActorSubmitter actors_;
  int64_t maintenance_ticks_ = 0;
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
