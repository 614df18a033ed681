// A host that joins after a driver started runs that driver's tasks and
// actors. The driver starts while its own host is the cluster's only one,
// so it sends the head no copy of its program; then a node of another host
// joins: one that says it is another host (SHOAL_HOST_ID) and cannot see
// the driver's program (its agent runs in a mount namespace of its own with
// an empty tmpfs over the program's folder). Its tasks, tasks nested in
// them, tasks nested in a worker of the driver's host started before any
// copy existed, and an actor all run there, from one copy on the head.
//
// Needs root (a mount namespace); skipped, saying why, elsewhere.
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shoal/api.h"
#include "tests/system/netns.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::testing::ClusterSpec;
using ::shoal::testing::FinishCommand;
using ::shoal::testing::NodeSpec;
using ::shoal::testing::RunCli;
using ::shoal::testing::RunningCommand;
using ::shoal::testing::StartInNetns;
using ::shoal::testing::TestCluster;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;

constexpr char kLateNode[] = "late-host";
constexpr int64_t kGetMs = 120000;

// ---- The driver's program (this binary, run from a copy) ----

std::string Where() { return shoal::CurrentNodeId(); }
bool SeesFile(std::string path) { return access(path.c_str(), F_OK) == 0; }

// Waits (up to 2 minutes) until a node offers `resource`.
bool WaitForResource(const std::string& resource) {
  for (int i = 0; i < 1200; ++i) {
    if (shoal::ClusterResources().count(resource)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

// On the driver's host, in a worker started before the late host joined
// (so without SHOAL_BLOB_HASH): once that host is there, a nested task
// runs on it.
std::string FromTheDriverHost() {
  std::string started = getenv("SHOAL_BLOB_HASH") == nullptr
                            ? "started without a copy"
                            : "started with a copy";
  if (!WaitForResource("late_host")) return started + ": no late host";
  return started + ": " +
         shoal::Get(shoal::Task(Where).SetResource("late_host", 1).Remote(),
                    kGetMs);
}

// On the late host: a task nested in it runs there too.
std::string FromTheLateHost() {
  return shoal::Get(shoal::Task(Where).SetResource("late_host", 1).Remote(),
                    kGetMs);
}

class Spot {
 public:
  std::string Node() const { return shoal::CurrentNodeId(); }
};
Spot* CreateSpot() { return new Spot(); }

SHOAL_REMOTE(Where, SeesFile, FromTheDriverHost, FromTheLateHost, CreateSpot,
             &Spot::Node);

// Run by LateJoinerTest as a separate process, from a copy of this binary
// that the late host cannot see.
TEST(LateJoinerDriver, DISABLED_RunsOnAHostThatJoinsLater) {
  shoal::Init();
  auto early =
      shoal::Task(FromTheDriverHost).SetResource("driver_host", 1).Remote();
  ASSERT_TRUE(WaitForResource("late_host"));
  std::cout << "the late host joined" << std::endl;
  // First an actor: its spec names the copy the head holds.
  auto spot = shoal::Actor(CreateSpot).SetResource("late_host", 1).Remote();
  std::cout << "actor on "
            << shoal::Get(spot.Task(&Spot::Node).Remote(), kGetMs) << std::endl;
  std::cout << "the late host sees the program: "
            << shoal::Get(shoal::Task(SeesFile)
                              .SetResource("late_host", 1)
                              .Remote(shoal::SelfExecutable()),
                          kGetMs)
            << std::endl;
  std::vector<shoal::ObjectRef<std::string>> refs;
  for (int i = 0; i < 8; ++i) {
    refs.push_back(shoal::Task(Where).SetResource("late_host", 1).Remote());
  }
  for (const std::string& where : shoal::Get(refs, kGetMs)) {
    std::cout << "ran on " << where << std::endl;
  }
  std::cout
      << "nested from the late host: "
      << shoal::Get(
             shoal::Task(FromTheLateHost).SetResource("late_host", 1).Remote(),
             kGetMs)
      << std::endl;
  std::cout << "from the driver host, " << shoal::Get(early, kGetMs)
            << std::endl;
  shoal::Shutdown();
}

// ---- The test ----

// Why a mount namespace with a tmpfs cannot be made here, or "".
std::string MountNamespaceUnavailableReason() {
  if (geteuid() != 0) return "not root (a mount namespace needs it)";
  char dir[] = "/tmp/shoal-mntns-XXXXXX";
  if (mkdtemp(dir) == nullptr) return "mkdtemp failed";
  pid_t pid = fork();
  if (pid == 0) {
    if (unshare(CLONE_NEWNS) != 0 ||
        mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("tmpfs", dir, "tmpfs", 0, "size=1m") != 0) {
      _exit(1);
    }
    _exit(0);
  }
  int status = 0;
  if (pid > 0) waitpid(pid, &status, 0);
  rmdir(dir);
  if (pid < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return "cannot make a mount namespace with a tmpfs (unshare/mount "
           "refused)";
  }
  return "";
}

class LateJoinerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why = MountNamespaceUnavailableReason();
    if (!why.empty()) GTEST_SKIP() << "late joiner test skipped: " << why;
  }

  void TearDown() override {
    if (driver_.has_value()) {
      kill(driver_->pid, SIGKILL);
      std::string ignored;
      FinishCommand(*driver_, &ignored);
    }
    if (cluster_) {
      cluster_->Stop();
      EXPECT_EQ(cluster_->sanitizer_reports(), "");
    }
  }

  // The files in the head's blob store (program copies).
  std::vector<std::string> Blobs() const {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(
             cluster_->session_dir(0) + "/blobs", ec)) {
      names.push_back(e.path().filename().string());
    }
    return names;
  }

  // The state of the task named `name`, as `shoal list tasks` says.
  std::string TaskState(const std::string& name) {
    std::string out;
    RunCli({"list", "tasks", "--address", cluster_->address(), "--token",
            cluster_->token(), "--filter", "name=" + name, "--format", "json"},
           &out);
    nlohmann::json list = nlohmann::json::parse(out, nullptr, false);
    if (!list.is_array() || list.empty()) return "";
    return list[0]["state"].get<std::string>();
  }

  std::unique_ptr<TestCluster> cluster_;
  std::optional<RunningCommand> driver_;
};

TEST_F(LateJoinerTest, AHostThatJoinsAfterTheDriverStartedRunsItsTasks) {
  ClusterSpec spec;
  spec.nodes = {{"driver-host", 2, R"({"driver_host": 1})"}};
  auto cluster = TestCluster::Start(spec);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  cluster_ = std::move(*cluster);

  // The driver runs from a folder the late host will not see.
  std::string folder = cluster_->root() + "/program";
  std::string program = folder + "/late_joiner_driver";
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  ASSERT_TRUE(std::filesystem::copy_file(shoal::SelfExecutable(), program, ec))
      << ec.message();
  auto driver = StartInNetns("",
                             {program, "--gtest_also_run_disabled_tests",
                              "--gtest_filter=LateJoinerDriver.DISABLED_*"},
                             {"SHOAL_ADDRESS=" + cluster_->address(),
                              "SHOAL_TOKEN=" + cluster_->token()});
  ASSERT_TRUE(driver.ok()) << driver.status();
  driver_ = *driver;

  // A worker of the driver's host runs before the late host joins.
  std::string state;
  for (int i = 0; i < 600 && state != "RUNNING"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    state = TaskState("FromTheDriverHost");
  }
  ASSERT_EQ(state, "RUNNING");
  // Every node was on the driver's host: nothing was sent.
  EXPECT_THAT(Blobs(), IsEmpty());

  NodeSpec late{kLateNode, 2, R"({"late_host": 4})"};
  late.env = {"SHOAL_HOST_ID=late-host-" + shoal::RandomHex(6)};
  late.hidden_paths = {folder};
  ASSERT_TRUE(cluster_->AddNode(late).ok());

  std::string out;
  int rc = FinishCommand(*driver_, &out);
  driver_.reset();
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("the late host sees the program: 0\n"));
  EXPECT_THAT(out, HasSubstr(absl::StrCat("actor on ", kLateNode, "\n")));
  size_t ran = 0;
  for (size_t at = out.find(absl::StrCat("ran on ", kLateNode, "\n"));
       at != std::string::npos;
       at = out.find(absl::StrCat("ran on ", kLateNode, "\n"), at + 1)) {
    ++ran;
  }
  EXPECT_EQ(ran, 8u) << out;
  EXPECT_THAT(out, HasSubstr(absl::StrCat(
                       "nested from the late host: ", kLateNode, "\n")));
  EXPECT_THAT(
      out,
      HasSubstr(absl::StrCat(
          "from the driver host, started without a copy: ", kLateNode, "\n")));
  EXPECT_THAT(out, Not(HasSubstr("cannot start a worker")));
  // One copy, sent when the late host first needed it (the driver's and
  // the early worker's are the same bytes).
  std::vector<std::string> blobs = Blobs();
  EXPECT_THAT(blobs, SizeIs(1)) << ::testing::PrintToString(blobs);
  for (const std::string& name : blobs) {
    EXPECT_THAT(name, Not(HasSubstr(".partial")));
  }
}

}  // namespace
