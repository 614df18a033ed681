#include "agent/lease_queue.h"

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace shoal::agent {
namespace {

PendingLease Request(uint64_t seq, int32_t depth) {
  PendingLease p;
  p.seq = seq;
  p.request.set_depth(depth);
  return p;
}

std::vector<uint64_t> Order(const std::deque<PendingLease>& queue) {
  std::vector<uint64_t> seqs;
  for (const PendingLease& p : queue) seqs.push_back(p.seq);
  return seqs;
}

TEST(LeaseQueueTest, DeepestFirstThenByArrival) {
  struct Case {
    std::string name;
    std::vector<int32_t> depths;  // of requests 1, 2, ... in arrival order
    std::vector<uint64_t> want;
  };
  std::vector<Case> cases = {
      {"empty", {}, {}},
      {"equal depths keep arrival order", {0, 0, 0}, {1, 2, 3}},
      {"deeper first", {0, 1, 2}, {3, 2, 1}},
      {"mixed, stable among equals", {0, 2, 1, 2, 0, 1}, {2, 4, 3, 6, 1, 5}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    LeaseQueue queue;
    for (size_t i = 0; i < c.depths.size(); ++i) {
      queue.Push(Request(i + 1, c.depths[i]));
    }
    EXPECT_EQ(Order(queue.requests()), c.want);
    // Taken and pushed back (as Dispatch does with requests that wait), the
    // order holds.
    for (PendingLease& p : queue.TakeAll()) queue.Push(std::move(p));
    EXPECT_EQ(Order(queue.requests()), c.want);
  }
}

TEST(LeaseQueueTest, NewRequestsGoAfterEqualsAndBeforeShallower) {
  LeaseQueue queue;
  queue.Push(Request(1, 3));
  queue.Push(Request(2, 1));
  queue.Push(Request(3, 1));
  queue.Push(Request(4, 2));
  queue.Push(Request(5, 3));
  EXPECT_EQ(Order(queue.requests()), (std::vector<uint64_t>{1, 5, 4, 2, 3}));
}

TEST(LeaseQueueTest, FindEraseAndDrop) {
  LeaseQueue queue;
  queue.Push(Request(1, 0));
  queue.Push(Request(2, 0));
  ASSERT_NE(queue.Find(2), nullptr);
  EXPECT_EQ(queue.Find(2)->seq, 2u);
  EXPECT_EQ(queue.Find(7), nullptr);
  queue.Erase(1);
  queue.Erase(7);
  EXPECT_EQ(Order(queue.requests()), std::vector<uint64_t>{2});
  // Requests without a live connection answer to connection 0.
  EXPECT_EQ(queue.DropConnection(5), 0u);
  EXPECT_EQ(queue.DropConnection(0), 1u);
  EXPECT_EQ(queue.size(), 0u);
  EXPECT_TRUE(queue.TakeAll().empty());
}

TEST(LeaseQueueTest, TakesARequestByItsRequestersName) {
  LeaseQueue queue;
  for (auto [seq, id] : std::vector<std::pair<uint64_t, std::string>>{
           {1, "a1/1"}, {2, ""}, {3, "a1/2"}}) {
    PendingLease p = Request(seq, 0);
    p.request.set_request_id(id);
    queue.Push(std::move(p));
  }
  // Requests without a live connection answer to connection 0.
  EXPECT_FALSE(queue.Take(1, "a1/2").has_value());  // another requester's
  EXPECT_FALSE(queue.Take(0, "a1/9").has_value());
  EXPECT_FALSE(queue.Take(0, "").has_value());  // an empty name names none
  std::optional<PendingLease> taken = queue.Take(0, "a1/2");
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->seq, 3u);
  EXPECT_FALSE(queue.Take(0, "a1/2").has_value());
  EXPECT_EQ(Order(queue.requests()), (std::vector<uint64_t>{1, 2}));
}

TEST(LeaseQueueTest, ReportsDemandsByShapeAndFeasibility) {
  LeaseQueue queue;
  auto push = [&](uint64_t seq, double cpus, bool infeasible) {
    PendingLease p = Request(seq, 0);
    p.ask.shape = *ResourceSet::FromDoubles({{"CPU", cpus}});
    p.infeasible = infeasible;
    queue.Push(std::move(p));
  };
  push(1, 1, false);
  push(2, 1, false);
  push(3, 64, true);
  push(4, 1, true);
  proto::HeartbeatRequest hb;
  queue.FillDemands(&hb);
  std::map<std::pair<double, bool>, int64_t> got;
  for (const proto::ResourceDemand& d : hb.demands()) {
    got[{ResourceSet::FromProto(d.shape()).GetDouble("CPU"), d.infeasible()}] =
        d.count();
  }
  EXPECT_EQ(got, (std::map<std::pair<double, bool>, int64_t>{
                     {{1, false}, 2}, {{1, true}, 1}, {{64, true}, 1}}));
}

}  // namespace
}  // namespace shoal::agent
