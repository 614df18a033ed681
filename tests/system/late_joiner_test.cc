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
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/random.h"
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

// Prints "`what`: <its value>", or "`what` failed: <why>" (a failure of
// the driver), so that each step says how it went.
template <typename Fn>
void Report(const std::string& what, Fn fn) {
  std::ostringstream said;
  try {
    auto value = fn();
    said << what << ": " << value;
  } catch (const std::exception& e) {
    said << what << " failed: " << e.what();
    ADD_FAILURE() << said.str();
  }
  std::cout << said.str() << std::endl;
}

// The drivers, run by LateJoinerTest as separate processes from a copy of
// this binary that the late host cannot see.

// Tasks: the driver's own, one nested in a task on the late host, and one
// nested in a task of the driver's host that started before any copy.
TEST(LateJoinerDriver, DISABLED_Tasks) {
  shoal::Init();
  auto early =
      shoal::Task(FromTheDriverHost).SetResource("driver_host", 1).Remote();
  ASSERT_TRUE(WaitForResource("late_host"));
  Report("the late host sees the program", [] {
    return shoal::Get(shoal::Task(SeesFile)
                          .SetResource("late_host", 1)
                          .Remote(shoal::SelfExecutable()),
                      kGetMs);
  });
  std::vector<shoal::ObjectRef<std::string>> refs;
  for (int i = 0; i < 8; ++i) {
    refs.push_back(shoal::Task(Where).SetResource("late_host", 1).Remote());
  }
  for (int i = 0; i < 8; ++i) {
    Report("ran", [&] { return "on " + shoal::Get(refs[i], kGetMs); });
  }
  Report("nested from the late host", [] {
    return shoal::Get(
        shoal::Task(FromTheLateHost).SetResource("late_host", 1).Remote(),
        kGetMs);
  });
  Report("from the driver host", [&] { return shoal::Get(early, kGetMs); });
  shoal::Shutdown();
}

// An actor, made before any task of the driver met the late host.
TEST(LateJoinerDriver, DISABLED_Actor) {
  shoal::Init();
  std::cout << "connected: " << shoal::Get(shoal::Task(Where).Remote(), kGetMs)
            << std::endl;
  ASSERT_TRUE(WaitForResource("late_host"));
  Report("actor", [] {
    auto spot = shoal::Actor(CreateSpot).SetResource("late_host", 1).Remote();
    return "on " + shoal::Get(spot.Task(&Spot::Node).Remote(), kGetMs);
  });
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

  // Waits (up to a minute) until the task named `name` is in `state`, as
  // `shoal list tasks` says; its last state.
  std::string WaitForTask(const std::string& name, const std::string& state) {
    std::string now;
    for (int i = 0; i < 600 && now != state; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::string out;
      RunCli(
          {"list", "tasks", "--address", cluster_->address(), "--token",
           cluster_->token(), "--filter", "name=" + name, "--format", "json"},
          &out);
      nlohmann::json list = nlohmann::json::parse(out, nullptr, false);
      if (list.is_array() && !list.empty()) {
        now = list[0]["state"].get<std::string>();
      }
    }
    return now;
  }

  // Starts a cluster of one node (the driver's host), then the driver
  // LateJoinerDriver.DISABLED_<driver> from a folder that the late host
  // will not see; once task `task` of the driver is in `state`, a node of
  // another host joins. The driver's output once it ended, and *rc its
  // exit code. Checks that nothing was sent before the join.
  std::string RunAcrossTheJoin(const std::string& driver,
                               const std::string& task,
                               const std::string& state, int* rc) {
    ClusterSpec spec;
    spec.nodes = {{"driver-host", 2, R"({"driver_host": 1})"}};
    auto cluster = TestCluster::Start(spec);
    if (!cluster.ok()) return cluster.status().ToString();
    cluster_ = std::move(*cluster);
    std::string folder = cluster_->root() + "/program";
    std::string program = folder + "/late_joiner_driver";
    std::error_code ec;
    std::filesystem::create_directories(folder, ec);
    if (!std::filesystem::copy_file(shoal::SelfExecutable(), program, ec)) {
      return "cannot copy the program: " + ec.message();
    }
    auto started =
        StartInNetns("",
                     {program, "--gtest_also_run_disabled_tests",
                      "--gtest_filter=LateJoinerDriver.DISABLED_" + driver},
                     {"SHOAL_ADDRESS=" + cluster_->address(),
                      "SHOAL_TOKEN=" + cluster_->token()});
    if (!started.ok()) return started.status().ToString();
    driver_ = *started;
    EXPECT_EQ(WaitForTask(task, state), state);
    // Every node was on the driver's host: nothing was sent.
    EXPECT_THAT(Blobs(), IsEmpty());
    NodeSpec late{kLateNode, 2, R"({"late_host": 4})"};
    late.env = {"SHOAL_HOST_ID=late-host-" + shoal::RandomHex(6)};
    late.hidden_paths = {folder};
    absl::Status joined = cluster_->AddNode(late);
    EXPECT_TRUE(joined.ok()) << joined;
    std::string out;
    *rc = FinishCommand(*driver_, &out);
    driver_.reset();
    return out;
  }

  // After RunAcrossTheJoin: the head holds one copy of the program.
  void ExpectOneCopy() {
    std::vector<std::string> blobs = Blobs();
    EXPECT_THAT(blobs, SizeIs(1)) << ::testing::PrintToString(blobs);
    for (const std::string& name : blobs) {
      EXPECT_THAT(name, Not(HasSubstr(".partial")));
    }
  }

  std::unique_ptr<TestCluster> cluster_;
  std::optional<RunningCommand> driver_;
};

TEST_F(LateJoinerTest, AHostThatJoinsAfterTheDriverStartedRunsItsTasks) {
  int rc = -1;
  // The task of the driver's host runs before the late host joins.
  std::string out =
      RunAcrossTheJoin("Tasks", "FromTheDriverHost", "RUNNING", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("the late host sees the program: 0\n"));
  size_t ran = 0;
  const std::string line = absl::StrCat("ran: on ", kLateNode, "\n");
  for (size_t at = out.find(line); at != std::string::npos;
       at = out.find(line, at + 1)) {
    ++ran;
  }
  EXPECT_EQ(ran, 8u) << out;
  EXPECT_THAT(out, HasSubstr(absl::StrCat(
                       "nested from the late host: ", kLateNode, "\n")));
  EXPECT_THAT(
      out,
      HasSubstr(absl::StrCat(
          "from the driver host: started without a copy: ", kLateNode, "\n")));
  // The driver's copy and the early worker's are the same bytes.
  ExpectOneCopy();
}

TEST_F(LateJoinerTest, AnActorMadeAfterAHostJoinedRunsThere) {
  int rc = -1;
  std::string out = RunAcrossTheJoin("Actor", "Where", "FINISHED", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr(absl::StrCat("actor: on ", kLateNode, "\n")));
  ExpectOneCopy();
}

}  // namespace
