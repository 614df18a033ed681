// Collectives on libtorch tensors (include/shoal/collective_torch.h): four
// ranks as threads over an in-process store, every wrapper and its checks.
#include "shoal/collective_torch.h"

#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::collective {
namespace {

using ::testing::HasSubstr;

constexpr int kWorld = 4;

// Runs fn(group) on kWorld threads, one rank each; rethrows the first error.
void RunRanks(const std::string& name, const std::function<void(Group&)>& fn) {
  auto store = InProcessStore();
  std::vector<std::exception_ptr> errors(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      try {
        GroupOptions options;
        options.store = store;
        options.host_id = "one-host";
        auto group = Group::Create(name, kWorld, r, options);
        fn(*group);
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

TEST(CollectiveTorchTest, AllReduceEveryDtype) {
  for (auto dtype : {torch::kFloat, torch::kDouble, torch::kInt, torch::kLong,
                     torch::kBFloat16}) {
    RunRanks("torch-allreduce", [&](Group& g) {
      torch::Tensor t = torch::full({3, 5}, g.rank() + 1, dtype);
      AllReduce(g, t);
      EXPECT_TRUE(torch::equal(t, torch::full({3, 5}, 10, dtype)))
          << c10::toString(dtype);
      torch::Tensor m = torch::full({7}, g.rank(), dtype);
      AllReduce(g, m, ReduceOp::kMax, /*tag=*/1);
      EXPECT_TRUE(torch::equal(m, torch::full({7}, kWorld - 1, dtype)));
    });
  }
}

TEST(CollectiveTorchTest, BroadcastAllGatherReduceScatter) {
  RunRanks("torch-ops", [](Group& g) {
    torch::Tensor b = torch::arange(6, torch::kFloat) * (g.rank() + 1);
    Broadcast(g, b, /*root=*/2);
    EXPECT_TRUE(torch::equal(b, torch::arange(6, torch::kFloat) * 3));

    torch::Tensor in = torch::full({2}, g.rank(), torch::kLong);
    torch::Tensor all = torch::empty({2 * kWorld}, torch::kLong);
    AllGather(g, in, all);
    EXPECT_TRUE(torch::equal(
        all, torch::arange(kWorld, torch::kLong).repeat_interleave(2)));

    torch::Tensor blocks = torch::arange(kWorld * 3, torch::kFloat);
    torch::Tensor mine = torch::empty({3}, torch::kFloat);
    ReduceScatter(g, blocks, mine);
    EXPECT_TRUE(torch::equal(
        mine,
        torch::arange(g.rank() * 3, g.rank() * 3 + 3, torch::kFloat) * kWorld));
  });
}

TEST(CollectiveTorchTest, RejectsWhatItCannotSend) {
  RunRanks("torch-checks", [](Group& g) {
    torch::Tensor strided = torch::zeros({4, 4}).t();
    EXPECT_THAT(
        [&] { AllReduce(g, strided); },
        ::testing::ThrowsMessage<CollectiveError>(HasSubstr("not contiguous")));
    torch::Tensor half = torch::zeros({4}, torch::kHalf);
    EXPECT_THAT([&] { AllReduce(g, half); },
                ::testing::ThrowsMessage<CollectiveError>(HasSubstr("Half")));
    torch::Tensor in = torch::zeros({2});
    torch::Tensor wrong = torch::zeros({3});
    EXPECT_THAT([&] { AllGather(g, in, wrong); },
                ::testing::ThrowsMessage<CollectiveError>(
                    HasSubstr("world_size x the input")));
    Barrier(g);
  });
}

}  // namespace
}  // namespace shoal::collective
