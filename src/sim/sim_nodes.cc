#include "sim/sim_nodes.h"

#include <sys/resource.h>

#include <cstdio>
#include <deque>
#include <future>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "accel/cpu.h"
#include "accel/detect.h"
#include "accel/tpu.h"
#include "common/logging.h"
#include "rpc/event_loop.h"
#include "scheduling/label_selector.h"
#include "sim/sim_node.h"

namespace shoal::sim {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
// What each simulated host says it has besides CPU (as DescribeNode shows a
// real one): memory and an object store, neither of which is used.
constexpr int64_t kSimMemoryBytes = 16 * kGiB;
constexpr int64_t kSimObjectStoreBytes = 4 * kGiB;

// File descriptors a simulated node holds: its listening socket and its
// connection to the head (drivers' and the head's connections to it come on
// top, counted in kSpareFds). One server per node rather than one shared
// server that tells nodes apart: each node then has an address of its own
// exactly as a real agent does, with nothing new in the RPC layer, at the
// price of a descriptor per node; a process that may not open enough says
// so at start (10,000 nodes want ~20,000, more than a default hard limit:
// run two simulators of 5,000 then).
constexpr int64_t kFdsPerNode = 2;
constexpr int64_t kSpareFds = 512;

int64_t FileLimit() {
  rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 1024;
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
    getrlimit(RLIMIT_NOFILE, &limit);
  }
  return static_cast<int64_t>(limit.rlim_cur);
}

class SimNodesImpl : public SimNodes {
 public:
  SimNodesImpl(std::unique_ptr<rpc::EventLoop> loop, SimNodesOptions options)
      : loop_(std::move(loop)) {
    shared_.loop = loop_.get();
    shared_.options = std::move(options);
  }
  ~SimNodesImpl() override { Stop(); }

  absl::Status Begin(std::vector<SimNodeSpec> specs) {
    if (!shared_.options.tpu_type.empty() && !specs.empty()) {
      auto type = accel::ParseTpuAcceleratorType(shared_.options.tpu_type);
      if (!type.ok()) return type.status();
      // Validation needs only the chips of a host; one manager serves all.
      shared_.accelerators.push_back(
          std::make_shared<accel::TpuAcceleratorManager>(
              specs[0].tpu_chips, specs[0].tpu_chips, std::nullopt,
              std::vector<std::string>{}, "simulated"));
    }
    absl::Status status;
    loop_->RunSync([&] {
      shared_.stats.nodes = static_cast<int>(specs.size());
      nodes_.reserve(specs.size());
      for (SimNodeSpec& spec : specs) {
        auto node = std::make_unique<SimNode>(&shared_, std::move(spec));
        status = node->Listen();
        if (!status.ok()) return;
        to_register_.push_back(node.get());
        nodes_.push_back(std::move(node));
      }
      for (int i = 0; i < shared_.options.register_window; ++i) {
        RegisterNext();
      }
    });
    return status;
  }

  SimStats Stats() override {
    SimStats stats;
    loop_->RunSync([&] { stats = shared_.stats; });
    return stats;
  }

  void Stop() override {
    if (loop_ == nullptr) return;
    std::promise<void> unregistered;
    loop_->Post([&] {
      stopping_ = true;
      auto left = std::make_shared<size_t>(nodes_.size() + 1);
      auto one_done = [left, &unregistered] {
        if (--*left == 0) unregistered.set_value();
      };
      for (auto& node : nodes_) node->Unregister(10000, one_done);
      one_done();
    });
    unregistered.get_future().wait();
    loop_->RunSync([&] {
      for (auto& node : nodes_) node->Close();
    });
    loop_->Stop();
    nodes_.clear();
    loop_.reset();
  }

 private:
  // Registers the next node waiting its turn; a node the head did not take
  // (unreachable, busy) tries again a second later.
  void RegisterNext() {
    if (stopping_ || to_register_.empty()) return;
    SimNode* node = to_register_.front();
    to_register_.pop_front();
    node->Register([this, node](absl::Status st) {
      if (stopping_) return;
      if (!st.ok()) {
        if (!warned_) {
          warned_ = true;
          SHOAL_LOG(WARNING)
              << "node " << node->node_id() << " could not register (" << st
              << "); trying again";
        }
        loop_->RunAfter(1000, [this, node] {
          to_register_.push_back(node);
          RegisterNext();
        });
        return;
      }
      RegisterNext();
    });
  }

  std::unique_ptr<rpc::EventLoop> loop_;
  SimShared shared_;
  std::vector<std::unique_ptr<SimNode>> nodes_;  // loop only, as below
  std::deque<SimNode*> to_register_;
  bool stopping_ = false;
  bool warned_ = false;
};

}  // namespace

absl::StatusOr<std::vector<SimNodeSpec>> PlanSimNodes(
    const SimNodesOptions& options) {
  if (options.count < 1) {
    return absl::InvalidArgumentError("--count must be 1 or more");
  }
  accel::CpuResources cpu;
  cpu.num_cpus = options.num_cpus;
  cpu.memory_bytes = kSimMemoryBytes;
  cpu.object_store_memory_bytes = kSimObjectStoreBytes;
  std::optional<accel::TpuAcceleratorType> tpu;
  if (!options.tpu_type.empty()) {
    auto type = accel::ParseTpuAcceleratorType(options.tpu_type);
    if (!type.ok()) return type.status();
    if (options.count % type->hosts != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("a ", type->name, " slice has ", type->hosts,
                       " hosts: --count must be a multiple of ", type->hosts,
                       " (got ", options.count, ")"));
    }
    tpu = *type;
  }
  std::vector<SimNodeSpec> specs;
  specs.reserve(options.count);
  const int width = static_cast<int>(std::to_string(options.count - 1).size());
  for (int i = 0; i < options.count; ++i) {
    std::vector<std::unique_ptr<accel::AcceleratorManager>> managers;
    if (tpu.has_value()) {
      // Host i is worker i % hosts of slice i / hosts, as TPU_WORKER_ID and
      // TPU_NAME would say on a real TPU VM.
      accel::TpuSliceFacts facts;
      facts.type = *tpu;
      facts.slice_name = absl::StrCat(options.node_id_prefix, "-", tpu->name,
                                      "-", i / tpu->hosts);
      facts.worker_id = i % tpu->hosts;
      managers.push_back(std::make_unique<accel::TpuAcceleratorManager>(
          tpu->chips_per_host, tpu->chips_per_host, std::move(facts),
          std::vector<std::string>{}, "simulated"));
    }
    accel::NodeAccelerators described = accel::DescribeNode(cpu, managers);
    for (const auto& [k, v] : options.extra_resources) {
      described.resources[k] = v;
    }
    SimNodeSpec spec;
    spec.node_id = absl::StrFormat("%s-%0*d", options.node_id_prefix, width, i);
    auto resources = ResourceSet::FromDoubles(described.resources);
    if (!resources.ok()) return resources.status();
    spec.resources = std::move(*resources);
    spec.labels = std::move(described.labels);
    spec.labels[kLabelNodeId] = spec.node_id;
    spec.tpu_chips = tpu.has_value() ? tpu->chips_per_host : 0;
    specs.push_back(std::move(spec));
  }
  return specs;
}

absl::StatusOr<std::unique_ptr<SimNodes>> SimNodes::Start(
    const SimNodesOptions& options) {
  if (options.head_address.empty()) {
    return absl::InvalidArgumentError("the head's address is needed");
  }
  auto specs = PlanSimNodes(options);
  if (!specs.ok()) return specs.status();
  const int64_t limit = FileLimit();
  const int64_t can_run = (limit - kSpareFds) / kFdsPerNode;
  if (options.count > can_run) {
    return absl::ResourceExhaustedError(absl::StrCat(
        options.count, " simulated nodes need about ",
        options.count * kFdsPerNode + kSpareFds,
        " file descriptors (a listening socket and a head connection each), "
        "and this process may open ",
        limit, " (ulimit -Hn): run at most ", std::max<int64_t>(0, can_run),
        " per process, in several `shoal dev sim-nodes` processes with "
        "different --node-id-prefix"));
  }
  auto loop = rpc::EventLoop::Create("shoal-sim");
  if (!loop.ok()) return loop.status();
  auto sim = std::make_unique<SimNodesImpl>(std::move(*loop), options);
  if (absl::Status st = sim->Begin(std::move(*specs)); !st.ok()) {
    return st;
  }
  return sim;
}

}  // namespace shoal::sim
