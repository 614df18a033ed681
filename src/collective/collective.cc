// Groups: rendezvous through a Store, the choice of backend, input checks,
// and turning transport failures into CollectiveErrors that name ranks.
#include "shoal/collective.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <map>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "collective/hierarchical_transport.h"
#include "collective/transport.h"
#include "common/environment.h"
#include "common/files.h"
#include "common/net.h"
#include "shoal/launch.h"

namespace shoal::collective {

using internal::Transport;
using internal::TransportOptions;

size_t SizeOf(DataType type) {
  switch (type) {
    case DataType::kFloat32:
    case DataType::kInt32:
      return 4;
    case DataType::kBFloat16:
      return 2;
    case DataType::kFloat64:
    case DataType::kInt64:
      return 8;
  }
  return 1;
}

const char* BackendName(Backend backend) {
  switch (backend) {
    case Backend::kAuto:
      return "auto";
    case Backend::kSharedMemory:
      return "shared-memory";
    case Backend::kGloo:
      return "gloo";
    case Backend::kHierarchical:
      return "hierarchical";
    case Backend::kNccl:
      return "nccl";
  }
  return "unknown";
}

namespace {

// What every rank publishes at rendezvous.
struct RankInfo {
  int world_size = 0;
  int64_t pid = 0;
  std::string host_id;
  std::string hostname;
  std::string address;

  std::string Serialize() const {
    return absl::StrJoin({std::to_string(world_size), std::to_string(pid),
                          host_id, hostname, address},
                         "\n");
  }
  static bool Parse(const std::string& text, RankInfo* info) {
    std::vector<std::string> parts = absl::StrSplit(text, '\n');
    if (parts.size() != 5) return false;
    info->host_id = parts[2];
    info->hostname = parts[3];
    info->address = parts[4];
    return absl::SimpleAtoi(parts[0], &info->world_size) &&
           absl::SimpleAtoi(parts[1], &info->pid);
  }
};

std::string DefaultGeneration() {
  std::vector<std::string> parts;
  for (env::Var var : {env::Var::kMasterAddr, env::Var::kMasterPort,
                       env::Var::kRestartCount}) {
    std::string value = env::Find(var).value_or("");
    if (!value.empty()) parts.push_back(value);
  }
  return parts.empty() ? "0" : absl::StrJoin(parts, ":");
}

// This boot of this machine, and the network namespace: ranks in different
// namespaces do not share memory. A simulated accelerator host (a node agent
// on a fake device tree, `shoal dev fake-tpu`) counts as a host of its own,
// so that a simulated slice exchanges data as the real one would.
std::string DefaultHostId() {
  std::string boot(absl::StripAsciiWhitespace(
      ReadFile("/proc/sys/kernel/random/boot_id").value_or(Hostname())));
  struct stat st;
  if (stat("/proc/self/ns/net", &st) == 0) {
    absl::StrAppend(&boot, "/netns:", st.st_ino);
  }
  std::string simulated = env::Find(env::Var::kDeviceRoot).value_or("");
  if (!simulated.empty()) absl::StrAppend(&boot, "/simulated:", simulated);
  return boot;
}

// The local address a UDP socket would use to reach the head (nothing is
// sent), else the primary address.
std::string DefaultInterfaceAddress() {
  std::string head = env::Get(env::Var::kAddress);
  std::string host;
  int port = 0;
  if (!head.empty() && SplitHostPort(head, &host, &port).ok()) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_DGRAM;
    addrinfo* found = nullptr;
    if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints,
                    &found) == 0) {
      std::string local;
      int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      if (fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
        sockaddr_in addr{};
        socklen_t len = sizeof(addr);
        char text[INET_ADDRSTRLEN];
        if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0 &&
            inet_ntop(AF_INET, &addr.sin_addr, text, sizeof(text))) {
          local = text;
        }
      }
      if (fd >= 0) close(fd);
      freeaddrinfo(found);
      if (!local.empty()) return local;
    }
  }
  return PrimaryIpAddress();
}

}  // namespace

struct Group::Impl {
  std::string name;
  int rank = 0;
  int world_size = 0;
  Backend backend = Backend::kAuto;
  int local_rank = 0;
  int local_size = 1;
  int num_hosts = 1;
  std::vector<RankInfo> ranks;
  std::shared_ptr<Store> store;
  std::unique_ptr<Transport> transport;

  // Turns a transport failure into the exception users see.
  [[noreturn]] void Throw(const char* op, const absl::Status& status) const {
    std::vector<int> failed = internal::FailedGroupRanks(status, {});
    std::string message =
        absl::StrCat(op, " of group '", name, "' failed: ", status.message());
    // Transports that do not know the pids: say who the ranks were.
    if (!failed.empty() && message.find("(pid ") == std::string::npos) {
      std::vector<std::string> who;
      for (int r : failed) {
        if (r >= 0 && r < world_size) who.push_back(Describe(r));
      }
      if (!who.empty())
        absl::StrAppend(&message, " [", absl::StrJoin(who, "; "), "]");
    }
    throw CollectiveError(message, failed);
  }
  void Check(const char* op, const absl::Status& status) const {
    if (!status.ok()) Throw(op, status);
  }
  std::string Describe(int r) const {
    return absl::StrCat("rank ", r, " (pid ", ranks[r].pid, " on host ",
                        ranks[r].hostname, ")");
  }
  [[noreturn]] void Invalid(const char* op, const std::string& why) const {
    throw CollectiveError(
        absl::StrCat(op, " of group '", name, "' (rank ", rank, "): ", why),
        {});
  }
};

namespace {

class GroupImpl final : public Group {
 public:
  explicit GroupImpl(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
  int rank() const override { return impl_->rank; }
  int world_size() const override { return impl_->world_size; }
  Backend backend() const override { return impl_->backend; }
  int local_rank() const override { return impl_->local_rank; }
  int local_size() const override { return impl_->local_size; }
  int num_hosts() const override { return impl_->num_hosts; }
  Impl& impl() override { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// Publishes this rank's info and reads everyone's.
std::vector<RankInfo> Rendezvous(Store& store, const std::string& prefix,
                                 const std::string& name, int world_size,
                                 int rank, const RankInfo& mine,
                                 std::chrono::milliseconds timeout) {
  store.Set(absl::StrCat(prefix, "rank/", rank), mine.Serialize());
  std::vector<RankInfo> ranks(world_size);
  ranks[rank] = mine;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<int> missing;
  for (int r = 0; r < world_size; ++r) {
    if (r == rank) continue;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    std::string value;
    try {
      value = store.Get(absl::StrCat(prefix, "rank/", r),
                        std::max(left, std::chrono::milliseconds(1)));
    } catch (const CollectiveError&) {
      missing.push_back(r);
      continue;
    }
    if (!RankInfo::Parse(value, &ranks[r])) {
      throw CollectiveError(
          absl::StrCat("group '", name, "': rank ", r,
                       " published a malformed rendezvous record"),
          {r});
    }
    if (ranks[r].world_size != world_size) {
      throw CollectiveError(
          absl::StrCat("group '", name, "': rank ", r,
                       " joined with world size ", ranks[r].world_size,
                       " but rank ", rank, " with ", world_size,
                       "; every rank must pass the same world size"),
          {r});
    }
  }
  if (!missing.empty()) {
    throw CollectiveError(
        absl::StrCat("group '", name, "': rank",
                     missing.size() > 1 ? "s " : " ",
                     absl::StrJoin(missing, ", "), " of ", world_size,
                     " did not join within ", timeout.count(),
                     " ms (waited for keys under '", prefix,
                     "rank/'); the other ranks may not have started, or "
                     "used another group name, generation or store"),
        missing);
  }
  return ranks;
}

absl::StatusOr<std::unique_ptr<Transport>> MakeTransport(
    Backend backend, const TransportOptions& options,
    const std::vector<int>& host_of_rank) {
  switch (backend) {
    case Backend::kSharedMemory:
      return internal::CreateSharedMemoryTransport(options);
    case Backend::kGloo:
      return internal::CreateGlooTransport(options);
    case Backend::kHierarchical:
      return internal::CreateHierarchicalTransport(options, host_of_rank);
    case Backend::kNccl:
      return internal::CreateNcclTransport(options);
    case Backend::kAuto:
      break;
  }
  return absl::InternalError("no backend chosen");
}

void CheckGroupArguments(const std::string& name, int world_size, int rank,
                         const GroupOptions& options) {
  if (name.empty()) {
    throw CollectiveError("a collective group needs a name", {});
  }
  if (world_size < 1) {
    throw CollectiveError(absl::StrCat("group '", name, "': world size ",
                                       world_size, " must be at least 1"),
                          {});
  }
  if (rank < 0 || rank >= world_size) {
    throw CollectiveError(
        absl::StrCat("group '", name, "': rank ", rank,
                     " is out of range for world size ", world_size,
                     " (ranks are 0..", world_size - 1, ")"),
        {});
  }
  if (options.timeout.count() <= 0) {
    throw CollectiveError(
        absl::StrCat("group '", name, "': the timeout must be positive"), {});
  }
}

// Each rank's host, hosts numbered by their smallest rank; sets the group's
// host count and this rank's place on its host.
std::vector<int> NumberHosts(Group::Impl& impl) {
  std::map<std::string, int> host_index;
  std::vector<int> host_of_rank(impl.world_size);
  std::vector<int> host_size;
  for (int r = 0; r < impl.world_size; ++r) {
    auto [it, added] = host_index.emplace(impl.ranks[r].host_id,
                                          static_cast<int>(host_size.size()));
    if (added) host_size.push_back(0);
    host_of_rank[r] = it->second;
    ++host_size[it->second];
  }
  for (int r = 0; r < impl.rank; ++r) {
    if (host_of_rank[r] == host_of_rank[impl.rank]) ++impl.local_rank;
  }
  impl.num_hosts = static_cast<int>(host_size.size());
  impl.local_size = host_size[host_of_rank[impl.rank]];
  return host_of_rank;
}

// The backend `requested`, or for kAuto the best for where the ranks are.
Backend ChooseBackend(const Group::Impl& impl, Backend requested,
                      const std::vector<int>& host_of_rank) {
  Backend backend = requested;
  if (backend == Backend::kAuto) {
    std::vector<int> host_size(impl.num_hosts);
    for (int h : host_of_rank) ++host_size[h];
    bool all_shared = std::all_of(host_size.begin(), host_size.end(),
                                  [](int n) { return n > 1; });
    backend = impl.num_hosts == 1 ? Backend::kSharedMemory
              : all_shared        ? Backend::kHierarchical
                                  : Backend::kGloo;
  }
  if (backend == Backend::kSharedMemory && impl.num_hosts > 1) {
    int other = static_cast<int>(
        std::find_if(host_of_rank.begin(), host_of_rank.end(),
                     [&](int h) { return h != host_of_rank[0]; }) -
        host_of_rank.begin());
    throw CollectiveError(
        absl::StrCat("group '", impl.name,
                     "': the shared-memory backend needs every rank on one "
                     "host, but ",
                     impl.Describe(0), " and ", impl.Describe(other),
                     " are on different hosts (host ids '",
                     impl.ranks[0].host_id, "' and '",
                     impl.ranks[other].host_id,
                     "'); use Backend::kAuto or kHierarchical"),
        {});
  }
  return backend;
}

}  // namespace

std::unique_ptr<Group> Group::Create(const std::string& name, int world_size,
                                     int rank, GroupOptions options) {
  CheckGroupArguments(name, world_size, rank, options);
  auto impl = std::make_unique<Impl>();
  impl->name = name;
  impl->rank = rank;
  impl->world_size = world_size;
  impl->store = options.store != nullptr ? options.store : ClusterStore();
  std::string generation =
      options.generation.empty() ? DefaultGeneration() : options.generation;
  std::string prefix = absl::StrCat("collective/", name, "/", generation, "/");

  RankInfo mine;
  mine.world_size = world_size;
  mine.pid = getpid();
  mine.host_id = options.host_id.empty() ? DefaultHostId() : options.host_id;
  mine.hostname = Hostname();
  mine.address = options.interface_address.empty() ? DefaultInterfaceAddress()
                                                   : options.interface_address;
  impl->ranks = Rendezvous(*impl->store, prefix, name, world_size, rank, mine,
                           options.timeout);

  // Hosts are numbered by their smallest rank.
  std::vector<int> host_of_rank = NumberHosts(*impl);
  impl->backend = ChooseBackend(*impl, options.backend, host_of_rank);
  Backend backend = impl->backend;

  TransportOptions transport_options;
  transport_options.key_prefix =
      absl::StrCat(prefix, BackendName(backend), "/");
  transport_options.size = world_size;
  transport_options.rank = rank;
  transport_options.store = impl->store.get();
  transport_options.timeout = options.timeout;
  transport_options.interface_address = mine.address;
  for (int r = 0; r < world_size; ++r) {
    transport_options.rank_descriptions.push_back(impl->Describe(r));
  }
  auto transport = MakeTransport(backend, transport_options, host_of_rank);
  if (!transport.ok()) {
    impl->Throw(
        absl::StrCat("joining (", BackendName(backend), " backend)").c_str(),
        transport.status());
  }
  impl->transport = std::move(*transport);
  if (backend == Backend::kGloo || backend == Backend::kNccl) {
    // No rank may tear its connections down while another is still
    // completing its own (a group used for nothing and destroyed at once).
    impl->Check("joining", impl->transport->Barrier(0));
  }
  return std::make_unique<GroupImpl>(std::move(impl));
}

namespace {

void CheckBuffer(const Group::Impl& impl, const char* op, const void* buffer,
                 size_t count, const char* what) {
  if (buffer == nullptr && count > 0) {
    impl.Invalid(op, absl::StrCat(what, " is null but count is ", count));
  }
}

void CheckRoot(const Group::Impl& impl, const char* op, int root) {
  if (root < 0 || root >= impl.world_size) {
    impl.Invalid(op, absl::StrCat("root ", root,
                                  " is out of range (ranks are "
                                  "0..",
                                  impl.world_size - 1, ")"));
  }
}

}  // namespace

void AllReduce(Group& group, const AllReduceOptions& options) {
  Group::Impl& impl = group.impl();
  CheckBuffer(impl, "all-reduce", options.data, options.count, "data");
  impl.Check("all-reduce",
             impl.transport->AllReduce(options.data, options.count,
                                       options.type, options.op, options.tag));
}

void AllGather(Group& group, const AllGatherOptions& options) {
  Group::Impl& impl = group.impl();
  CheckBuffer(impl, "all-gather", options.input, options.count, "input");
  CheckBuffer(impl, "all-gather", options.output, options.count, "output");
  impl.Check("all-gather", impl.transport->AllGather(
                               options.input, options.output, options.count,
                               options.type, options.tag));
}

void ReduceScatter(Group& group, const ReduceScatterOptions& options) {
  Group::Impl& impl = group.impl();
  CheckBuffer(impl, "reduce-scatter", options.input, options.count, "input");
  CheckBuffer(impl, "reduce-scatter", options.output, options.count, "output");
  impl.Check("reduce-scatter", impl.transport->ReduceScatter(
                                   options.input, options.output, options.count,
                                   options.type, options.op, options.tag));
}

void Broadcast(Group& group, const BroadcastOptions& options) {
  Group::Impl& impl = group.impl();
  CheckBuffer(impl, "broadcast", options.data, options.count, "data");
  CheckRoot(impl, "broadcast", options.root);
  impl.Check("broadcast", impl.transport->Broadcast(options.data, options.count,
                                                    options.type, options.root,
                                                    options.tag));
}

void Barrier(Group& group, uint32_t tag) {
  Group::Impl& impl = group.impl();
  impl.Check("barrier", impl.transport->Barrier(tag));
}

}  // namespace shoal::collective

namespace shoal::spmd {

std::vector<std::unique_ptr<collective::Group>> DeviceGroups(
    const std::string& name, collective::GroupOptions options) {
  ProcessInfo info = Initialize();
  if (info.local_device_count < 1) {
    throw collective::CollectiveError(
        absl::StrCat("DeviceGroups('", name,
                     "'): this process has no devices "
                     "(SHOAL_LOCAL_DEVICE_COUNT is unset or 0); run it with "
                     "`shoal launch --per-host`"),
        {});
  }
  const int local = info.local_device_count;
  const int world = info.process_count * local;
  if (options.store == nullptr) options.store = collective::ClusterStore();
  std::vector<std::unique_ptr<collective::Group>> groups(local);
  std::vector<std::exception_ptr> errors(local);
  std::vector<std::thread> threads;
  threads.reserve(local);
  for (int i = 0; i < local; ++i) {
    threads.emplace_back([&, i] {
      try {
        groups[i] = collective::Group::Create(
            name, world, info.process_id * local + i, options);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }
  return groups;
}

}  // namespace shoal::spmd
