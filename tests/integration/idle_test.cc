// Idle returns to idle: whatever a program does and however it ends, within
// two seconds of its end the cluster holds nothing for it: every resource is
// free again, no placement group or demand is left, every object store is
// empty and no process it started lives on.
//
// Each iteration runs one program as a process of its own: this binary
// re-executed as a driver (IdleHelper.DISABLED_Program, told what to do by
// SHOAL_IDLE_PROGRAM and SHOAL_IDLE_ENDING), or a `shoal launch` on the
// slice. The program and its ending are drawn with a seeded RNG:
//
//   SHOAL_IDLE_ITERATIONS  iterations (default 30)
//   SHOAL_IDLE_SEED        the seed (default: random; printed either way)
//   SHOAL_IDLE_PROGRAMS    only these programs, e.g. "tasks,group"
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/process.h"
#include "common/random.h"
#include "gtest/gtest.h"
#include "shoal/api.h"
#include "shoal/shoal.pb.h"
#include "tests/testing/agent_info.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/held.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::testing::ClusterSpec;
using ::shoal::testing::ClusterTest;
using ::shoal::testing::FakeTpuSliceNodes;
using ::shoal::testing::FinishCli;
using ::shoal::testing::NodeSpec;
using ::shoal::testing::RunCli;
using ::shoal::testing::StartCli;
using ::shoal::testing::TestCluster;
using Clock = std::chrono::steady_clock;

constexpr char kInFlight[] = "IDLE-IN-FLIGHT";
constexpr size_t kBigBytes = 256 << 10;  // above the 100 KiB inline threshold
// What the issue asks: idle within 2 s of a program's end, seen to stay idle
// for kSettleMs.
constexpr int64_t kIdleWithinMs = 2000;
constexpr int64_t kSettleMs = 500;

int64_t Step(int64_t i, int64_t sleep_ms) {
  if (sleep_ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
  }
  return i + 1;
}
int64_t Outer(int64_t i, int64_t sleep_ms);
int64_t SumBytes(shoal::Buffer in) {
  int64_t sum = 0;
  for (size_t i = 0; i < in.size(); ++i) sum += in.data()[i];
  return sum;
}
shoal::Buffer MakeBig(int64_t seed) {
  std::vector<uint8_t> bytes(kBigBytes, static_cast<uint8_t>(seed));
  return shoal::Buffer::Copy(bytes.data(), bytes.size());
}
// An actor that holds what it is given and works slowly.
class Holder {
 public:
  int64_t Work(int64_t ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return ++calls_;
  }

 private:
  int64_t calls_ = 0;
};
Holder* CreateHolder() { return new Holder(); }
// A task that makes an actor of its own and calls it.
int64_t ActorInTask(int64_t ms);
SHOAL_REMOTE(Step, Outer, SumBytes, MakeBig, CreateHolder, &Holder::Work,
             ActorInTask);

int64_t ActorInTask(int64_t ms) {
  auto holder = shoal::Actor(CreateHolder).Remote();
  return shoal::Get(holder.Task(&Holder::Work).Remote(ms));
}

// A task that submits a task and waits for it.
int64_t Outer(int64_t i, int64_t sleep_ms) {
  return shoal::Get(shoal::Task(Step).Remote(i, sleep_ms)) + 1;
}

// ---- The programs ----

enum class Program {
  kTasks,        // 200 small tasks, then Get
  kNested,       // tasks that submit tasks
  kBigObject,    // a Put above the inline threshold and tasks taking it
  kGroup,        // a STRICT_SPREAD group of 2 CPU bundles, a task in each
  kActors,       // actors holding a CPU, a TPU chip and nothing, busy
  kLaunch,       // shoal launch --per-device of a short command
  kLaunchFails,  // a launch whose ranks exit 3
  kLaunchCtrlC,  // a launch interrupted with SIGINT once every rank is up
};
constexpr Program kPrograms[] = {Program::kTasks,       Program::kNested,
                                 Program::kBigObject,   Program::kGroup,
                                 Program::kActors,      Program::kLaunch,
                                 Program::kLaunchFails, Program::kLaunchCtrlC};

const char* ProgramName(Program p) {
  switch (p) {
    case Program::kTasks:
      return "tasks";
    case Program::kNested:
      return "nested";
    case Program::kBigObject:
      return "big-object";
    case Program::kGroup:
      return "group";
    case Program::kActors:
      return "actors";
    case Program::kLaunch:
      return "launch";
    case Program::kLaunchFails:
      return "launch-fails";
    case Program::kLaunchCtrlC:
      return "launch-ctrl-c";
  }
  return "?";
}

// How a driver program (tasks, nested, big-object, group) ends.
enum class Ending {
  kShutdown,      // finishes its work, Shutdown(), returns
  kExit,          // finishes its work, std::exit(0) without Shutdown
  kExitInFlight,  // std::exit(0) while its work is in flight
  kAbort,         // std::abort() while its work is in flight
  kErrorExit,     // an error it does not handle, exit code 2, in flight
  kKilled,        // SIGKILL from the test while its work is in flight
};
constexpr Ending kEndings[] = {Ending::kShutdown,     Ending::kExit,
                               Ending::kExitInFlight, Ending::kAbort,
                               Ending::kErrorExit,    Ending::kKilled};

const char* EndingName(Ending e) {
  switch (e) {
    case Ending::kShutdown:
      return "shutdown";
    case Ending::kExit:
      return "exit";
    case Ending::kExitInFlight:
      return "exit-in-flight";
    case Ending::kAbort:
      return "abort";
    case Ending::kErrorExit:
      return "error-exit-2";
    case Ending::kKilled:
      return "killed";
  }
  return "?";
}

// The work of a driver program; with `finish` false it returns once the work
// is submitted (and so in flight), else once every result is in.
void DoWork(Program program, bool finish) {
  switch (program) {
    case Program::kTasks: {
      std::vector<shoal::ObjectRef<int64_t>> refs;
      for (int64_t i = 0; i < 200; ++i) {
        refs.push_back(shoal::Task(Step).Remote(i, int64_t{2}));
      }
      if (finish) shoal::Get(refs);
      return;
    }
    case Program::kNested: {
      std::vector<shoal::ObjectRef<int64_t>> refs;
      for (int64_t i = 0; i < 4; ++i) {
        refs.push_back(shoal::Task(Outer).Remote(i, int64_t{50}));
      }
      if (finish) shoal::Get(refs);
      return;
    }
    case Program::kBigObject: {
      std::vector<uint8_t> bytes(kBigBytes, 7);
      auto ref = shoal::PutBuffer(bytes.data(), bytes.size());
      // One here or anywhere, one on a TPU host (so the object is pulled
      // there), and a large result made on a TPU host.
      auto here = shoal::Task(SumBytes).Remote(ref);
      auto there = shoal::Task(SumBytes).SetResource("TPU", 1).Remote(ref);
      auto made = shoal::Task(MakeBig).SetResource("TPU", 1).Remote(int64_t{3});
      auto sum = shoal::Task(SumBytes).Remote(made);
      if (finish) {
        if (shoal::Get(here) != shoal::Get(there)) {
          throw std::runtime_error("the sums differ");
        }
        shoal::Get(sum);
      }
      return;
    }
    case Program::kGroup: {
      auto pg = shoal::CreatePlacementGroup(
          {"",
           {{{"CPU", 1}}, {{"CPU", 1}}},
           shoal::PlacementStrategy::kStrictSpread});
      if (!pg.Wait(30000))
        throw std::runtime_error("the group was not created");
      std::vector<shoal::ObjectRef<int64_t>> refs;
      for (int bundle = 0; bundle < 2; ++bundle) {
        refs.push_back(shoal::Task(Step)
                           .SetPlacementGroup(pg, bundle)
                           .Remote(int64_t{bundle}, int64_t{300}));
      }
      if (finish) shoal::Get(refs);
      return;
    }
    case Program::kActors: {
      auto cpu = shoal::Actor(CreateHolder).SetResource("CPU", 1).Remote();
      auto chip = shoal::Actor(CreateHolder).SetResource("TPU", 1).Remote();
      auto none = shoal::Actor(CreateHolder).SetMaxRestarts(1).Remote();
      std::vector<shoal::ObjectRef<int64_t>> refs;
      for (int i = 0; i < 3; ++i) {
        refs.push_back(cpu.Task(&Holder::Work).Remote(int64_t{100}));
        refs.push_back(chip.Task(&Holder::Work).Remote(int64_t{100}));
        refs.push_back(none.Task(&Holder::Work).Remote(int64_t{100}));
      }
      refs.push_back(shoal::Task(ActorInTask).Remote(int64_t{200}));
      if (finish) shoal::Get(refs);
      return;
    }
    default:
      throw std::runtime_error("not a driver program");
  }
}

// The driver program of one iteration, run by IdleReturnsToIdle as a process
// of its own.
TEST(IdleHelper, DISABLED_Program) {
  const char* program_env = getenv("SHOAL_IDLE_PROGRAM");
  const char* ending_env = getenv("SHOAL_IDLE_ENDING");
  ASSERT_NE(program_env, nullptr);
  ASSERT_NE(ending_env, nullptr);
  auto program = static_cast<Program>(std::atoi(program_env));
  auto ending = static_cast<Ending>(std::atoi(ending_env));
  shoal::Init();
  bool finish = ending == Ending::kShutdown || ending == Ending::kExit;
  DoWork(program, finish);
  if (!finish) {
    printf("%s\n", kInFlight);
    fflush(stdout);
  }
  switch (ending) {
    case Ending::kShutdown:
      shoal::Shutdown();
      return;
    case Ending::kExit:
    case Ending::kExitInFlight:
      std::exit(0);
    case Ending::kAbort:
      std::abort();
    case Ending::kErrorExit:
      try {
        throw std::runtime_error("an error the program does not handle");
      } catch (const std::exception& e) {
        fprintf(stderr, "error: %s\n", e.what());
        std::exit(2);
      }
    case Ending::kKilled:
      // Stays while its work runs, until the test kills it.
      std::this_thread::sleep_for(std::chrono::seconds(60));
      std::exit(0);
  }
}

// ---- What the cluster holds ----

// /dev/shm as the idle cluster left it before the first program.
std::set<std::string> g_shm_when_idle;

std::string WhatIsHeld(const TestCluster& cluster, const std::string& marker) {
  return shoal::testing::WhatIsHeld(
      cluster, {.shm_when_idle = g_shm_when_idle, .marker = marker});
}

// ---- Running a program ----

// A child's output, read as it comes.
class ChildOutput {
 public:
  explicit ChildOutput(int fd) : fd_(fd) {
    fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
  }
  ~ChildOutput() {
    if (fd_ >= 0) close(fd_);
  }
  ChildOutput(const ChildOutput&) = delete;
  ChildOutput& operator=(const ChildOutput&) = delete;

  // Reads until `done(text)` holds, the output ends or `timeout` passes;
  // returns whether `done` held.
  template <typename Done>
  bool ReadUntil(Done done, std::chrono::milliseconds timeout) {
    auto deadline = Clock::now() + timeout;
    while (!done(text_)) {
      if (fd_ < 0) return false;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - Clock::now())
                      .count();
      if (left <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 100))) <= 0) {
        continue;
      }
      char buf[4096];
      ssize_t n = read(fd_, buf, sizeof(buf));
      if (n > 0) {
        text_.append(buf, n);
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        close(fd_);
        fd_ = -1;
      }
    }
    return true;
  }
  // Reads to the end of the output (or `timeout`).
  void ReadToEnd(std::chrono::milliseconds timeout) {
    ReadUntil([this](const std::string&) { return fd_ < 0; }, timeout);
  }
  // Hands the descriptor over (to FinishCli).
  int Release() {
    int fd = fd_;
    fd_ = -1;
    if (fd >= 0) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
  }
  const std::string& text() const { return text_; }

 private:
  int fd_;
  std::string text_;
};

// Waits for `pid` up to `timeout`, then kills it; returns its wait status.
int Reap(pid_t pid, std::chrono::milliseconds timeout, bool* timed_out) {
  auto deadline = Clock::now() + timeout;
  int status = 0;
  while (true) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0) return -1;
    if (Clock::now() > deadline) {
      *timed_out = true;
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Runs a driver program to its end; returns "" or what went wrong.
std::string RunDriver(Program program, Ending ending,
                      const std::string& marker) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  pid_t pid = fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[1]);
    setenv("SHOAL_IDLE_PROGRAM",
           std::to_string(static_cast<int>(program)).c_str(), 1);
    setenv("SHOAL_IDLE_ENDING",
           std::to_string(static_cast<int>(ending)).c_str(), 1);
    std::string marker_arg = "--idle_marker=" + marker;
    execl("/proc/self/exe", "idle_test",
          "--gtest_filter=IdleHelper.DISABLED_Program",
          "--gtest_also_run_disabled_tests", marker_arg.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  ChildOutput output(fds[0]);
  std::string problem;
  if (ending != Ending::kShutdown && ending != Ending::kExit) {
    bool in_flight = output.ReadUntil(
        [](const std::string& t) {
          return t.find(kInFlight) != std::string::npos;
        },
        std::chrono::seconds(30));
    if (!in_flight) problem = "it never said its work was in flight; ";
    if (ending == Ending::kKilled) kill(pid, SIGKILL);
  }
  bool timed_out = false;
  int status = Reap(pid, std::chrono::seconds(30), &timed_out);
  output.ReadToEnd(std::chrono::seconds(2));
  if (timed_out) problem += "it did not end within 30 s; ";
  std::string expected;
  switch (ending) {
    case Ending::kShutdown:
    case Ending::kExit:
    case Ending::kExitInFlight:
      expected = shoal::DescribeWaitStatus(W_EXITCODE(0, 0));
      break;
    case Ending::kAbort:
      expected = shoal::DescribeWaitStatus(W_EXITCODE(0, SIGABRT));
      break;
    case Ending::kErrorExit:
      expected = shoal::DescribeWaitStatus(W_EXITCODE(2, 0));
      break;
    case Ending::kKilled:
      expected = shoal::DescribeWaitStatus(W_EXITCODE(0, SIGKILL));
      break;
  }
  if (shoal::DescribeWaitStatus(status) != expected) {
    problem += absl::StrCat("it ended with ", shoal::DescribeWaitStatus(status),
                            ", not ", expected, "; ");
  }
  if (!problem.empty()) problem += "its output:\n" + output.text();
  return problem;
}

// Runs a launch program to its end; returns "" or what went wrong.
std::string RunLaunch(const TestCluster& cluster, Program program,
                      const std::string& marker) {
  std::string script;
  int expected = 0;
  switch (program) {
    case Program::kLaunch:
      script = "sleep 0.2; : " + marker;
      break;
    case Program::kLaunchFails:
      script = "exit 3; : " + marker;
      expected = 3;
      break;
    default:
      script = "echo up; sleep 20; : " + marker;
      expected = 130;
      break;
  }
  int fd = -1;
  pid_t pid =
      StartCli({"launch", "--address", cluster.address(), "--token",
                cluster.token(), "--per-device", "--", "sh", "-c", script},
               &fd);
  if (pid < 0) return "the launch did not start";
  ChildOutput output(fd);
  std::string problem;
  if (program == Program::kLaunchCtrlC) {
    auto all_up = [](const std::string& t) {
      size_t n = 0;
      for (size_t at = t.find("] up"); at != std::string::npos;
           at = t.find("] up", at + 1)) {
        ++n;
      }
      return n >= 8;
    };
    if (!output.ReadUntil(all_up, std::chrono::seconds(30))) {
      problem = "not every rank said up within 30 s; ";
    }
    kill(pid, SIGINT);
  }
  std::string text = output.text();
  int rc = FinishCli(pid, output.Release(), &text);
  if (rc != expected) {
    problem += absl::StrCat("the launch exited ", rc, ", not ", expected, "; ");
  }
  if (!problem.empty()) problem += "its output:\n" + text;
  return problem;
}

// ---- The test ----

int64_t EnvInt(const char* name, int64_t otherwise) {
  const char* v = getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoll(v, nullptr, 10) : otherwise;
}

// cpu-0 (the head's node, 2 CPUs) and the two hosts of a simulated TPU
// v5p-16 slice (tpu-0 and tpu-1, 4 chips and 2 CPUs each).
class IdleTest : public ClusterTest {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shoal-idle-tpu-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    roots_ = tmpl;
    auto slice = FakeTpuSliceNodes(roots_, "v5p-16", 2, 2);
    ASSERT_TRUE(slice.ok()) << slice.status();
    ClusterSpec spec;
    spec.nodes = {NodeSpec{"cpu-0", 2, ""}};
    spec.nodes.insert(spec.nodes.end(), slice->begin(), slice->end());
    auto cluster = TestCluster::Start(spec);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    cluster_->ExportEnvironment();  // the programs' Init() finds the cluster
    cluster_->Connect();
  }
  void TearDown() override {
    shoal::Shutdown();
    ClusterTest::TearDown();
    std::error_code ec;
    if (!roots_.empty()) std::filesystem::remove_all(roots_, ec);
  }

  std::string roots_;
};

TEST_F(IdleTest, IdleReturnsToIdle) {
  const int64_t iterations = EnvInt("SHOAL_IDLE_ITERATIONS", 30);
  const uint64_t seed = static_cast<uint64_t>(
      EnvInt("SHOAL_IDLE_SEED", static_cast<int64_t>(std::random_device()())));
  printf("idle tier: seed %llu (SHOAL_IDLE_SEED=%llu reruns it)\n",
         static_cast<unsigned long long>(seed),
         static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  // SHOAL_IDLE_PROGRAMS=tasks,group,...: only those (to narrow a failure).
  std::vector<Program> programs;
  const char* only = getenv("SHOAL_IDLE_PROGRAMS");
  for (Program p : kPrograms) {
    if (only == nullptr || *only == '\0' ||
        absl::StrCat(",", only, ",")
                .find(absl::StrCat(",", ProgramName(p), ",")) !=
            std::string::npos) {
      programs.push_back(p);
    }
  }
  ASSERT_FALSE(programs.empty()) << "SHOAL_IDLE_PROGRAMS names no program";
  // It starts idle.
  std::string held;
  for (int i = 0; i < 100; ++i) {
    held = WhatIsHeld(*cluster_, "shoal-idle-none");
    if (held.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(held, "") << "the fresh cluster is not idle";
  g_shm_when_idle = shoal::testing::ShmEntries();
  g_shm_when_idle.insert("");  // never empty: the check is on

  int failed = 0;
  int64_t iterations_run = iterations;
  for (int64_t it = 0; it < iterations; ++it) {
    Program program = programs[rng() % programs.size()];
    bool driver = program == Program::kTasks || program == Program::kNested ||
                  program == Program::kBigObject ||
                  program == Program::kGroup || program == Program::kActors;
    Ending ending = kEndings[rng() % std::size(kEndings)];
    std::string what =
        driver ? absl::StrCat(ProgramName(program), " / ", EndingName(ending))
               : ProgramName(program);
    std::string marker = absl::StrCat("shoal-idle-", seed % 100000, "-", it,
                                      "-", shoal::RandomHex(4));

    std::string problem = driver ? RunDriver(program, ending, marker)
                                 : RunLaunch(*cluster_, program, marker);
    EXPECT_EQ(problem, "") << "iteration " << it << ": " << what;

    auto ended = Clock::now();
    auto since = [&] {
      return std::chrono::duration_cast<std::chrono::milliseconds>(
                 Clock::now() - ended)
          .count();
    };
    // Idle must hold for kSettleMs: the head hears of leases from the agents
    // a little late, so a view taken right after a program's end may not
    // show yet what it started.
    int64_t idle_since = -1;
    while (true) {
      held = WhatIsHeld(*cluster_, marker);
      int64_t now = since();
      if (!held.empty()) {
        idle_since = -1;
        if (now >= kIdleWithinMs) break;
      } else {
        if (idle_since < 0) {
          if (now > kIdleWithinMs) break;
          idle_since = now;
        }
        if (now - idle_since >= kSettleMs) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    bool idle = held.empty() && idle_since >= 0 && idle_since <= kIdleWithinMs;
    if (idle && problem.empty()) {
      printf("iteration %lld: %s: idle in %lld ms\n",
             static_cast<long long>(it), what.c_str(),
             static_cast<long long>(idle_since));
      fflush(stdout);
      continue;
    }
    ++failed;
    if (idle) continue;
    if (held.empty()) {
      ADD_FAILURE() << "iteration " << it << ": " << what << ": idle only from "
                    << since() << " ms after the program ended";
      continue;
    }
    ADD_FAILURE() << "iteration " << it << ": " << what
                  << ": not idle 2 s after the program ended; still held:"
                  << held;
    // For how long: wait up to 15 s more, then give up on the cluster (later
    // iterations would only see this one's leftovers).
    while (!held.empty() && since() < 17000) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      held = WhatIsHeld(*cluster_, marker);
    }
    if (held.empty()) {
      printf("iteration %lld: %s: idle only after %lld ms\n",
             static_cast<long long>(it), what.c_str(),
             static_cast<long long>(since()));
      fflush(stdout);
      continue;
    }
    ADD_FAILURE() << "iteration " << it << ": " << what
                  << ": still not idle after " << since()
                  << " ms; stopping. Held:" << held;
    printf("iteration %lld: %s: NOT idle after %lld ms\n",
           static_cast<long long>(it), what.c_str(),
           static_cast<long long>(since()));
    iterations_run = it + 1;
    break;
  }
  printf("idle tier: %lld iterations, %d failed\n",
         static_cast<long long>(iterations_run), failed);
  EXPECT_EQ(failed, 0) << "seed " << seed;
}

}  // namespace
