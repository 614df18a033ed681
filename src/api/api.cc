// shoal::Init and friends: the process-wide runtime and the local cluster.
#include "shoal/api.h"

#include <cxxabi.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <typeinfo>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "api/cluster_status.h"
#include "api/core_runtime.h"
#include "api/driver_init.h"
#include "api/local_cluster.h"
#include "api/task_error.h"
#include "api/tpu_slices.h"
#include "common/environment.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "common/random.h"
#include "common/session.h"
#include "head_client/head_client.h"
#include "scheduling/label_selector.h"
#include "scheduling/resource_set.h"
#include "shoal/shoal.pb.h"

namespace shoal {
namespace {

shoal::Mutex g_mu;
std::shared_ptr<internal::CoreRuntime> g_runtime ABSL_GUARDED_BY(g_mu);
std::unique_ptr<internal::LocalClusterProcesses> g_local_cluster
    ABSL_GUARDED_BY(g_mu);
bool g_atexit_registered ABSL_GUARDED_BY(g_mu) = false;

std::shared_ptr<internal::CoreRuntime> Runtime() {
  shoal::MutexLock lock(&g_mu);
  return g_runtime;
}

std::terminate_handler g_previous_terminate = nullptr;

// A shoal::Error that the program did not catch ends it as the error it is
// (its message, exit status 1), not as a crash (`terminate called`, abort,
// a core dump); its local cluster ends with it. Anything else goes to the
// handler there was before.
[[noreturn]] void EndOnUncaughtError() {
  if (std::exception_ptr thrown = std::current_exception()) {
    try {
      std::rethrow_exception(thrown);
    } catch (const Error& e) {
      int status = 0;
      char* type =
          abi::__cxa_demangle(typeid(e).name(), nullptr, nullptr, &status);
      const std::string message = absl::StrCat(
          program_invocation_short_name, ": uncaught ",
          status == 0 && type != nullptr ? type : "shoal::Error", ": ",
          e.what(),
          "\n(catch shoal::Error around the call that threw to handle it)\n");
      fflush(stdout);  // what the program printed first
      ssize_t ignored = write(STDERR_FILENO, message.data(), message.size());
      (void)ignored;
      _exit(1);
    } catch (...) {
    }
  }
  if (g_previous_terminate != nullptr) g_previous_terminate();
  abort();
}

}  // namespace

namespace internal {
std::shared_ptr<CoreRuntime> RequireRuntime() {
  auto rt = Runtime();
  if (rt == nullptr) {
    // A worker that submits tasks joins the cluster it runs in.
    if (env::Get(env::Var::kRole) == "worker") {
      Init();
      rt = Runtime();
    }
  }
  if (rt == nullptr) {
    throw Error("Shoal is not initialized: call shoal::Init() first");
  }
  return rt;
}

int CancelChildrenHere(int32_t parent_token, bool force) {
  std::shared_ptr<CoreRuntime> rt = Runtime();
  return rt == nullptr ? 0 : rt->CancelChildren(parent_token, force);
}
}  // namespace internal

namespace {
using internal::RequireRuntime;

std::map<std::string, double> SumResources(bool available) {
  auto status = RequireRuntime()->ClusterStatus();
  if (!status.ok()) {
    throw Error(
        absl::StrCat("cannot reach the head: ", status.status().message()));
  }
  ResourceSet sum;
  for (const auto& n : status->nodes()) {
    if (!n.alive()) continue;
    sum.Add(WithoutBundleResources(
        ResourceSet::FromProto(available ? n.available() : n.total())));
  }
  return sum.ToDoubles();
}

}  // namespace

RemoteError::RemoteError(std::string function, std::string node,
                         std::string message, std::string error_data)
    : Error(absl::StrCat(function, " raised on node ", node, ": ", message)),
      function_(std::move(function)),
      node_(std::move(node)),
      message_(std::move(message)),
      data_(std::move(error_data)) {}

void Init() { Init(InitOptions()); }

void Init(const InitOptions& options) {
  internal::InitDriver(options, internal::DriverProgram());
}

void internal::InitDriver(const InitOptions& options,
                          const DriverProgram& program) {
  shoal::MutexLock lock(&g_mu);
  if (g_runtime != nullptr) return;
  internal::RuntimeOptions rt;
  rt.head_address = options.address;
  rt.token = options.token;
  rt.workers_run_this_program = program.workers_run_this_program;
  rt.worker_command = program.worker_command;
  rt.cpp_program = program.cpp_program;
  rt.version = program.version;
  if (env::Get(env::Var::kRole) == "worker") {
    rt.worker_id = env::Get(env::Var::kWorkerId);
    rt.worker_agent_address = env::Get(env::Var::kAgentAddress);
    // A task's idle lease holds CPU that its siblings' and parents'
    // children wait for: give it back at once.
    rt.lease_idle_ms = 0;
    rt.lease_job_id = env::Get(env::Var::kJobId);
  }
  std::string temp_dir =
      options.temp_dir.empty() ? DefaultTempDir() : options.temp_dir;
  // The one rule (common/session.h); only when it finds no cluster does a
  // program start its own.
  absl::Status found =
      ResolveClusterAddress(temp_dir, &rt.head_address, &rt.token);
  if (absl::IsNotFound(found) && program.cluster_program.empty() &&
      !program.workers_run_this_program) {
    // This program cannot be a head and agent, and none was given.
    throw Error(std::string(found.message()));
  }
  if (absl::IsNotFound(found)) {
    auto cluster = internal::LocalClusterProcesses::Start(
        program.cluster_program.empty() ? SelfExecutable()
                                        : program.cluster_program,
        temp_dir, options.num_cpus, options.resources, options.dashboard_port);
    if (!cluster.ok()) {
      throw Error(absl::StrCat("cannot start a local cluster: ",
                               cluster.status().message()));
    }
    g_local_cluster = std::move(*cluster);
    rt.head_address = g_local_cluster->head_address();
    rt.token = g_local_cluster->token();
  } else if (!found.ok()) {
    throw Error(std::string(found.message()));
  }
  auto runtime = internal::CoreRuntime::Connect(rt);
  if (!runtime.ok()) {
    g_local_cluster.reset();
    throw Error(absl::StrCat("cannot connect to the cluster at ",
                             rt.head_address, ": ",
                             runtime.status().message()));
  }
  g_runtime = std::move(*runtime);
  if (!g_atexit_registered) {
    g_atexit_registered = true;
    std::atexit([] { Shutdown(); });
    if (rt.worker_id.empty()) {
      g_previous_terminate = std::set_terminate(EndOnUncaughtError);
    }
  }
}

void Shutdown() {
  std::shared_ptr<internal::CoreRuntime> rt;
  std::unique_ptr<internal::LocalClusterProcesses> cluster;
  {
    shoal::MutexLock lock(&g_mu);
    rt = std::move(g_runtime);
    cluster = std::move(g_local_cluster);
  }
  if (rt) rt->Shutdown();
  rt.reset();
  cluster.reset();  // stops the local head and agent
}

bool IsInitialized() { return Runtime() != nullptr; }

std::string CurrentNodeId() {
  std::string role = env::Get(env::Var::kRole);
  if (role != "worker" && role != "launch-child") return "";
  return env::Get(env::Var::kNodeId);
}

AssignedDevices GetAssignedDevices() {
  AssignedDevices out;
  out.kind = env::Get(env::Var::kDeviceKind);
  if (out.kind.empty()) return out;
  for (absl::string_view id :
       absl::StrSplit(env::Get(env::Var::kDeviceIds), ',', absl::SkipEmpty())) {
    int value = 0;
    if (absl::SimpleAtoi(id, &value)) out.ids.push_back(value);
  }
  out.accelerator_type = env::Get(env::Var::kAcceleratorType);
  out.slice_name = env::Get(env::Var::kTpuSliceName);
  out.worker_id =
      static_cast<int>(env::FindInt(env::Var::kTpuWorkerId).value_or(-1));
  return out;
}

std::map<std::string, double> ClusterResources() { return SumResources(false); }
std::map<std::string, double> AvailableResources() {
  return SumResources(true);
}

std::vector<NodeInfo> Nodes() {
  auto status = RequireRuntime()->ClusterStatus();
  if (!status.ok()) {
    throw Error(
        absl::StrCat("cannot reach the head: ", status.status().message()));
  }
  return internal::NodesOf(*status);
}

// ---- Placement groups ----

namespace {

proto::PlacementGroupInfo GetGroupInfo(const std::string& id,
                                       const std::string& name) {
  proto::GetPlacementGroupRequest req;
  req.set_pg_id(id);
  req.set_name(name);
  absl::StatusOr<proto::PlacementGroupInfo> info =
      RequireRuntime()->head().GetPlacementGroup(req);
  if (!info.ok()) throw Error(std::string(info.status().message()));
  return *std::move(info);
}

}  // namespace

PlacementGroup CreatePlacementGroup(const PlacementGroupOptions& options) {
  proto::PlacementGroupSpec spec;
  spec.set_name(options.name);
  spec.set_detached(options.lifetime == Lifetime::kDetached);
  spec.set_strategy(static_cast<proto::PlacementStrategy>(options.strategy));
  for (const auto& bundle : options.bundles) {
    auto shape = ResourceSet::FromDoubles(bundle);
    if (!shape.ok()) {
      throw Error(absl::StrCat("bad placement group bundle: ",
                               shape.status().message()));
    }
    shape->ToProto(spec.add_bundles());
  }
  if (!options.bundle_label_selector.empty() &&
      options.bundle_label_selector.size() != options.bundles.size()) {
    throw Error(absl::StrCat(
        "bundle_label_selector has ", options.bundle_label_selector.size(),
        " selectors for ", options.bundles.size(),
        " bundles; give one per bundle (an empty one for any node)"));
  }
  for (size_t i = 0; i < options.bundle_label_selector.size(); ++i) {
    auto selector = LabelSelector::Parse(options.bundle_label_selector[i]);
    if (!selector.ok()) {
      throw Error(absl::StrCat("bad bundle_label_selector for bundle ", i, ": ",
                               selector.status().message()));
    }
    selector->ToProto(spec.add_bundle_label_selector());
  }
  absl::StatusOr<proto::PlacementGroupInfo> info =
      RequireRuntime()->head().CreatePlacementGroup(spec);
  if (!info.ok()) {
    throw Error(absl::StrCat("cannot create placement group: ",
                             info.status().message()));
  }
  return PlacementGroup(info->pg_id(), options.name, options.bundles.size());
}

bool PlacementGroup::Wait(int64_t timeout_ms) const {
  // timeout_ms < 0: as long as it takes (ten days stand for that here).
  constexpr int64_t kForeverMs = 10LL * 24 * 3600 * 1000;
  int64_t wait_ms =
      timeout_ms < 0 ? kForeverMs : std::min(timeout_ms, kForeverMs);
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  const auto started = std::chrono::steady_clock::now();
  auto pause = std::chrono::milliseconds(5);
  while (true) {
    proto::PlacementGroupInfo info = GetGroupInfo(id_, "");
    switch (info.state()) {
      case proto::PlacementGroupInfo::CREATED:
        return true;
      case proto::PlacementGroupInfo::FAILED:
        throw InfeasibleError(info.error());
      case proto::PlacementGroupInfo::REMOVED:
        throw Error("placement group " + id_ + " was removed");
      default:
        break;
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(pause);
    // Most groups are placed within a round trip or two of the agents:
    // asked often at first, then every 100 ms.
    const bool early =
        std::chrono::steady_clock::now() - started < std::chrono::seconds(2);
    pause = std::min(pause * 2, std::chrono::milliseconds(early ? 10 : 100));
  }
}

std::vector<std::string> PlacementGroup::BundleNodes() const {
  proto::PlacementGroupInfo info = GetGroupInfo(id_, "");
  return {info.bundle_nodes().begin(), info.bundle_nodes().end()};
}

void RemovePlacementGroup(const PlacementGroup& group) {
  proto::GetPlacementGroupRequest req;
  req.set_pg_id(group.id());
  absl::Status st = RequireRuntime()->head().RemovePlacementGroup(req);
  if (!st.ok()) throw Error(std::string(st.message()));
}

std::optional<PlacementGroup> GetPlacementGroup(const std::string& name) {
  proto::GetPlacementGroupRequest req;
  req.set_name(name);
  absl::StatusOr<proto::PlacementGroupInfo> found =
      RequireRuntime()->head().GetPlacementGroup(req);
  if (absl::IsNotFound(found.status())) return std::nullopt;
  if (!found.ok()) throw Error(std::string(found.status().message()));
  const proto::PlacementGroupInfo& info = *found;
  if (info.state() == proto::PlacementGroupInfo::REMOVED ||
      info.state() == proto::PlacementGroupInfo::FAILED) {
    return std::nullopt;
  }
  return PlacementGroup(info.pg_id(), info.spec().name(),
                        info.spec().bundles_size());
}

namespace internal {

absl::StatusOr<proto::ClusterStatus> FetchClusterStatus() {
  return RequireRuntime()->ClusterStatus();
}

void CheckBundleIndex(const std::string& group_id, size_t bundle_count,
                      int bundle_index) {
  if (group_id.empty()) {
    throw Error(
        "SetPlacementGroup: the group was never created; make it with "
        "shoal::CreatePlacementGroup() or find it with GetPlacementGroup()");
  }
  if (bundle_index < -1 ||
      (bundle_index >= 0 &&
       static_cast<size_t>(bundle_index) >= bundle_count)) {
    throw Error(absl::StrCat(
        "bundle index ", bundle_index, " is out of range: placement group ",
        group_id, " has ", bundle_count, " bundle",
        bundle_count == 1 ? "" : "s", " (indices 0 to ",
        static_cast<int64_t>(bundle_count) - 1, ", or -1 for any of them)"));
  }
}

RefHandle::~RefHandle() {
  if (auto rt = Runtime()) rt->Release(id_);
}

std::shared_ptr<RefHandle> SubmitTask(const std::string& function_name,
                                      std::vector<TaskArg> args,
                                      const TaskOptions& options) {
  return ValueOrThrow(
      RequireRuntime()->Submit(function_name, std::move(args), options));
}

std::shared_ptr<RefHandle> PutObject(
    ObjectValue value, std::vector<std::shared_ptr<RefHandle>> contained) {
  return ValueOrThrow(
      RequireRuntime()->Put(std::move(value), std::move(contained)));
}

std::shared_ptr<RefHandle> PutPieces(const std::vector<BufferPiece>& pieces,
                                     size_t size) {
  return ValueOrThrow(RequireRuntime()->PutPieces(pieces, size));
}

namespace {
thread_local RefCapture* current_capture = nullptr;
}  // namespace

RefCapture::RefCapture() : outer_(current_capture) { current_capture = this; }
RefCapture::~RefCapture() { current_capture = outer_; }

void RefCapture::Note(const std::shared_ptr<RefHandle>& handle) {
  if (current_capture != nullptr) current_capture->refs_.push_back(handle);
}

std::shared_ptr<RefHandle> HandleFor(const std::string& id) {
  return ValueOrThrow(RequireRuntime()->HandleFor(id));
}

bool CancelTask(const RefHandle& ref, bool force, bool recursive) {
  return ValueOrThrow(RequireRuntime()->Cancel(ref.id(), force, recursive));
}

ObjectValue GetObject(const RefHandle& ref, int64_t timeout_ms) {
  return ValueOrThrow(RequireRuntime()->Get(ref, timeout_ms));
}

std::vector<size_t> WaitReady(const std::vector<const RefHandle*>& refs,
                              size_t num_ready, int64_t timeout_ms) {
  return RequireRuntime()->Wait(refs, num_ready, timeout_ms);
}

}  // namespace internal
}  // namespace shoal
