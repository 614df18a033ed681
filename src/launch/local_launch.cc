#include "launch/local_launch.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/environment.h"
#include "common/files.h"
#include "common/process.h"
#include "launch/framework_env.h"
#include "shoal/api.h"
#include "shoal/shoal.pb.h"
#include "worker/function_registry.h"

namespace shoal::internal {
namespace {

// The gang this process launches on its host: every host of its TPU slice
// (so global ranks span the slice), else this host alone.
absl::StatusOr<std::pair<launch::LaunchSpec, int>> DescribeGang() {
  AssignedDevices held = GetAssignedDevices();
  launch::LaunchSpec spec;
  spec.mode = launch::LaunchMode::kPerDevice;
  std::string self = env::Get(env::Var::kNodeIp);
  if (self.empty()) self = "127.0.0.1";
  if (held.kind == "TPU") {
    std::vector<std::string> hosts = absl::StrSplit(
        env::Get(env::Var::kTpuWorkerHostnames), ',', absl::SkipEmpty());
    int me = held.worker_id >= 0 ? held.worker_id : 0;
    if (hosts.empty()) hosts.push_back(self);
    for (size_t h = 0; h < hosts.size(); ++h) {
      launch::GangHost host;
      host.address = hosts[h];
      host.kind = launch::DeviceKind::kTpu;
      host.num_devices = static_cast<int>(held.ids.size());
      if (static_cast<int>(h) == me) {
        // Local ids: this process sees only the chips it holds, renumbered
        // as the chip ids of its host.
        host.device_ids = held.ids;
        host.num_devices = 0;
        for (int id : held.ids)
          host.num_devices = std::max(host.num_devices, id + 1);
      }
      host.tpu_accelerator_type = env::Get(env::Var::kTpuAcceleratorType);
      host.tpu_worker_id = static_cast<int>(h);
      spec.hosts.push_back(host);
    }
    return std::make_pair(spec, me);
  }
  launch::GangHost host;
  host.address = self;
  if (held.kind == "GPU") {
    host.kind = launch::DeviceKind::kGpu;
    host.device_ids = held.ids;
    for (int id : held.ids)
      host.num_devices = std::max(host.num_devices, id + 1);
  } else {
    host.kind = launch::DeviceKind::kCpu;
    host.num_devices = static_cast<int>(env::GetInt(env::Var::kNumCpuDevices));
  }
  spec.hosts.push_back(host);
  return std::make_pair(spec, 0);
}

// A temp folder that is removed with everything in it.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/shoal-launch-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) throw Error("cannot make a temp dir");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// One child of the launch: a local rank, running until it exits.
struct Child {
  pid_t pid = 0;  // 0 once it was waited for
  int local_rank = 0;
  int rank = 0;
  std::string result_path;
};

void StopAll(std::vector<Child>& children) {
  for (const Child& c : children) {
    if (c.pid > 0) kill(c.pid, SIGKILL);
  }
  for (Child& c : children) {
    if (c.pid > 0) waitpid(c.pid, nullptr, 0);
    c.pid = 0;
  }
}

// Starts a child per local rank of host `my_host`, each re-executing this
// binary to run the task in `spec_path`. Throws (with every child started
// so far stopped) when one cannot start.
std::vector<Child> StartChildren(
    const std::vector<launch::ProcessEnvironment>& envs, int my_host,
    const std::string& dir, const std::string& spec_path) {
  std::vector<Child> children;
  for (const launch::ProcessEnvironment& p : envs) {
    if (p.node_rank != my_host) continue;
    Child child;
    child.local_rank = p.local_rank;
    child.rank = p.rank;
    child.result_path = absl::StrCat(dir, "/result-", p.local_rank);
    SpawnOptions s;
    s.argv = {SelfExecutable()};
    s.env = p.set;
    s.unset_env = p.unset;
    s.env["SHOAL_ROLE"] = "launch-child";
    s.env["SHOAL_LAUNCH_SPEC"] = spec_path;
    s.env["SHOAL_LAUNCH_RESULT"] = child.result_path;
    s.env["SHOAL_LAUNCH_LOCAL_INDEX"] = std::to_string(p.local_rank);
    auto pid = Spawn(s);
    if (!pid.ok()) {
      StopAll(children);
      throw Error(absl::StrCat("cannot start local rank ", p.local_rank, ": ",
                               pid.status().message()));
    }
    child.pid = *pid;
    children.push_back(child);
  }
  return children;
}

// Waits for every child; the first failure stops the rest (torchrun's rule)
// and is returned, naming the rank; "" when all exited 0. Only our own
// children are waited for: a driver may have others (its local cluster).
std::string WaitForChildren(std::vector<Child>& children) {
  size_t running = children.size();
  while (running > 0) {
    bool progressed = false;
    for (Child& c : children) {
      if (c.pid == 0) continue;
      int status = 0;
      if (waitpid(c.pid, &status, WNOHANG) != c.pid) continue;
      progressed = true;
      c.pid = 0;
      --running;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
      proto::TaskResult result;
      auto text = ReadFile(c.result_path);
      std::string why =
          text.ok() && result.ParseFromString(*text) && !result.error().empty()
              ? result.error()
              : DescribeWaitStatus(status);
      StopAll(children);
      return absl::StrCat("rank ", c.rank, " (local rank ", c.local_rank,
                          ") of the launch failed: ", why,
                          "; the other ranks were stopped");
    }
    if (!progressed) usleep(2000);
  }
  return "";
}

}  // namespace

std::vector<std::string> LaunchPerDevice(const std::string& function_name,
                                         const std::vector<std::string>& args) {
  auto gang = DescribeGang();
  if (!gang.ok()) throw Error(std::string(gang.status().message()));
  auto& [spec, my_host] = *gang;
  auto envs = launch::ComputeLaunchEnvironments(spec);
  if (!envs.ok()) {
    throw Error(absl::StrCat("cannot launch one process per device: ",
                             envs.status().message()));
  }
  TempDir dir;
  proto::TaskSpec task;
  task.set_function_name(function_name);
  for (const auto& a : args) task.add_args(a);
  std::string spec_path = dir.path() + "/spec";
  if (!WriteFile(spec_path, task.SerializeAsString(), 0600).ok()) {
    throw Error("cannot write " + spec_path);
  }
  std::vector<Child> children =
      StartChildren(*envs, my_host, dir.path(), spec_path);
  std::string failure = WaitForChildren(children);
  if (!failure.empty()) throw Error(failure);
  std::vector<std::string> out;
  for (const Child& c : children) {
    proto::TaskResult result;
    auto text = ReadFile(c.result_path);
    if (!text.ok() || !result.ParseFromString(*text) || !result.ok()) {
      throw Error(absl::StrCat("local rank ", c.local_rank,
                               " exited without a result"));
    }
    out.push_back(result.value());
  }
  return out;
}

int RunLaunchChild() {
  proto::TaskResult result;
  auto spec_text = ReadFile(env::Get(env::Var::kLaunchSpec));
  proto::TaskSpec spec;
  int code = 1;
  if (!spec_text.ok() || !spec.ParseFromString(*spec_text)) {
    result.set_error("cannot read the launch spec");
  } else if (const Invoker* invoker = FindInvoker(spec.function_name())) {
    std::vector<ObjectValue> args = {ObjectValue::Owned(
        Pack(static_cast<int>(env::GetInt(env::Var::kLaunchLocalIndex))))};
    for (const auto& a : spec.args()) args.push_back({a, false, nullptr});
    try {
      result.set_value(ToMsgpack((*invoker)(args)));
      result.set_ok(true);
      code = 0;
    } catch (const std::exception& e) {
      result.set_error(e.what());
    }
  } else {
    result.set_error("no remote function named " + spec.function_name());
  }
  WriteFile(env::Get(env::Var::kLaunchResult), result.SerializeAsString(), 0600)
      .IgnoreError();
  fflush(stdout);
  fflush(stderr);
  _exit(code);
}

}  // namespace shoal::internal

namespace shoal {

DeviceContext CurrentDevice() {
  DeviceContext d;
  d.kind = env::Get(env::Var::kDeviceKind);
  std::vector<std::string> ids =
      absl::StrSplit(env::Get(env::Var::kDeviceIds), ',', absl::SkipEmpty());
  if (!ids.empty()) (void)absl::SimpleAtoi(ids[0], &d.device_id);
  d.local_rank = static_cast<int>(env::GetInt(env::Var::kLocalRank));
  d.global_rank = static_cast<int>(env::GetInt(env::Var::kRank));
  d.world_size = static_cast<int>(env::GetInt(env::Var::kWorldSize));
  return d;
}

namespace spmd {

ProcessInfo Initialize() {
  ProcessInfo info;
  // Under `shoal launch --per-host` (SHOAL_PROCESS_ID is set; its default
  // in the table is 0, so ask whether it is there, not for its value).
  if (env::Find(env::Var::kProcessId).has_value()) {
    info.process_id = static_cast<int>(env::GetInt(env::Var::kProcessId));
    info.process_count = static_cast<int>(env::GetInt(env::Var::kNumProcesses));
    info.local_device_count =
        static_cast<int>(env::GetInt(env::Var::kLocalDeviceCount));
    info.global_device_count =
        static_cast<int>(env::GetInt(env::Var::kGlobalDeviceCount));
    info.coordinator_address = env::Get(env::Var::kCoordinatorAddress);
    return info;
  }
  AssignedDevices held = GetAssignedDevices();
  info.local_device_count = static_cast<int>(held.ids.size());
  std::vector<std::string> hosts = absl::StrSplit(
      env::Get(env::Var::kTpuWorkerHostnames), ',', absl::SkipEmpty());
  if (held.kind == "TPU" && !hosts.empty()) {
    info.process_id = std::max(held.worker_id, 0);
    info.process_count = static_cast<int>(hosts.size());
    info.coordinator_address =
        absl::StrCat(hosts[0], ":", launch::kTpuCoordinatorPort);
  } else {
    info.coordinator_address = absl::StrCat(env::Get(env::Var::kNodeIp).empty()
                                                ? "127.0.0.1"
                                                : env::Get(env::Var::kNodeIp),
                                            ":", launch::kTpuCoordinatorPort);
  }
  info.global_device_count = info.local_device_count * info.process_count;
  return info;
}

}  // namespace spmd
}  // namespace shoal
