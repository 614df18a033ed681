// The shared-memory transport with ranks as processes (forked before any
// thread starts), over a store in a temp directory: data crosses processes,
// a rank that dies is named, and nothing is left behind.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/file_store.h"
#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shoal/collective.h"

namespace shoal::collective {
namespace {

using ::testing::HasSubstr;

class ProcessRanksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shoal-shm-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  GroupOptions Options() const {
    GroupOptions options;
    options.store = internal::FileStore(dir_);
    options.host_id = "this-host";
    options.timeout = std::chrono::milliseconds(10000);
    return options;
  }

  // Runs body(rank) in `world` forked processes; a rank's exit code is
  // body's result, 3 when it threw (the message goes to error(rank)).
  std::vector<int> RunProcesses(int world,
                                const std::function<int(int)>& body) {
    std::vector<pid_t> pids;
    for (int r = 0; r < world; ++r) {
      pid_t pid = fork();
      if (pid == 0) {
        int code = 0;
        try {
          code = body(r);
        } catch (const std::exception& e) {
          WriteFile(ErrorPath(r), e.what()).IgnoreError();
          code = 3;
        }
        _exit(code);
      }
      pids.push_back(pid);
    }
    std::vector<int> codes;
    for (pid_t pid : pids) {
      int status = 0;
      waitpid(pid, &status, 0);
      codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128);
    }
    return codes;
  }

  std::string ErrorPath(int rank) const {
    return absl::StrCat(dir_, "/error-", rank);
  }
  std::string Error(int rank) const {
    return ReadFile(ErrorPath(rank)).value_or("");
  }

  std::string dir_;
};

TEST_F(ProcessRanksTest, AllReduceAllGatherAndBroadcastAcrossProcesses) {
  const int world = 4;
  const size_t count = (1 << 20) + 3;
  std::vector<int> codes = RunProcesses(world, [&](int rank) {
    auto group = Group::Create("procs", world, rank, Options());
    if (group->backend() != Backend::kSharedMemory) return 10;
    std::vector<float> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = static_cast<float>(i % 97) + rank;
    AllReduce(*group, v);
    for (size_t i = 0; i < count; ++i) {
      if (v[i] != 4 * static_cast<float>(i % 97) + 6) return 11;
    }
    std::vector<int32_t> mine(1000, rank);
    std::vector<int32_t> all(4000);
    AllGather(*group, {.input = mine.data(),
                       .output = all.data(),
                       .count = 1000,
                       .type = DataType::kInt32});
    for (int r = 0; r < world; ++r) {
      if (all[r * 1000 + 999] != r) return 12;
    }
    std::vector<double> b(5000, rank);
    Broadcast(*group, {.data = b.data(),
                       .count = b.size(),
                       .type = DataType::kFloat64,
                       .root = 2});
    if (b[4999] != 2) return 13;
    Barrier(*group);
    return 0;
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(codes[r], 0) << "rank " << r << ": " << Error(r);
  }
}

TEST_F(ProcessRanksTest, ARankThatDiesMidRunIsNamedByTheOthers) {
  const int world = 4;
  std::vector<int> codes = RunProcesses(world, [&](int rank) {
    auto group = Group::Create("dying", world, rank, Options());
    std::vector<float> v(1 << 20, 1.0f);
    AllReduce(*group, v);
    if (rank == 3) _exit(0);  // gone before the second all-reduce
    auto start = std::chrono::steady_clock::now();
    try {
      AllReduce(*group, v);
    } catch (const CollectiveError& e) {
      auto took = std::chrono::steady_clock::now() - start;
      bool named = e.ranks() == std::vector<int>{3};
      WriteFile(ErrorPath(rank), e.what()).IgnoreError();
      if (!named) return 20;
      return took < std::chrono::seconds(3) ? 0 : 21;
    }
    return 22;  // succeeded without rank 3
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(codes[r], 0) << "rank " << r << ": " << Error(r);
    EXPECT_THAT(Error(r), HasSubstr("all-reduce of group 'dying' failed: "
                                    "rank 3 (pid "));
    EXPECT_THAT(Error(r), HasSubstr("died"));
  }
}

TEST_F(ProcessRanksTest, NothingIsLeftOpenAfterTheGroupIsGone) {
  auto count_fds = [] {
    int n = 0;
    for ([[maybe_unused]] const auto& entry :
         std::filesystem::directory_iterator("/proc/self/fd")) {
      ++n;
    }
    return n;
  };
  std::vector<int> codes = RunProcesses(2, [&](int rank) {
    int before = count_fds();
    {
      auto group = Group::Create("fds", 2, rank, Options());
      std::vector<float> v(100000, 1.0f);
      AllReduce(*group, v);
      Barrier(*group);
    }
    return count_fds() == before ? 0 : 30;
  });
  EXPECT_EQ(codes[0], 0) << Error(0);
  EXPECT_EQ(codes[1], 0) << Error(1);
}

}  // namespace
}  // namespace shoal::collective
