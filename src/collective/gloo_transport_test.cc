// The Gloo transport, with ranks as threads over an in-memory store, and as
// forked processes over a file store where a rank has to die.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "collective/file_store.h"
#include "collective/reduce.h"
#include "collective/test_buffer.h"
#include "collective/transport.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::collective::internal {
namespace {

using std::chrono::milliseconds;
using ::testing::Contains;
using ::testing::HasSubstr;

TransportOptions OptionsFor(Store* store, const std::string& prefix, int size,
                            int rank,
                            milliseconds timeout = milliseconds(20000)) {
  TransportOptions options;
  options.key_prefix = prefix;
  options.size = size;
  options.rank = rank;
  options.store = store;
  options.timeout = timeout;
  options.interface_address = "127.0.0.1";
  return options;
}

std::string UniquePrefix() {
  static std::atomic<int> next{0};
  return absl::StrCat("gloo_test/", getpid(), "/", next++);
}

// Runs body(rank, transport) on `size` threads, each with its own transport.
void RunRanks(int size, const std::function<void(int, Transport&)>& body) {
  std::shared_ptr<Store> store = InProcessStore();
  std::string prefix = UniquePrefix();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      auto transport =
          CreateGlooTransport(OptionsFor(store.get(), prefix, size, rank));
      ASSERT_TRUE(transport.ok()) << transport.status();
      body(rank, **transport);
    });
  }
  for (auto& thread : threads) thread.join();
}

// Values small enough that every reduction is exact in every type,
// bfloat16 included (products of four values up to 3 fit in 8 bits).
double ValueOf(int rank, size_t i) { return 1 + (rank + i) % 3; }

constexpr DataType kTypes[] = {DataType::kFloat32, DataType::kBFloat16,
                               DataType::kFloat64, DataType::kInt32,
                               DataType::kInt64};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin,
                             ReduceOp::kProduct};
constexpr size_t kCounts[] = {0, 1, 7, 1000, 4099};

std::string CaseName(DataType type, ReduceOp op, size_t count) {
  return absl::StrCat("type ", static_cast<int>(type), " op ",
                      static_cast<int>(op), " count ", count);
}

class GlooWorldTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooWorldTest, AllReduceEveryTypeOpAndSize) {
  const int size = GetParam();
  RunRanks(size, [&](int rank, Transport& transport) {
    uint32_t tag = 0;
    for (DataType type : kTypes) {
      for (ReduceOp op : kOps) {
        for (size_t count : kCounts) {
          TypedBuffer buffer(type, count);
          for (size_t i = 0; i < count; ++i) buffer.Set(i, ValueOf(rank, i));
          ASSERT_TRUE(
              transport.AllReduce(buffer.data(), count, type, op, tag++).ok())
              << CaseName(type, op, count);
          for (size_t i = 0; i < count; ++i) {
            double want = ValueOf(0, i);
            for (int r = 1; r < size; ++r)
              want = Combine(op, want, ValueOf(r, i));
            ASSERT_EQ(buffer.Get(i), want)
                << CaseName(type, op, count) << " element " << i;
          }
        }
      }
    }
  });
}

TEST_P(GlooWorldTest, AllGatherInRankOrder) {
  const int size = GetParam();
  RunRanks(size, [&](int rank, Transport& transport) {
    for (DataType type : kTypes) {
      for (size_t count : kCounts) {
        TypedBuffer input(type, count);
        TypedBuffer output(type, count * size);
        for (size_t i = 0; i < count; ++i) input.Set(i, rank * 10.0 + i % 10);
        ASSERT_TRUE(
            transport.AllGather(input.data(), output.data(), count, type, 7)
                .ok());
        for (int r = 0; r < size; ++r) {
          for (size_t i = 0; i < count; ++i) {
            ASSERT_EQ(output.Get(r * count + i), r * 10.0 + i % 10)
                << CaseName(type, ReduceOp::kSum, count) << " from rank " << r;
          }
        }
      }
    }
  });
}

TEST_P(GlooWorldTest, ReduceScatterGivesEachRankItsBlock) {
  const int size = GetParam();
  RunRanks(size, [&](int rank, Transport& transport) {
    uint32_t tag = 100;
    for (DataType type : kTypes) {
      for (ReduceOp op : kOps) {
        for (size_t count : kCounts) {
          TypedBuffer input(type, count * size);
          TypedBuffer output(type, count);
          for (size_t i = 0; i < count * size; ++i) {
            input.Set(i, ValueOf(rank, i));
          }
          ASSERT_TRUE(transport
                          .ReduceScatter(input.data(), output.data(), count,
                                         type, op, tag++)
                          .ok())
              << CaseName(type, op, count);
          for (size_t i = 0; i < count; ++i) {
            size_t at = rank * count + i;
            double want = ValueOf(0, at);
            for (int r = 1; r < size; ++r) {
              want = Combine(op, want, ValueOf(r, at));
            }
            ASSERT_EQ(output.Get(i), want)
                << CaseName(type, op, count) << " element " << i;
          }
        }
      }
    }
  });
}

TEST_P(GlooWorldTest, BroadcastFromEveryRoot) {
  const int size = GetParam();
  RunRanks(size, [&](int rank, Transport& transport) {
    for (int root = 0; root < size; ++root) {
      for (DataType type : kTypes) {
        for (size_t count : kCounts) {
          TypedBuffer buffer(type, count);
          for (size_t i = 0; i < count; ++i) {
            buffer.Set(i, rank == root ? root * 10.0 + i % 10 : -1.0);
          }
          ASSERT_TRUE(
              transport.Broadcast(buffer.data(), count, type, root, 3).ok());
          for (size_t i = 0; i < count; ++i) {
            ASSERT_EQ(buffer.Get(i), root * 10.0 + i % 10)
                << CaseName(type, ReduceOp::kSum, count) << " root " << root;
          }
        }
      }
    }
  });
}

TEST_P(GlooWorldTest, BarrierWaitsForEveryRank) {
  const int size = GetParam();
  std::atomic<int> arrived{0};
  RunRanks(size, [&](int rank, Transport& transport) {
    for (int round = 1; round <= 3; ++round) {
      if (rank == size - 1) std::this_thread::sleep_for(milliseconds(50));
      arrived++;
      ASSERT_TRUE(transport.Barrier(round).ok());
      EXPECT_GE(arrived.load(), round * size);
      ASSERT_TRUE(transport.Barrier(round + 100).ok());
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooWorldTest,
                         ::testing::Values(1, 2, 3, 4), [](const auto& info) {
                           return absl::StrCat("ranks", info.param);
                         });

TEST(GlooTransportTest, LargeAllReduceAndReduceScatter) {
  constexpr size_t kCount = 1 << 20;
  constexpr int kSize = 3;
  RunRanks(kSize, [&](int rank, Transport& transport) {
    std::vector<float> data(kCount);
    for (size_t i = 0; i < kCount; ++i) data[i] = ValueOf(rank, i);
    ASSERT_TRUE(transport
                    .AllReduce(data.data(), kCount, DataType::kFloat32,
                               ReduceOp::kSum, 1)
                    .ok());
    for (size_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(data[i], ValueOf(0, i) + ValueOf(1, i) + ValueOf(2, i)) << i;
    }
    std::vector<int64_t> input(kCount * kSize, rank + 1);
    std::vector<int64_t> output(kCount);
    ASSERT_TRUE(transport
                    .ReduceScatter(input.data(), output.data(), kCount,
                                   DataType::kInt64, ReduceOp::kSum, 2)
                    .ok());
    EXPECT_EQ(output.front(), 6);
    EXPECT_EQ(output.back(), 6);
  });
}

TEST(GlooTransportTest, TwoGroupsRunConcurrentlyWithDifferentTags) {
  constexpr int kSize = 2;
  constexpr size_t kCount = 10000;
  std::shared_ptr<Store> store = InProcessStore();
  std::string prefixes[2] = {UniquePrefix(), UniquePrefix()};
  std::vector<std::thread> threads;
  for (int group = 0; group < 2; ++group) {
    for (int rank = 0; rank < kSize; ++rank) {
      threads.emplace_back([&, group, rank] {
        auto transport = CreateGlooTransport(
            OptionsFor(store.get(), prefixes[group], kSize, rank));
        ASSERT_TRUE(transport.ok()) << transport.status();
        for (int round = 0; round < 20; ++round) {
          std::vector<int32_t> data(kCount, (group + 1) * (rank + 1));
          ASSERT_TRUE((*transport)
                          ->AllReduce(data.data(), kCount, DataType::kInt32,
                                      ReduceOp::kSum, 1000 + group)
                          .ok());
          ASSERT_EQ(data.front(), (group + 1) * 3);
          ASSERT_EQ(data.back(), (group + 1) * 3);
        }
      });
    }
  }
  for (auto& thread : threads) thread.join();
}

TEST(GlooTransportTest, RankThatNeverJoinsTheOpTimesOutTheOthers) {
  constexpr int kSize = 3;
  constexpr milliseconds kTimeout(500);
  std::shared_ptr<Store> store = InProcessStore();
  std::string prefix = UniquePrefix();
  std::atomic<int> finished{0};
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kSize; ++rank) {
    threads.emplace_back([&, rank] {
      auto transport = CreateGlooTransport(
          OptionsFor(store.get(), prefix, kSize, rank, kTimeout));
      ASSERT_TRUE(transport.ok()) << transport.status();
      if (rank == 2) {  // alive, but never joins the all-reduce
        while (finished < kSize - 1) std::this_thread::sleep_for(kTimeout);
        return;
      }
      std::vector<float> data(1000, 1.0f);
      auto start = std::chrono::steady_clock::now();
      absl::Status status =
          (*transport)
              ->AllReduce(data.data(), data.size(), DataType::kFloat32,
                          ReduceOp::kSum, 1);
      EXPECT_LT(std::chrono::steady_clock::now() - start,
                kTimeout + milliseconds(1500));
      EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
      EXPECT_THAT(FailedRanks(status), Contains(2)) << status;
      finished++;
    });
  }
  for (auto& thread : threads) thread.join();
}

TEST(GlooTransportTest, RendezvousNamesTheRankThatNeverCame) {
  std::shared_ptr<Store> store = InProcessStore();
  std::string prefix = UniquePrefix();
  std::vector<std::thread> threads;
  for (int rank : {0, 2}) {  // rank 1 never comes
    threads.emplace_back([&, rank] {
      auto transport = CreateGlooTransport(
          OptionsFor(store.get(), prefix, 3, rank, milliseconds(500)));
      ASSERT_FALSE(transport.ok());
      EXPECT_EQ(transport.status().code(), absl::StatusCode::kDeadlineExceeded);
      EXPECT_EQ(FailedRanks(transport.status()), std::vector<int>{1})
          << transport.status();
      EXPECT_THAT(transport.status().message(), HasSubstr("rank 1"));
    });
  }
  for (auto& thread : threads) thread.join();
}

TEST(GlooTransportTest, BadInterfaceAddressIsAClearError) {
  std::shared_ptr<Store> store = InProcessStore();
  auto options = OptionsFor(store.get(), UniquePrefix(), 1, 0);
  options.interface_address = "203.0.113.77";  // TEST-NET-3, not this host
  auto transport = CreateGlooTransport(options);
  ASSERT_FALSE(transport.ok());
  EXPECT_THAT(transport.status().message(), HasSubstr("interface_address"));
}

// How a rank dies in DeadPeerTest: before the survivors' all-reduce starts,
// or while they are sending to it (a large buffer keeps them writing).
struct DeadPeerCase {
  std::string name;
  size_t count;
  milliseconds dies_after;
  friend std::ostream& operator<<(std::ostream& out, const DeadPeerCase& c) {
    return out << c.name;
  }
};

class DeadPeerTest : public ::testing::TestWithParam<DeadPeerCase> {};

// Forks the ranks over a file store; one exits once all are connected. Each
// survivor runs an all-reduce and exits 0 if it failed in time naming the
// dead rank (and only it), and failed again, at once, on the next call. A
// survivor killed by SIGPIPE (Gloo writing to the closed socket) fails the
// test.
TEST_P(DeadPeerTest, OthersFailNamingIt) {
  constexpr int kSize = 3;
  constexpr milliseconds kTimeout(3000);
  const DeadPeerCase& param = GetParam();
  for (int dead = 0; dead < kSize; ++dead) {
    std::filesystem::path dir =
        std::filesystem::temp_directory_path() /
        absl::StrCat("gloo_dead_peer_", getpid(), "_", param.name);
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    std::vector<pid_t> children;
    for (int rank = 0; rank < kSize; ++rank) {
      pid_t pid = fork();
      ASSERT_GE(pid, 0);
      if (pid > 0) {
        children.push_back(pid);
        continue;
      }
      std::shared_ptr<Store> store = FileStore(dir.string());
      auto transport = CreateGlooTransport(
          OptionsFor(store.get(), "dead", kSize, rank, kTimeout));
      if (!transport.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", rank,
                     transport.status().ToString().c_str());
        _exit(2);
      }
      // Die once every rank is connected (a rank returns from the rendezvous
      // before its peers have seen all of its connections).
      store->Set(absl::StrCat("created/", rank), "");
      for (int other = 0; other < kSize; ++other) {
        store->Get(absl::StrCat("created/", other), kTimeout);
      }
      if (rank == dead) {
        std::this_thread::sleep_for(param.dies_after);
        _exit(1);
      }
      std::vector<float> data(param.count, 1.0f);
      auto start = std::chrono::steady_clock::now();
      absl::Status status =
          (*transport)
              ->AllReduce(data.data(), data.size(), DataType::kFloat32,
                          ReduceOp::kSum, 5);
      auto took = std::chrono::steady_clock::now() - start;
      std::fprintf(stderr, "rank %d (rank %d died): %s\n", rank, dead,
                   status.ToString().c_str());
      std::vector<int> ranks = FailedRanks(status);
      if (status.ok()) _exit(3);
      if (ranks != std::vector<int>{dead}) _exit(4);
      if (took > kTimeout + milliseconds(2000)) _exit(5);
      start = std::chrono::steady_clock::now();
      absl::Status again = (*transport)->Barrier(6);
      if (again != status) _exit(6);
      if (std::chrono::steady_clock::now() - start > milliseconds(100))
        _exit(7);
      // Stay until every survivor has failed: a survivor that exits closes
      // its connections, which would be a second failure for the others.
      store->Set(absl::StrCat("done/", rank), "");
      for (int other = 0; other < kSize; ++other) {
        if (other != dead)
          store->Get(absl::StrCat("done/", other), kTimeout * 3);
      }
      _exit(0);
    }
    for (int rank = 0; rank < kSize; ++rank) {
      int wstatus = 0;
      ASSERT_EQ(waitpid(children[rank], &wstatus, 0), children[rank]);
      ASSERT_TRUE(WIFEXITED(wstatus))
          << "rank " << rank << " was killed by signal " << WTERMSIG(wstatus)
          << " when rank " << dead << " died";
      EXPECT_EQ(WEXITSTATUS(wstatus), rank == dead ? 1 : 0)
          << "rank " << rank << " when rank " << dead << " died";
    }
    std::filesystem::remove_all(dir);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Gloo, DeadPeerTest,
    ::testing::Values(DeadPeerCase{"BeforeTheOp", 1 << 16, milliseconds(0)},
                      DeadPeerCase{"DuringTheOp", 1 << 24, milliseconds(300)}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace shoal::collective::internal
