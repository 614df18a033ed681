// Shoal's C++ API: remote tasks, objects and the cluster, in the manner of
// Ray's core API.
//
//   int Add(int a, int b) { return a + b; }
//   SHOAL_REMOTE(Add);
//
//   int main() {
//     shoal::Init();  // SHOAL_ADDRESS, else a local cluster
//     auto sum = shoal::Task(Add).Remote(1, 2);
//     auto more = shoal::Task(Add).SetResource("CPU", 0.5).Remote(sum, 10);
//     std::cout << shoal::Get(more) << "\n";  // 13
//     shoal::Shutdown();
//   }
//
// The program's binary is re-executed by node agents as its workers: worker
// mode is chosen by the runtime before main() runs, so main() stays the
// driver's.
//
// Threading: every function may be called from any thread after Init().
#ifndef SHOAL_API_H_
#define SHOAL_API_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "shoal/buffer.h"
#include "shoal/internal/actor_invoke.h"
#include "shoal/internal/runtime.h"
#include "shoal/serialization.h"

namespace shoal {

// Init() finds its cluster as every `shoal` command does:
//  - address: `address`, else SHOAL_ADDRESS, else the cluster that
//    `shoal start` started from this host's temp dir (`temp_dir`, else
//    SHOAL_TEMP_DIR, else /tmp/shoal) when one is running there, else a new
//    local cluster of this program's own (a head and a node agent as child
//    processes, stopped by Shutdown() or at exit), as ray.init() does;
//  - token: `token`, else SHOAL_TOKEN, else that cluster's session folder on
//    this host.
struct InitOptions {
  std::string address;
  std::string token;
  // Where to look for a running cluster and to put a local cluster's session
  // folder; the local cluster's CPUs (default: this host's) and extra
  // resources.
  std::string temp_dir;
  double num_cpus = -1;
  std::map<std::string, double> resources;
};

void Init();
void Init(const InitOptions& options);
// Returns leases, disconnects, and stops the local cluster if Init started
// one. Objects and refs are invalid afterwards.
void Shutdown();
bool IsInitialized();

// Base of every error the API throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The remote function threw.
class RemoteError : public Error {
 public:
  RemoteError(std::string function, std::string node, std::string message);
  const std::string& function_name() const { return function_; }
  const std::string& node_id() const { return node_; }
  const std::string& remote_message() const { return message_; }

 private:
  std::string function_, node_, message_;
};

// The worker running the task died (crash, kill -9) on every attempt.
class WorkerDiedError : public Error {
 public:
  using Error::Error;
};

// No node of the cluster can ever run the task's resource request.
class InfeasibleError : public Error {
 public:
  using Error::Error;
};

// Get or Wait ran out of time.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// Every copy of a stored object was on nodes that died, and it could not be
// rebuilt (the task that made it is not retriable, or it was put, not
// computed). The message names the object and the nodes.
class ObjectLostError : public Error {
 public:
  using Error::Error;
};

template <typename T>
class ObjectRef {
 public:
  ObjectRef() = default;
  explicit ObjectRef(std::shared_ptr<internal::RefHandle> handle)
      : handle_(std::move(handle)) {}
  const std::string& id() const { return handle_->id(); }
  bool valid() const { return handle_ != nullptr; }
  const std::shared_ptr<internal::RefHandle>& handle() const { return handle_; }
  bool operator==(const ObjectRef& other) const {
    return handle_ == other.handle_;
  }

 private:
  std::shared_ptr<internal::RefHandle> handle_;
};

}  // namespace shoal

// An ObjectRef inside a value (a struct member, a vector of refs) is its
// object id; the object made of the value keeps the referred objects alive.
namespace msgpack {
MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS) {
  namespace adaptor {

  template <typename T>
  struct pack<shoal::ObjectRef<T>> {
    template <typename Stream>
    packer<Stream>& operator()(packer<Stream>& o,
                               const shoal::ObjectRef<T>& ref) const {
      if (!ref.valid()) return o.pack_nil();
      shoal::internal::RefCapture::Note(ref.handle());
      return o.pack(ref.id());
    }
  };

  template <typename T>
  struct convert<shoal::ObjectRef<T>> {
    const msgpack::object& operator()(const msgpack::object& o,
                                      shoal::ObjectRef<T>& ref) const {
      if (o.type == msgpack::type::NIL) {
        ref = shoal::ObjectRef<T>();
        return o;
      }
      if (o.type != msgpack::type::STR) throw msgpack::type_error();
      ref = shoal::ObjectRef<T>(shoal::internal::HandleFor(
          std::string(o.via.str.ptr, o.via.str.size)));
      return o;
    }
  };

  }  // namespace adaptor
}  // MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS)
}  // namespace msgpack

namespace shoal {

template <typename T>
struct WaitResult {
  std::vector<ObjectRef<T>> ready;
  std::vector<ObjectRef<T>> not_ready;
};

// ---- Objects ----
//
// Values whose serialized size reaches the inline threshold (100 KiB; the
// SHOAL_INLINE_THRESHOLD_BYTES variable changes it) go into the object store
// of this process's node; smaller ones stay in the memory of the process
// that made them (their owner). Task arguments and results follow the same
// rule. An object lives while a reference to it does (ObjectRef copies here,
// and refs held by pending tasks); then it is freed on every node.

template <typename T>
ObjectRef<std::decay_t<T>> Put(const T& value) {
  internal::RefCapture refs;
  internal::ObjectValue packed = internal::PackValue(value);
  return ObjectRef<std::decay_t<T>>(
      internal::PutObject(std::move(packed), refs.Take()));
}

// Puts `size` raw bytes, copied once into shared memory. Get it back as a
// shoal::Buffer, which maps it without a copy.
inline ObjectRef<Buffer> PutBuffer(const void* data, size_t size) {
  return Put(Buffer(data, size, nullptr));
}

// timeout_ms < 0 waits as long as it takes. For ObjectRef<Buffer> the result
// points into the node's shared memory (pulled to this node first when the
// object is elsewhere) and keeps the object alive.
template <typename T>
T Get(const ObjectRef<T>& ref, int64_t timeout_ms = -1) {
  internal::ObjectValue value = internal::GetObject(*ref.handle(), timeout_ms);
  if constexpr (!std::is_void_v<T>) return internal::UnpackValue<T>(value);
}

template <typename T>
std::vector<T> Get(const std::vector<ObjectRef<T>>& refs,
                   int64_t timeout_ms = -1) {
  std::vector<T> out;
  out.reserve(refs.size());
  for (const auto& ref : refs) out.push_back(Get(ref, timeout_ms));
  return out;
}

template <typename T>
WaitResult<T> Wait(const std::vector<ObjectRef<T>>& refs, size_t num_ready,
                   int64_t timeout_ms = -1) {
  std::vector<const internal::RefHandle*> handles;
  for (const auto& r : refs) handles.push_back(r.handle().get());
  std::vector<size_t> ready =
      internal::WaitReady(handles, num_ready, timeout_ms);
  WaitResult<T> result;
  std::vector<bool> is_ready(refs.size(), false);
  for (size_t i : ready) is_ready[i] = true;
  for (size_t i = 0; i < refs.size(); ++i) {
    (is_ready[i] ? result.ready : result.not_ready).push_back(refs[i]);
  }
  return result;
}

// ---- Tasks ----

namespace internal {

template <typename T>
struct IsObjectRef : std::false_type {};
template <typename T>
struct IsObjectRef<ObjectRef<T>> : std::true_type {};

template <typename Param, typename Arg>
TaskArg MakeTaskArg(Arg&& arg) {
  using A = std::decay_t<Arg>;
  using P = std::decay_t<Param>;
  TaskArg out;
  if constexpr (IsObjectRef<A>::value) {
    out.ref = arg.handle();
  } else {
    static_assert(std::is_constructible_v<P, Arg&&>,
                  "argument does not convert to the remote function's "
                  "parameter type");
    RefCapture refs;
    out.value = PackValue(P(std::forward<Arg>(arg)));
    out.contained = refs.Take();
  }
  return out;
}

template <typename ParamTuple, size_t... I, typename... Args>
std::vector<TaskArg> MakeTaskArgsImpl(std::index_sequence<I...>,
                                      Args&&... args) {
  std::vector<TaskArg> out;
  out.reserve(sizeof...(Args));
  (out.push_back(MakeTaskArg<std::tuple_element_t<I, ParamTuple>>(
       std::forward<Args>(args))),
   ...);
  return out;
}

// The arguments of a call whose parameters are `ParamTuple`'s types.
template <typename ParamTuple, typename... Args>
std::vector<TaskArg> MakeTaskArgs(Args&&... args) {
  return MakeTaskArgsImpl<ParamTuple>(std::index_sequence_for<Args...>{},
                                      std::forward<Args>(args)...);
}

template <typename R, typename... Params, size_t... I>
ObjectValue InvokeWithArgs(R (*fn)(Params...),
                           const std::vector<ObjectValue>& args,
                           std::index_sequence<I...>) {
  if constexpr (std::is_void_v<R>) {
    fn(UnpackValue<std::decay_t<Params>>(args[I])...);
    return ObjectValue::Owned(PackNil());
  } else {
    return PackValue(fn(UnpackValue<std::decay_t<Params>>(args[I])...));
  }
}

template <typename R, typename... Params>
Invoker MakeInvoker(R (*fn)(Params...)) {
  return [fn](const std::vector<ObjectValue>& args) -> ObjectValue {
    if (args.size() != sizeof...(Params)) {
      throw std::invalid_argument(
          "expects " + std::to_string(sizeof...(Params)) + " arguments, got " +
          std::to_string(args.size()));
    }
    return InvokeWithArgs(fn, args, std::index_sequence_for<Params...>{});
  };
}

std::vector<std::string> SplitFunctionNames(const char* names);

// A free function is a remote function; one returning a pointer to a class
// is an actor factory; a member function is an actor method.
template <typename Fn>
void RegisterOne(const std::string& name, Fn fn) {
  if constexpr (std::is_member_function_pointer_v<Fn>) {
    RegisterActorMethod(name, MethodKey(fn), MakeMethodInvoker(fn));
  } else if constexpr (IsActorFactory<Fn>::value) {
    RegisterActorFactory(name, reinterpret_cast<const void*>(fn),
                         MakeFactoryInvoker(fn));
  } else {
    RegisterFunction(name, reinterpret_cast<const void*>(fn), MakeInvoker(fn));
  }
}

template <typename... Fns>
bool RegisterFunctions(const char* names, Fns... fns) {
  std::vector<std::string> split = SplitFunctionNames(names);
  size_t i = 0;
  (RegisterOne(split.at(i++), fns), ...);
  return true;
}

}  // namespace internal

// ---- Placement groups ----

enum class PlacementStrategy { kPack, kSpread, kStrictPack, kStrictSpread };

// How long a placement group (or, later, an actor) lives: with the job
// (the driver that created it) by default, as in Ray, or until removed.
enum class Lifetime { kNonDetached, kDetached };

struct PlacementGroupOptions {
  std::string name;  // optional; GetPlacementGroup(name) finds it
  // Each bundle's resources, e.g. {{"CPU", 1}, {"TPU", 4}}.
  std::vector<std::map<std::string, double>> bundles;
  PlacementStrategy strategy = PlacementStrategy::kPack;
  // kNonDetached: removed when the job that created it ends (its driver
  // exits, however it exits). kDetached: only by RemovePlacementGroup.
  Lifetime lifetime = Lifetime::kNonDetached;
};

// A set of resource bundles reserved together on the cluster's nodes: all
// bundles or none (prepared on every node, then committed).
class PlacementGroup {
 public:
  PlacementGroup() = default;
  PlacementGroup(std::string id, std::string name, size_t bundle_count)
      : id_(std::move(id)), name_(std::move(name)), bundles_(bundle_count) {}
  const std::string& id() const { return id_; }
  const std::string& name() const { return name_; }
  size_t bundle_count() const { return bundles_; }
  // True once every bundle is reserved; false if timeout_ms passes first
  // (timeout_ms < 0 waits as long as it takes). Throws
  // shoal::InfeasibleError when the group can never be placed.
  bool Wait(int64_t timeout_ms) const;
  // The node id of each bundle (empty until the group is created).
  std::vector<std::string> BundleNodes() const;

 private:
  std::string id_, name_;
  size_t bundles_ = 0;
};

PlacementGroup CreatePlacementGroup(const PlacementGroupOptions& options);

// Every host of a TPU slice reserved as one gang (a STRICT_SPREAD group with
// one whole-host bundle per worker, bundle i on TPU worker i).
struct SliceReservation {
  PlacementGroup group;
  std::string slice_name;
  std::string accelerator_type;  // "v5p-16"
  int chips_per_host = 0;
  std::vector<std::string> hosts;  // node ids, in TPU worker-id order
};
// Reserves slice `slice_name` (empty: the cluster's only slice). Throws
// shoal::Error when the slice is unknown or not all its hosts have joined,
// shoal::TimeoutError when timeout_ms (>= 0) passes first.
SliceReservation ReserveTpuSlice(const std::string& slice_name = "",
                                 int64_t timeout_ms = -1);
// Releases the bundles; tasks still running in them are stopped.
void RemovePlacementGroup(const PlacementGroup& group);
// The live group with this name, if any.
std::optional<PlacementGroup> GetPlacementGroup(const std::string& name);

template <typename F>
class TaskCaller;

template <typename R, typename... Params>
class TaskCaller<R (*)(Params...)> {
 public:
  using Fn = R (*)(Params...);
  explicit TaskCaller(Fn fn) : fn_(fn) {}

  // Resources one run of the task holds (default {"CPU": 1}). CPU may be
  // fractional; other resources are whole numbers, or a fraction below 1.
  TaskCaller& SetResource(const std::string& name, double amount) {
    options_.resources[name] = amount;
    return *this;
  }
  TaskCaller& SetResources(const std::map<std::string, double>& resources) {
    for (const auto& [k, v] : resources) options_.resources[k] = v;
    return *this;
  }
  // Runs the task in bundle `bundle_index` of `group`: the resources it asks
  // for are taken from that bundle's reservation.
  // Throws shoal::Error at once for a bundle index the group does not have.
  TaskCaller& SetPlacementGroup(const PlacementGroup& group, int bundle_index) {
    internal::CheckBundleIndex(group.id(), group.bundle_count(), bundle_index);
    options_.placement_group_id = group.id();
    options_.bundle_index = bundle_index;
    return *this;
  }
  // Attempts after a worker death (default 3). An exception thrown by the
  // function is not retried.
  TaskCaller& SetMaxRetries(int retries) {
    options_.max_retries = retries;
    return *this;
  }

  template <typename... Args>
  ObjectRef<R> Remote(Args&&... args) {
    static_assert(sizeof...(Args) == sizeof...(Params),
                  "Remote() takes as many arguments as the function");
    return ObjectRef<R>(internal::SubmitTask(
        internal::FunctionName(reinterpret_cast<const void*>(fn_)),
        internal::MakeTaskArgs<std::tuple<Params...>>(
            std::forward<Args>(args)...),
        options_));
  }

 private:
  Fn fn_;
  internal::TaskOptions options_;
};

template <typename R, typename... Params>
TaskCaller<R (*)(Params...)> Task(R (*fn)(Params...)) {
  return TaskCaller<R (*)(Params...)>(fn);
}

// ---- Launch modes ----

// Device-centric launch on this host (what torch_xla.launch does): starts one
// process per device this process holds (all chips of a TPU host, all GPUs;
// on a host without accelerators, SHOAL_NUM_CPU_DEVICES stand-ins, default
// 1), each a re-execution of this binary running fn(local_index, args...)
// with exactly one device visible and the variables of PyTorch/XLA, torch
// and Shoal set. Waits for all and returns their results in local-rank
// order. If one fails, the others are stopped and shoal::Error names it.
template <typename R, typename... Params, typename... Args>
std::vector<R> Launch(R (*fn)(int, Params...), Args&&... args) {
  static_assert(sizeof...(Args) == sizeof...(Params),
                "Launch() passes as many arguments as fn takes after its "
                "local index");
  std::vector<std::string> packed;
  (packed.push_back(
       internal::Pack(std::decay_t<Params>(std::forward<Args>(args)))),
   ...);
  std::vector<std::string> results = internal::LaunchPerDevice(
      internal::FunctionName(reinterpret_cast<const void*>(fn)), packed);
  std::vector<R> out;
  for (const auto& r : results) out.push_back(internal::Unpack<R>(r));
  return out;
}

// Inside a process started by Launch or `shoal launch --per-device`: the
// device it drives and its place in the gang.
struct DeviceContext {
  std::string kind;     // "TPU", "GPU", "CPU"
  int local_index = 0;  // always 0: each process sees one device
  int device_id = -1;   // the chip or GPU id on its host
  int local_rank = 0;
  int global_rank = 0;
  int world_size = 1;
};
DeviceContext CurrentDevice();

namespace spmd {

// Host-centric (multi-controller JAX) view of this process: one process per
// host driving every device of the host.
struct ProcessInfo {
  int process_id = 0;  // dense 0..n-1, TPU hosts in worker-id order
  int process_count = 1;
  int local_device_count = 0;
  int global_device_count = 0;      // 8 on each host of a v5p-16
  std::string coordinator_address;  // host:port of process 0
};

// Reads what `shoal launch --per-host` set (SHOAL_PROCESS_ID, ...), or, in a
// task that holds a whole TPU host, derives it from the slice (TPU_WORKER_ID,
// TPU_WORKER_HOSTNAMES).
ProcessInfo Initialize();

}  // namespace spmd

// ---- The cluster ----

struct NodeInfo {
  std::string node_id;
  std::string address;
  std::string hostname;
  bool alive = false;
  bool is_head_node = false;
  std::map<std::string, double> total;
  std::map<std::string, double> available;
  std::map<std::string, std::string> labels;
};

// In a worker: the node it runs on; in a driver: "" (it is no node's).
std::string CurrentNodeId();

// The accelerator devices this process holds (a worker whose task asked for
// TPU or GPU). The node agent gives each holder distinct devices and sets the
// variables its framework reads (TPU_VISIBLE_CHIPS and the bounds variables,
// CUDA_VISIBLE_DEVICES).
struct AssignedDevices {
  std::string kind;              // "TPU", "GPU"; "" when it holds none
  std::vector<int> ids;          // device ids on its node
  std::string accelerator_type;  // "TPU-V5P", "H200"
  std::string slice_name;        // TPU slice (TPU_NAME), if any
  int worker_id = -1;            // TPU worker id of its host, if any
};
AssignedDevices GetAssignedDevices();

// Totals and free amounts over alive nodes.
std::map<std::string, double> ClusterResources();
std::map<std::string, double> AvailableResources();
std::vector<NodeInfo> Nodes();

}  // namespace shoal

#include "shoal/actor.h"  // IWYU pragma: export

// Registers free functions as remote functions by name, and actors'
// factories and methods:
//   SHOAL_REMOTE(Add, Multiply);
//   SHOAL_REMOTE(CreateCounter, &Counter::Add, &Counter::Get);
// Use it at namespace scope, once per function, in any source file of the
// program.
#define SHOAL_REMOTE_CONCAT_INNER(a, b) a##b
#define SHOAL_REMOTE_CONCAT(a, b) SHOAL_REMOTE_CONCAT_INNER(a, b)
#define SHOAL_REMOTE(...)                                 \
  [[maybe_unused]] static const bool SHOAL_REMOTE_CONCAT( \
      shoal_remote_registered_, __COUNTER__) =            \
      ::shoal::internal::RegisterFunctions(#__VA_ARGS__, __VA_ARGS__)

#endif  // SHOAL_API_H_
