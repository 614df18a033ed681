// Collective groups with ranks as threads over an in-memory store: every
// operation over data types x reduce ops x sizes x world sizes x backends,
// input checks, and failures that must name ranks.
#include "shoal/collective.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/reduce.h"
#include "collective/test_buffer.h"
#include "collective/transport.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::collective {
namespace {

using ::testing::HasSubstr;

// Runs fn(rank) on `world` threads; rethrows the first exception.
void RunRanks(int world, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

std::string UniqueName(const std::string& base) {
  static std::atomic<int> counter{0};
  return absl::StrCat(base, "-", counter++);
}

// Values whose sums, maxima, minima and products are exact in every type
// (bfloat16 included) whatever the order of the reduction.
double Value(ReduceOp op, int rank, size_t i) {
  if (op == ReduceOp::kProduct) {
    static const double kFactors[] = {1, -1, 2};
    return kFactors[(i + rank) % 3];
  }
  return static_cast<double>((i * 7 + rank * 3) % 13) - 6;
}

// Which hosts the ranks pretend to be on.
enum class Layout { kOneHost, kTwoHostsContiguous, kTwoHostsInterleaved };

struct Case {
  Backend backend;
  Layout layout;
};

std::string HostOf(Layout layout, int rank, int world) {
  switch (layout) {
    case Layout::kOneHost:
      return "host-a";
    case Layout::kTwoHostsContiguous:
      return rank < (world + 1) / 2 ? "host-a" : "host-b";
    case Layout::kTwoHostsInterleaved:
      return rank % 2 == 0 ? "host-a" : "host-b";
  }
  return "";
}

using Param = std::tuple<Case, DataType, size_t, int>;

class CollectiveOpsTest : public ::testing::TestWithParam<Param> {
 protected:
  // Creates a group per rank thread and runs body(group, rank).
  void Run(const std::function<void(Group&, int)>& body) {
    auto [c, type, count, world] = GetParam();
    auto store = InProcessStore();
    std::string name = UniqueName("ops");
    RunRanks(world, [&](int rank) {
      GroupOptions options;
      options.backend = c.backend;
      options.store = store;
      options.host_id = HostOf(c.layout, rank, world);
      options.interface_address = "127.0.0.1";
      options.timeout = std::chrono::milliseconds(20000);
      auto group = Group::Create(name, world, rank, options);
      ASSERT_EQ(group->rank(), rank);
      ASSERT_EQ(group->world_size(), world);
      body(*group, rank);
    });
  }
};

TEST_P(CollectiveOpsTest, AllReduce) {
  auto [c, type, count, world] = GetParam();
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProduct}) {
    SCOPED_TRACE(static_cast<int>(op));
    Run([&, op = op](Group& group, int rank) {
      internal::TypedBuffer buffer(type, count);
      for (size_t i = 0; i < count; ++i) buffer.Set(i, Value(op, rank, i));
      AllReduce(
          group,
          {.data = buffer.data(), .count = count, .type = type, .op = op});
      for (size_t i = 0; i < count; ++i) {
        double expected = Value(op, 0, i);
        for (int r = 1; r < world; ++r) {
          expected = internal::Combine(op, expected, Value(op, r, i));
        }
        ASSERT_EQ(buffer.Get(i), expected)
            << "element " << i << " rank " << rank;
      }
    });
  }
}

TEST_P(CollectiveOpsTest, AllGather) {
  auto [c, type, count, world] = GetParam();
  Run([&](Group& group, int rank) {
    internal::TypedBuffer input(type, count);
    internal::TypedBuffer output(type, count * world);
    for (size_t i = 0; i < count; ++i) {
      input.Set(i, Value(ReduceOp::kSum, rank, i));
    }
    AllGather(group, {.input = input.data(),
                      .output = output.data(),
                      .count = count,
                      .type = type});
    for (int r = 0; r < world; ++r) {
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(output.Get(r * count + i), Value(ReduceOp::kSum, r, i))
            << "block " << r << " element " << i;
      }
    }
  });
}

TEST_P(CollectiveOpsTest, ReduceScatter) {
  auto [c, type, count, world] = GetParam();
  Run([&](Group& group, int rank) {
    internal::TypedBuffer input(type, count * world);
    internal::TypedBuffer output(type, count);
    for (size_t i = 0; i < count * world; ++i) {
      input.Set(i, Value(ReduceOp::kSum, rank, i));
    }
    ReduceScatter(group, {.input = input.data(),
                          .output = output.data(),
                          .count = count,
                          .type = type});
    for (size_t i = 0; i < count; ++i) {
      double expected = 0;
      for (int r = 0; r < world; ++r) {
        expected += Value(ReduceOp::kSum, r, rank * count + i);
      }
      ASSERT_EQ(output.Get(i), expected) << "element " << i;
    }
  });
}

TEST_P(CollectiveOpsTest, BroadcastAndBarrier) {
  auto [c, type, count, world] = GetParam();
  Run([&](Group& group, int rank) {
    for (int root : {world - 1, 0}) {
      internal::TypedBuffer buffer(type, count);
      for (size_t i = 0; i < count; ++i) {
        buffer.Set(i, Value(ReduceOp::kSum, rank, i));
      }
      Broadcast(
          group,
          {.data = buffer.data(), .count = count, .type = type, .root = root});
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(buffer.Get(i), Value(ReduceOp::kSum, root, i));
      }
      Barrier(group);
    }
  });
}

std::string CaseName(const ::testing::TestParamInfo<Param>& info) {
  auto [c, type, count, world] = info.param;
  const char* types[] = {"f32", "bf16", "f64", "i32", "i64"};
  const char* layouts[] = {"", "_2hosts", "_interleaved"};
  std::string backend = BackendName(c.backend);
  for (char& ch : backend) {
    if (ch == '-') ch = '_';
  }
  return absl::StrCat(backend, layouts[static_cast<int>(c.layout)], "_",
                      types[static_cast<int>(type)], "_n", count, "_w", world);
}

// 300001 elements: more than one pipeline chunk of any type.
INSTANTIATE_TEST_SUITE_P(
    SharedMemory, CollectiveOpsTest,
    ::testing::Combine(
        ::testing::Values(Case{Backend::kSharedMemory, Layout::kOneHost}),
        ::testing::Values(DataType::kFloat32, DataType::kBFloat16,
                          DataType::kFloat64, DataType::kInt32,
                          DataType::kInt64),
        ::testing::Values(0, 1, 37, 20000, 300001),
        ::testing::Values(1, 2, 3, 4)),
    CaseName);

INSTANTIATE_TEST_SUITE_P(
    AcrossHosts, CollectiveOpsTest,
    ::testing::Combine(
        ::testing::Values(
            Case{Backend::kHierarchical, Layout::kTwoHostsContiguous},
            Case{Backend::kHierarchical, Layout::kTwoHostsInterleaved},
            Case{Backend::kGloo, Layout::kTwoHostsContiguous}),
        ::testing::Values(DataType::kFloat32, DataType::kBFloat16,
                          DataType::kInt64),
        ::testing::Values(0, 1, 37, 300001), ::testing::Values(2, 4)),
    CaseName);

// ---- Group creation and input checks ----

GroupOptions LocalOptions(std::shared_ptr<Store> store) {
  GroupOptions options;
  options.store = std::move(store);
  options.host_id = "host-a";
  options.timeout = std::chrono::milliseconds(2000);
  return options;
}

TEST(GroupTest, ReportsTopologyAndChoosesSharedMemoryOnOneHost) {
  auto store = InProcessStore();
  RunRanks(3, [&](int rank) {
    auto group = Group::Create("topology", 3, rank, LocalOptions(store));
    EXPECT_EQ(group->backend(), Backend::kSharedMemory);
    EXPECT_EQ(group->local_rank(), rank);
    EXPECT_EQ(group->local_size(), 3);
    EXPECT_EQ(group->num_hosts(), 1);
  });
}

TEST(GroupTest, NumbersHostsAndLocalRanksFromHostIds) {
  auto store = InProcessStore();
  RunRanks(4, [&](int rank) {
    GroupOptions options = LocalOptions(store);
    options.host_id = rank % 2 == 0 ? "even" : "odd";
    options.interface_address = "127.0.0.1";
    auto group = Group::Create("hosts", 4, rank, options);
    EXPECT_EQ(group->backend(), Backend::kHierarchical);
    EXPECT_EQ(group->num_hosts(), 2);
    EXPECT_EQ(group->local_size(), 2);
    EXPECT_EQ(group->local_rank(), rank / 2);
  });
}

TEST(GroupTest, RejectsBadArguments) {
  auto store = InProcessStore();
  EXPECT_THROW(Group::Create("bad", 0, 0, LocalOptions(store)),
               CollectiveError);
  EXPECT_THROW(Group::Create("bad", 2, 2, LocalOptions(store)),
               CollectiveError);
  EXPECT_THROW(Group::Create("bad", 2, -1, LocalOptions(store)),
               CollectiveError);
  EXPECT_THROW(Group::Create("", 1, 0, LocalOptions(store)), CollectiveError);

  auto group = Group::Create("single", 1, 0, LocalOptions(store));
  try {
    AllReduce(*group, {.data = nullptr, .count = 3});
    FAIL() << "a null buffer was accepted";
  } catch (const CollectiveError& e) {
    EXPECT_THAT(e.what(), HasSubstr("null"));
  }
  float x = 1;
  try {
    Broadcast(*group, {.data = &x, .count = 1, .root = 1});
    FAIL() << "root 1 of 1 rank was accepted";
  } catch (const CollectiveError& e) {
    EXPECT_THAT(e.what(), HasSubstr("root 1 is out of range"));
  }
  AllReduce(*group, {.data = nullptr, .count = 0});  // nothing to do
}

TEST(GroupTest, MismatchedWorldSizesFailClearly) {
  auto store = InProcessStore();
  std::vector<std::string> errors(2);
  RunRanks(2, [&](int rank) {
    try {
      Group::Create("mismatch", rank == 0 ? 2 : 3, rank, LocalOptions(store));
    } catch (const CollectiveError& e) {
      errors[rank] = e.what();
    }
  });
  EXPECT_THAT(errors[0], HasSubstr("world size 3"));
  EXPECT_THAT(errors[0], HasSubstr("same world size"));
}

TEST(GroupTest, MissingRanksAreNamedAfterTheTimeout) {
  auto store = InProcessStore();
  GroupOptions options = LocalOptions(store);
  options.timeout = std::chrono::milliseconds(200);
  try {
    Group::Create("lonely", 3, 0, options);
    FAIL() << "rendezvous without the other ranks succeeded";
  } catch (const CollectiveError& e) {
    EXPECT_THAT(e.what(), HasSubstr("ranks 1, 2 of 3 did not join"));
    EXPECT_THAT(e.what(), HasSubstr("may not have started"));
    EXPECT_EQ(e.ranks(), (std::vector<int>{1, 2}));
  }
}

TEST(GroupTest, SharedMemoryBackendRefusesSeveralHosts) {
  auto store = InProcessStore();
  std::vector<std::string> errors(2);
  RunRanks(2, [&](int rank) {
    GroupOptions options = LocalOptions(store);
    options.backend = Backend::kSharedMemory;
    options.host_id = rank == 0 ? "a" : "b";
    try {
      Group::Create("shm-two-hosts", 2, rank, options);
    } catch (const CollectiveError& e) {
      errors[rank] = e.what();
    }
  });
  EXPECT_THAT(errors[0], HasSubstr("on different hosts"));
}

TEST(GroupTest, DifferentOperationsOnRanksFailInsteadOfMixingData) {
  auto store = InProcessStore();
  std::vector<std::string> errors(2);
  RunRanks(2, [&](int rank) {
    auto group = Group::Create("mixed", 2, rank, LocalOptions(store));
    std::vector<float> data(10, 1.0f);
    try {
      if (rank == 0) {
        AllReduce(*group, data);
      } else {
        Broadcast(*group, {.data = data.data(), .count = 10});
      }
    } catch (const CollectiveError& e) {
      errors[rank] = e.what();
    }
  });
  EXPECT_THAT(errors[0], HasSubstr("different operations"));
  EXPECT_THAT(errors[1], HasSubstr("different operations"));
}

TEST(GroupTest, ARankThatNeverCallsIsNamedWithinTheTimeout) {
  auto store = InProcessStore();
  std::string error;
  std::vector<int> ranks;
  auto start = std::chrono::steady_clock::now();
  RunRanks(3, [&](int rank) {
    GroupOptions options = LocalOptions(store);
    options.timeout = std::chrono::milliseconds(300);
    auto group = Group::Create("stuck", 3, rank, options);
    if (rank == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      return;
    }
    std::vector<float> data(1000, 1.0f);
    try {
      AllReduce(*group, data);
    } catch (const CollectiveError& e) {
      if (rank == 0) {
        error = e.what();
        ranks = e.ranks();
      }
    }
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_THAT(error, HasSubstr("all-reduce of group 'stuck' failed: rank 2"));
  EXPECT_THAT(error, HasSubstr("did not answer within 300 ms"));
  EXPECT_EQ(ranks, std::vector<int>{2});
}

TEST(GroupTest, ConsecutiveOperationsAndTagsOnOneGroup) {
  auto store = InProcessStore();
  RunRanks(4, [&](int rank) {
    auto group = Group::Create("many", 4, rank, LocalOptions(store));
    for (int i = 0; i < 200; ++i) {
      std::vector<int64_t> v(i % 7 == 0 ? 70000 : 5, rank + i);
      AllReduce(*group, v);
      ASSERT_EQ(v.front(), 6 + 4 * i);
      ASSERT_EQ(v.back(), 6 + 4 * i);
    }
  });
}

TEST(DeviceGroupsTest, OneGroupPerLocalDevice) {
  setenv("SHOAL_PROCESS_ID", "0", 1);
  setenv("SHOAL_NUM_PROCESSES", "1", 1);
  setenv("SHOAL_LOCAL_DEVICE_COUNT", "3", 1);
  auto groups = spmd::DeviceGroups("devices", LocalOptions(InProcessStore()));
  unsetenv("SHOAL_PROCESS_ID");
  unsetenv("SHOAL_NUM_PROCESSES");
  unsetenv("SHOAL_LOCAL_DEVICE_COUNT");
  ASSERT_EQ(groups.size(), 3u);
  RunRanks(3, [&](int i) {
    EXPECT_EQ(groups[i]->rank(), i);
    EXPECT_EQ(groups[i]->world_size(), 3);
    std::vector<float> v(100, 1.0f + i);
    AllReduce(*groups[i], v);
    EXPECT_EQ(v[99], 6.0f);
  });
}

}  // namespace
}  // namespace shoal::collective
