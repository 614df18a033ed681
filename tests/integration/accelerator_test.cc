// Accelerators end to end on a simulated TPU v5p-16 slice: a head and two
// node agents, each on a fake TPU host tree (workers 0 and 1, 4 chips each),
// as `shoal dev fake-tpu` makes them.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "accel/fake_host.h"
#include "common/files.h"
#include "common/process.h"
#include "common/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shoal/api.h"
#include "shoal/collective.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::testing::ClusterSpec;
using ::shoal::testing::NodeSpec;
using ::shoal::testing::RunCli;
using ::shoal::testing::TestCluster;
using ::testing::HasSubstr;

// What a task holding chips sees.
std::map<std::string, std::string> ChipView(int64_t hold_ms) {
  std::map<std::string, std::string> view;
  for (const char* name :
       {"TPU_VISIBLE_CHIPS", "TPU_CHIPS_PER_HOST_BOUNDS", "TPU_HOST_BOUNDS"}) {
    const char* v = getenv(name);
    view[name] = v ? v : "<unset>";
  }
  view["node"] = shoal::CurrentNodeId();
  shoal::AssignedDevices devices = shoal::GetAssignedDevices();
  view["kind"] = devices.kind;
  std::string ids;
  for (int id : devices.ids)
    ids += (ids.empty() ? "" : ",") + std::to_string(id);
  view["ids"] = ids;
  view["slice"] = devices.slice_name;
  view["worker_id"] = std::to_string(devices.worker_id);
  view["type"] = devices.accelerator_type;
  // Hold the chip so that concurrent holders must get other chips.
  std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
  return view;
}
SHOAL_REMOTE(ChipView);

// One task of the guide's pattern on a two-host slice: it says it is here,
// then waits (up to 20 s) until the task of the other host says so too, as
// tasks meeting in jax.distributed.initialize() would. Run one after the
// other, the first fails.
std::string MeetOnHost(std::string run) {
  auto store = shoal::collective::ClusterStore();
  std::string self = shoal::CurrentNodeId();
  store->Set(absl::StrCat("meet/", run, "/", self), "1");
  for (const char* host : {"tpu-0", "tpu-1"}) {
    store->Get(absl::StrCat("meet/", run, "/", host),
               std::chrono::milliseconds(20000));
  }
  return self;
}
SHOAL_REMOTE(MeetOnHost);

class AcceleratorTest : public shoal::testing::FakeTpuSliceTest {
 protected:
  void SetUp() override {
    StartSlice("v5p-16", 2, 8);
    if (cluster_) cluster_->Connect();
  }
  void TearDown() override {
    shoal::Shutdown();
    FakeTpuSliceTest::TearDown();
  }
};

TEST_F(AcceleratorTest, StatusShowsTheSliceAsRayDoes) {
  std::string out;
  ASSERT_EQ(RunCli({"status", "--address", cluster_->address(), "--token",
                    cluster_->token()},
                   &out),
            0)
      << out;
  EXPECT_THAT(out, HasSubstr(" 0.0/8.0 TPU\n"));
  EXPECT_THAT(out, HasSubstr(" 0.0/1.0 TPU-v5p-16-head\n"));
  EXPECT_THAT(out, HasSubstr(" 0.0/2.0 my-tpu\n"));
  ASSERT_EQ(RunCli({"status", "--verbose", "--address", cluster_->address(),
                    "--token", cluster_->token()},
                   &out),
            0);
  EXPECT_THAT(out, HasSubstr("shoal.io/tpu-worker-id=1"));
  EXPECT_THAT(out, HasSubstr("shoal.io/tpu-topology=2x2x2"));
  auto total = shoal::ClusterResources();
  EXPECT_EQ(total["TPU"], 8);
  EXPECT_EQ(total["TPU-v5p-16-head"], 1);
  EXPECT_EQ(total["my-tpu"], 2);
}

TEST_F(AcceleratorTest, EightOneChipTasksEachSeeADistinctChip) {
  std::vector<shoal::ObjectRef<std::map<std::string, std::string>>> refs;
  for (int i = 0; i < 8; ++i) {
    refs.push_back(shoal::Task(ChipView).SetResource("TPU", 1).Remote(1500));
  }
  std::map<std::string, std::multiset<std::string>> chips_per_host;
  for (const auto& view : shoal::Get(refs, 60000)) {
    chips_per_host[view.at("node")].insert(view.at("TPU_VISIBLE_CHIPS"));
    EXPECT_EQ(view.at("TPU_CHIPS_PER_HOST_BOUNDS"), "1,1,1");
    EXPECT_EQ(view.at("TPU_HOST_BOUNDS"), "1,1,1");
    EXPECT_EQ(view.at("kind"), "TPU");
    EXPECT_EQ(view.at("ids"), view.at("TPU_VISIBLE_CHIPS"));
    EXPECT_EQ(view.at("slice"), "my-tpu");
    EXPECT_EQ(view.at("worker_id"), view.at("node") == "tpu-0" ? "0" : "1");
  }
  std::multiset<std::string> all_chips = {"0", "1", "2", "3"};
  EXPECT_EQ(chips_per_host["tpu-0"], all_chips);
  EXPECT_EQ(chips_per_host["tpu-1"], all_chips);
}

TEST_F(AcceleratorTest, TwoChipTaskGetsHalfAHostBounds) {
  auto view = shoal::Get(shoal::Task(ChipView).SetResource("TPU", 2).Remote(0));
  EXPECT_EQ(view.at("TPU_CHIPS_PER_HOST_BOUNDS"), "1,2,1");
  EXPECT_EQ(view.at("TPU_HOST_BOUNDS"), "1,1,1");
  EXPECT_EQ(view.at("TPU_VISIBLE_CHIPS").size(), 3u);  // "a,b"
}

TEST_F(AcceleratorTest, FourChipTaskSeesTheWholeHostWithoutBounds) {
  std::vector<shoal::ObjectRef<std::map<std::string, std::string>>> refs;
  for (int i = 0; i < 2; ++i) {
    refs.push_back(shoal::Task(ChipView).SetResource("TPU", 4).Remote(500));
  }
  std::set<std::string> nodes;
  for (const auto& view : shoal::Get(refs, 60000)) {
    EXPECT_EQ(view.at("TPU_VISIBLE_CHIPS"), "0,1,2,3");
    EXPECT_EQ(view.at("TPU_CHIPS_PER_HOST_BOUNDS"), "<unset>");
    EXPECT_EQ(view.at("TPU_HOST_BOUNDS"), "<unset>");
    nodes.insert(view.at("node"));
  }
  EXPECT_EQ(nodes, (std::set<std::string>{"tpu-0", "tpu-1"}));
  // The slice head resource exists once: on worker 0.
  auto head = shoal::Get(shoal::Task(ChipView)
                             .SetResources({{"TPU", 4}, {"TPU-v5p-16-head", 1}})
                             .Remote(0));
  EXPECT_EQ(head.at("node"), "tpu-0");
}

// The guide's own pattern, with no placement group:
//   ray.get([f.remote() for _ in range(num_hosts)])  # resources={"TPU": 4}
// Both tasks must run at once, one per host.
TEST_F(AcceleratorTest, TheGuidesPatternRunsOneTaskPerHostAtOnce) {
  // Round 0 finds no lease; round 1 reuses both; round 2 comes after they
  // were returned, when the driver knows how long such a task runs.
  for (int round = 0; round < 3; ++round) {
    if (round == 2) std::this_thread::sleep_for(std::chrono::seconds(1));
    std::string run = shoal::RandomHex(4);
    std::vector<shoal::ObjectRef<std::string>> refs;
    for (int h = 0; h < 2; ++h) {
      refs.push_back(shoal::Task(MeetOnHost)
                         .SetResource("TPU", 4)
                         .SetMaxRetries(0)
                         .Remote(run));
    }
    std::vector<std::string> hosts = shoal::Get(refs, 60000);
    EXPECT_EQ(std::set<std::string>(hosts.begin(), hosts.end()),
              (std::set<std::string>{"tpu-0", "tpu-1"}))
        << "round " << round;
  }
}

TEST_F(AcceleratorTest, ThreeChipsFailWithAClearError) {
  auto ref = shoal::Task(ChipView).SetResource("TPU", 3).Remote(0);
  try {
    shoal::Get(ref, 30000);
    FAIL() << "expected an error";
  } catch (const shoal::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("1, 2, 4 or 8"));
    EXPECT_THAT(e.what(), HasSubstr("asked for 3"));
  }
  // Tasks without chips see none.
  auto view = shoal::Get(shoal::Task(ChipView).Remote(0));
  EXPECT_EQ(view.at("kind"), "");
}

}  // namespace

namespace {

std::string VisibleGpus(int64_t hold_ms) {
  const char* v = getenv("CUDA_VISIBLE_DEVICES");
  std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
  return v ? v : "<unset>";
}
SHOAL_REMOTE(VisibleGpus);

// A fake NVIDIA host (two H200s under /proc/driver/nvidia/gpus).
TEST(GpuTest, EachGpuTaskSeesItsOwnDevice) {
  char tmpl[] = "/tmp/shoal-gpu-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string root = tmpl;
  ASSERT_TRUE(shoal::accel::MakeFakeNvidiaHost(root, 2, "NVIDIA H200").ok());
  ClusterSpec spec;
  NodeSpec node{"gpu-0", 4, ""};
  node.env.push_back("SHOAL_DEVICE_ROOT=" + root);
  spec.nodes.push_back(node);
  auto cluster = TestCluster::Start(spec);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  (*cluster)->Connect();
  auto total = shoal::ClusterResources();
  EXPECT_EQ(total["GPU"], 2);
  EXPECT_EQ(total["accelerator_type:H200"], 1);
  std::vector<shoal::ObjectRef<std::string>> refs;
  for (int i = 0; i < 2; ++i) {
    refs.push_back(shoal::Task(VisibleGpus).SetResource("GPU", 1).Remote(1000));
  }
  std::multiset<std::string> seen;
  for (const auto& v : shoal::Get(refs, 60000)) seen.insert(v);
  EXPECT_EQ(seen, (std::multiset<std::string>{"0", "1"}));
  // A task without GPUs sees none.
  EXPECT_EQ(shoal::Get(shoal::Task(VisibleGpus).Remote(0)), "");
  shoal::Shutdown();
  (*cluster)->Stop();
  EXPECT_EQ((*cluster)->sanitizer_reports(), "");
  std::error_code ec;
  std::filesystem::remove_all(root, ec);
}

}  // namespace

namespace {

// One process per chip (shoal::Launch): what each process sees.
std::map<std::string, std::string> PerChip(int local_index) {
  shoal::DeviceContext d = shoal::CurrentDevice();
  std::map<std::string, std::string> view;
  view["local_index"] = std::to_string(local_index);
  view["kind"] = d.kind;
  view["device_id"] = std::to_string(d.device_id);
  view["rank"] = std::to_string(d.global_rank);
  view["world_size"] = std::to_string(d.world_size);
  for (const char* name : {"TPU_VISIBLE_CHIPS", "TPU_PROCESS_BOUNDS",
                           "PJRT_DEVICE", "RANK", "LOCAL_RANK"}) {
    const char* v = getenv(name);
    view[name] = v ? v : "<unset>";
  }
  return view;
}
std::vector<std::map<std::string, std::string>> LaunchOnHost() {
  return shoal::Launch(PerChip);
}
int64_t FailOnRankTwo(int local_index) {
  if (local_index == 2) throw std::runtime_error("chip 2 is on fire");
  return local_index;
}
std::vector<int64_t> LaunchFailing() { return shoal::Launch(FailOnRankTwo); }
SHOAL_REMOTE(PerChip, LaunchOnHost, FailOnRankTwo, LaunchFailing);

TEST_F(AcceleratorTest, LaunchRunsOneProcessPerChipOnEveryHost) {
  // One TPU: 4 task per host, each launching a process per chip. The slice
  // is reserved so that each host gets one: two free-standing tasks may run
  // one after the other on the same host (its lease is reused).
  int hosts = static_cast<int>(shoal::AvailableResources()["TPU"] / 4);
  ASSERT_EQ(hosts, 2);
  shoal::SliceReservation slice = shoal::ReserveTpuSlice("", 60000);
  std::vector<shoal::ObjectRef<std::vector<std::map<std::string, std::string>>>>
      refs;
  for (int h = 0; h < hosts; ++h) {
    refs.push_back(shoal::Task(LaunchOnHost)
                       .SetResource("TPU", 4)
                       .SetPlacementGroup(slice.group, h)
                       .Remote());
  }
  std::set<std::string> ranks;
  for (const auto& host : shoal::Get(refs, 60000)) {
    ASSERT_EQ(host.size(), 4u);
    for (size_t i = 0; i < host.size(); ++i) {
      const auto& v = host[i];
      EXPECT_EQ(v.at("local_index"), std::to_string(i));
      EXPECT_EQ(v.at("kind"), "TPU");
      EXPECT_EQ(v.at("TPU_VISIBLE_CHIPS"), std::to_string(i));
      EXPECT_EQ(v.at("device_id"), std::to_string(i));
      EXPECT_EQ(v.at("TPU_PROCESS_BOUNDS"), "2,2,2");
      EXPECT_EQ(v.at("PJRT_DEVICE"), "TPU");
      EXPECT_EQ(v.at("world_size"), "8");
      EXPECT_EQ(v.at("RANK"), v.at("rank"));
      ranks.insert(v.at("rank"));
    }
  }
  EXPECT_EQ(ranks,
            (std::set<std::string>{"0", "1", "2", "3", "4", "5", "6", "7"}));
  shoal::RemovePlacementGroup(slice.group);
}

TEST_F(AcceleratorTest, ALaunchWithAFailingRankFailsNamingIt) {
  auto ref = shoal::Task(LaunchFailing).SetResource("TPU", 4).Remote();
  try {
    shoal::Get(ref, 60000);
    FAIL() << "expected the launch to fail";
  } catch (const shoal::RemoteError& e) {
    EXPECT_THAT(e.what(), HasSubstr("local rank 2"));
    EXPECT_THAT(e.what(), HasSubstr("chip 2 is on fire"));
  }
}

}  // namespace

namespace {

TEST_F(AcceleratorTest, ReserveTpuSliceGangsEveryHostInWorkerOrder) {
  shoal::SliceReservation slice = shoal::ReserveTpuSlice("", 20000);
  EXPECT_EQ(slice.slice_name, "my-tpu");
  EXPECT_EQ(slice.accelerator_type, "v5p-16");
  EXPECT_EQ(slice.chips_per_host, 4);
  EXPECT_EQ(slice.hosts, (std::vector<std::string>{"tpu-0", "tpu-1"}));
  // While the gang holds the slice, nothing else gets its chips (the head
  // hears of it from the agents within milliseconds).
  double free_chips = -1;
  for (int i = 0; i < 100 && free_chips != 0; ++i) {
    free_chips = shoal::AvailableResources()["TPU"];
    if (free_chips != 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  EXPECT_EQ(free_chips, 0);
  // Work placed in bundle i runs on worker i, with global ranks from there.
  for (int i = 0; i < 2; ++i) {
    auto views = shoal::Get(shoal::Task(LaunchOnHost)
                                .SetResource("TPU", 4)
                                .SetPlacementGroup(slice.group, i)
                                .Remote(),
                            60000);
    ASSERT_EQ(views.size(), 4u);
    EXPECT_EQ(views[0].at("rank"), std::to_string(4 * i));
  }
  shoal::RemovePlacementGroup(slice.group);
  try {
    shoal::ReserveTpuSlice("other-slice", 1000);
    FAIL() << "expected an error for an unknown slice";
  } catch (const shoal::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("other-slice"));
  }
}

}  // namespace

namespace {

// Starts a process (with `env` added) that holds `path` open, as libtpu holds
// its lock file; returns its pid once it does, or -1.
pid_t HoldFile(const std::string& path,
               const std::map<std::string, std::string>& env) {
  pid_t pid = fork();
  if (pid == 0) {
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::string command = "exec 3<>" + path + "; exec sleep 60";
    execl("/bin/sh", "/bin/sh", "-c", command.c_str(), nullptr);
    _exit(127);
  }
  for (int i = 0; i < 500; ++i) {
    if (!shoal::ProcessesHoldingFile(path).empty()) return pid;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

TEST_F(AcceleratorTest, ChipsHeldByAStrangerFailClearlyAndStaleLocksGo) {
  std::string lock = roots_ + "/libtpu_lockfile-0";
  std::ofstream(lock) << "";
  // A process Shoal did not start holds the lock.
  pid_t holder = HoldFile(lock, {});
  ASSERT_GT(holder, 0);
  auto on_worker_0 = [] {
    return shoal::Task(ChipView)
        .SetResources({{"TPU", 4}, {"TPU-v5p-16-head", 1}})
        .Remote(0);
  };
  try {
    shoal::Get(on_worker_0(), 30000);
    FAIL() << "expected the held chips to fail the task";
  } catch (const shoal::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("held by pid " + std::to_string(holder)));
    EXPECT_THAT(e.what(), HasSubstr("Stop that process"));
  }
  kill(holder, SIGKILL);
  waitpid(holder, nullptr, 0);
  // No living holder: the stale lock is removed and the chips are usable.
  EXPECT_EQ(shoal::Get(on_worker_0(), 30000).at("TPU_VISIBLE_CHIPS"),
            "0,1,2,3");
  EXPECT_FALSE(shoal::PathExists(lock));
}

}  // namespace

namespace {

TEST_F(AcceleratorTest, LeftoversOfAnEarlierGangAreEndedBeforeChipsAreGiven) {
  std::string lock = roots_ + "/libtpu_lockfile-0";
  std::ofstream(lock) << "";
  // A process of an earlier Shoal gang on this node (its worker is gone).
  pid_t leftover = HoldFile(
      lock, {{"SHOAL_NODE_ID", "tpu-0"}, {"SHOAL_WORKER_ID", "gone-worker"}});
  ASSERT_GT(leftover, 0);
  auto view = shoal::Get(shoal::Task(ChipView)
                             .SetResources({{"TPU", 4}, {"TPU-v5p-16-head", 1}})
                             .Remote(0),
                         30000);
  EXPECT_EQ(view.at("TPU_VISIBLE_CHIPS"), "0,1,2,3");
  int status = 0;
  EXPECT_EQ(waitpid(leftover, &status, 0), leftover);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

}  // namespace
