#include "agent/lease_table.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace shoal::agent {
namespace {

ResourceSet R(const std::map<std::string, double>& amounts) {
  return *ResourceSet::FromDoubles(amounts);
}

// One step of a script run against a table on a node with `total`.
struct Step {
  enum class Op { kGrant, kBlock, kUnblock, kRemove };
  Op op;
  std::string lease;
  ResourceSet shape = {};  // kGrant
  // Expected after the step.
  BlockResult block = BlockResult::kLent;  // kBlock
  bool unblocked = false;                  // kUnblock
  ResourceSet available;
  bool can_grant_one_cpu = false;
};

struct Script {
  std::string name;
  ResourceSet total;
  int max_blocked_workers;
  std::vector<Step> steps;
};

using Op = Step::Op;

TEST(LeaseTableTest, Lending) {
  const std::string pg = "d04157891339";
  const std::string cpu_in_bundle = "CPU_group_0_" + pg;
  const ResourceSet one = R({{"CPU", 1}});
  const ResourceSet two = R({{"CPU", 2}});
  auto minus = [](const std::string& name, double amount) {
    ResourceSet set;
    set.Set(name, static_cast<int64_t>(-amount * kResourceUnit));
    return set;
  };
  std::vector<Script> scripts = {
      {"block lends the CPU, unblock takes it back",
       two,
       32,
       {
           {.op = Op::kGrant, .lease = "a", .shape = two, .available = {}},
           {.op = Op::kBlock,
            .lease = "a",
            .block = BlockResult::kLent,
            .available = two,
            .can_grant_one_cpu = true},
           {.op = Op::kUnblock,
            .lease = "a",
            .unblocked = true,
            .available = {}},
       }},
      {"double block lends once, double unblock takes back once",
       two,
       32,
       {
           {.op = Op::kGrant,
            .lease = "a",
            .shape = one,
            .available = one,
            .can_grant_one_cpu = true},
           {.op = Op::kBlock,
            .lease = "a",
            .available = two,
            .can_grant_one_cpu = true},
           {.op = Op::kBlock,
            .lease = "a",
            .block = BlockResult::kAlreadyBlocked,
            .available = two,
            .can_grant_one_cpu = true},
           {.op = Op::kUnblock,
            .lease = "a",
            .unblocked = true,
            .available = one,
            .can_grant_one_cpu = true},
           {.op = Op::kUnblock,
            .lease = "a",
            .unblocked = false,
            .available = one,
            .can_grant_one_cpu = true},
       }},
      {"lent CPU granted again: unblock over-commits until a lease ends",
       one,
       32,
       {
           {.op = Op::kGrant, .lease = "a", .shape = one, .available = {}},
           {.op = Op::kBlock,
            .lease = "a",
            .available = one,
            .can_grant_one_cpu = true},
           {.op = Op::kGrant, .lease = "b", .shape = one, .available = {}},
           {.op = Op::kUnblock,
            .lease = "a",
            .unblocked = true,
            .available = minus("CPU", 1)},
           {.op = Op::kRemove, .lease = "b", .available = {}},
           {.op = Op::kRemove,
            .lease = "a",
            .available = one,
            .can_grant_one_cpu = true},
       }},
      {"release while blocked gives back only what it still holds",
       two,
       32,
       {
           {.op = Op::kGrant, .lease = "a", .shape = two, .available = {}},
           {.op = Op::kBlock,
            .lease = "a",
            .available = two,
            .can_grant_one_cpu = true},
           {.op = Op::kRemove,
            .lease = "a",
            .available = two,
            .can_grant_one_cpu = true},
           {.op = Op::kUnblock,
            .lease = "a",
            .unblocked = false,
            .available = two,
            .can_grant_one_cpu = true},
       }},
      {"release while blocked after the CPU was granted again",
       one,
       32,
       {
           {.op = Op::kGrant, .lease = "a", .shape = one, .available = {}},
           {.op = Op::kBlock,
            .lease = "a",
            .available = one,
            .can_grant_one_cpu = true},
           {.op = Op::kGrant, .lease = "b", .shape = one, .available = {}},
           {.op = Op::kRemove, .lease = "a", .available = {}},
           {.op = Op::kRemove,
            .lease = "b",
            .available = one,
            .can_grant_one_cpu = true},
       }},
      {"cap reached: a blocked worker keeps its CPU until there is room",
       two,
       1,
       {
           {.op = Op::kGrant,
            .lease = "a",
            .shape = one,
            .available = one,
            .can_grant_one_cpu = true},
           {.op = Op::kGrant, .lease = "b", .shape = one, .available = {}},
           {.op = Op::kBlock,
            .lease = "a",
            .available = one,
            .can_grant_one_cpu = true},
           {.op = Op::kBlock,
            .lease = "b",
            .block = BlockResult::kCapReached,
            .available = one,
            .can_grant_one_cpu = true},
           {.op = Op::kBlock,
            .lease = "b",
            .block = BlockResult::kAlreadyBlocked,
            .available = one,
            .can_grant_one_cpu = true},
           // Room again: b lends instead of a.
           {.op = Op::kUnblock,
            .lease = "a",
            .unblocked = true,
            .available = one,
            .can_grant_one_cpu = true},
           {.op = Op::kUnblock,
            .lease = "b",
            .unblocked = true,
            .available = {}},
       }},
      {"cap reached: a waiting worker that unblocks lends nothing later",
       two,
       1,
       {
           {.op = Op::kGrant,
            .lease = "a",
            .shape = one,
            .available = one,
            .can_grant_one_cpu = true},
           {.op = Op::kGrant, .lease = "b", .shape = one, .available = {}},
           {.op = Op::kBlock,
            .lease = "a",
            .available = one,
            .can_grant_one_cpu = true},
           {.op = Op::kBlock,
            .lease = "b",
            .block = BlockResult::kCapReached,
            .available = one,
            .can_grant_one_cpu = true},
           {.op = Op::kUnblock,
            .lease = "b",
            .unblocked = true,
            .available = one,
            .can_grant_one_cpu = true},
           {.op = Op::kUnblock,
            .lease = "a",
            .unblocked = true,
            .available = {}},
       }},
      {"cap reached: a lender that ends makes room, oldest waiting first",
       R({{"CPU", 3}}),
       1,
       {
           {.op = Op::kGrant,
            .lease = "a",
            .shape = one,
            .available = two,
            .can_grant_one_cpu = true},
           {.op = Op::kGrant,
            .lease = "b",
            .shape = one,
            .available = one,
            .can_grant_one_cpu = true},
           {.op = Op::kGrant, .lease = "c", .shape = one, .available = {}},
           {.op = Op::kBlock,
            .lease = "a",
            .available = one,
            .can_grant_one_cpu = true},
           {.op = Op::kBlock,
            .lease = "c",
            .block = BlockResult::kCapReached,
            .available = one,
            .can_grant_one_cpu = true},
           {.op = Op::kBlock,
            .lease = "b",
            .block = BlockResult::kCapReached,
            .available = one,
            .can_grant_one_cpu = true},
           // a's CPU was lent, so ending it frees nothing; c lends now.
           {.op = Op::kRemove,
            .lease = "a",
            .available = two,
            .can_grant_one_cpu = true},
           {.op = Op::kRemove,
            .lease = "b",
            .available = R({{"CPU", 3}}),
            .can_grant_one_cpu = true},
           {.op = Op::kUnblock,
            .lease = "c",
            .unblocked = true,
            .available = two,
            .can_grant_one_cpu = true},
       }},
      {"a cap of zero lends nothing",
       one,
       0,
       {
           {.op = Op::kGrant, .lease = "a", .shape = one, .available = {}},
           {.op = Op::kBlock,
            .lease = "a",
            .block = BlockResult::kCapReached,
            .available = {}},
       }},
      {"placement-group CPU is lent; accelerators and memory never are",
       R({{"CPU", 4}, {"GPU", 1}, {cpu_in_bundle, 1}, {"memory", 100}}),
       32,
       {
           {.op = Op::kGrant,
            .lease = "a",
            .shape = R({{cpu_in_bundle, 1}, {"GPU", 1}, {"memory", 100}}),
            .available = R({{"CPU", 4}}),
            .can_grant_one_cpu = true},
           {.op = Op::kBlock,
            .lease = "a",
            .available = R({{"CPU", 4}, {cpu_in_bundle, 1}}),
            .can_grant_one_cpu = true},
           {.op = Op::kGrant,
            .lease = "b",
            .shape = R({{cpu_in_bundle, 1}}),
            .available = R({{"CPU", 4}}),
            .can_grant_one_cpu = true},
           {.op = Op::kUnblock,
            .lease = "a",
            .unblocked = true,
            .available =
                [&] {
                  ResourceSet s = R({{"CPU", 4}});
                  s.Add(minus(cpu_in_bundle, 1));
                  return s;
                }()},
           {.op = Op::kRemove,
            .lease = "a",
            .available = R({{"CPU", 4}, {"GPU", 1}, {"memory", 100}}),
            .can_grant_one_cpu = true},
       }},
      {"a lease without CPU blocks without lending or counting",
       R({{"CPU", 1}, {"GPU", 1}}),
       1,
       {
           {.op = Op::kGrant,
            .lease = "a",
            .shape = R({{"GPU", 1}}),
            .available = one,
            .can_grant_one_cpu = true},
           {.op = Op::kGrant, .lease = "b", .shape = one, .available = {}},
           {.op = Op::kBlock,
            .lease = "a",
            .block = BlockResult::kNothingToLend,
            .available = {}},
           {.op = Op::kBlock,
            .lease = "b",
            .block = BlockResult::kLent,
            .available = one,
            .can_grant_one_cpu = true},
           {.op = Op::kUnblock,
            .lease = "a",
            .unblocked = true,
            .available = one,
            .can_grant_one_cpu = true},
       }},
      {"unknown lease",
       one,
       32,
       {
           {.op = Op::kBlock,
            .lease = "x",
            .block = BlockResult::kUnknownLease,
            .available = one,
            .can_grant_one_cpu = true},
           {.op = Op::kUnblock,
            .lease = "x",
            .unblocked = false,
            .available = one,
            .can_grant_one_cpu = true},
           {.op = Op::kRemove,
            .lease = "x",
            .available = one,
            .can_grant_one_cpu = true},
       }},
  };
  for (const Script& script : scripts) {
    SCOPED_TRACE(script.name);
    NodeResources node{script.total, script.total};
    LeaseTable table(&node, script.max_blocked_workers);
    for (size_t i = 0; i < script.steps.size(); ++i) {
      const Step& step = script.steps[i];
      SCOPED_TRACE(absl::StrCat("step ", i, " (lease ", step.lease, ")"));
      switch (step.op) {
        case Op::kGrant: {
          Lease lease;
          lease.id = step.lease;
          lease.shape = step.shape;
          table.Add(lease);
          break;
        }
        case Op::kBlock:
          EXPECT_EQ(table.Block(step.lease), step.block);
          break;
        case Op::kUnblock:
          EXPECT_EQ(table.Unblock(step.lease), step.unblocked);
          break;
        case Op::kRemove:
          table.Remove(step.lease);
          break;
      }
      EXPECT_EQ(node.available, step.available)
          << node.available.DebugString() << " vs "
          << step.available.DebugString();
      EXPECT_EQ(node.CanGrant(one), step.can_grant_one_cpu);
      int lending = 0;
      for (const auto& [id, lease] : table.leases()) {
        lending += lease.lent.empty() ? 0 : 1;
        EXPECT_TRUE(lease.lent.empty() || lease.blocked) << id;
      }
      EXPECT_EQ(table.lending(), lending);
      EXPECT_LE(table.lending(), script.max_blocked_workers);
    }
    // Whatever happened, ending every lease restores the node.
    std::vector<std::string> ids;
    for (const auto& [id, lease] : table.leases()) ids.push_back(id);
    for (const auto& id : ids) table.Remove(id);
    EXPECT_EQ(node.available, script.total);
    EXPECT_EQ(table.lending(), 0);
  }
}

TEST(LeaseTableTest, RemoveReturnsTheLeaseAsItWas) {
  NodeResources node{R({{"CPU", 2}}), R({{"CPU", 2}})};
  LeaseTable table(&node, 32);
  Lease lease;
  lease.id = "a";
  lease.worker_id = "w";
  lease.shape = R({{"CPU", 1}});
  lease.actor_id = "actor";
  table.Add(lease);
  ASSERT_EQ(table.Block("a"), BlockResult::kLent);
  std::optional<Lease> removed = table.Remove("a");
  ASSERT_TRUE(removed.has_value());
  EXPECT_TRUE(removed->blocked);
  EXPECT_EQ(removed->lent, R({{"CPU", 1}}));
  EXPECT_EQ(removed->actor_id, "actor");
  EXPECT_FALSE(table.Remove("a").has_value());
}

TEST(LeaseTableTest, FindsLeasesByRequesterAndGroup) {
  NodeResources node{R({{"CPU", 8}, {"CPU_group_0_pg1", 2}}),
                     R({{"CPU", 8}, {"CPU_group_0_pg1", 2}})};
  LeaseTable table(&node, 32);
  Lease a;
  a.id = "a";
  a.conn_id = 1;
  a.shape = R({{"CPU", 1}});
  Lease b;
  b.id = "b";
  b.conn_id = 2;
  b.shape = R({{"CPU_group_0_pg1", 1}});
  table.Add(a);
  table.Add(b);
  EXPECT_EQ(table.HeldBy(1), std::vector<std::string>{"a"});
  EXPECT_EQ(table.HeldBy(3), std::vector<std::string>{});
  EXPECT_EQ(table.InGroup("pg1"), std::vector<std::string>{"b"});
  EXPECT_EQ(table.InGroup("pg2"), std::vector<std::string>{});
}

TEST(LeaseTableTest, DefaultCapAndLendableCpu) {
  EXPECT_EQ(DefaultMaxBlockedWorkers(R({{"CPU", 2}})), 32);
  EXPECT_EQ(DefaultMaxBlockedWorkers(R({{"CPU", 16}})), 128);
  EXPECT_EQ(DefaultMaxBlockedWorkers(ResourceSet()), 32);
  EXPECT_EQ(LendableCpu(R({{"CPU", 1.5},
                           {"CPU_group_pg1", 1},
                           {"TPU", 4},
                           {"TPU_group_0_pg1", 4},
                           {"memory", 100}})),
            R({{"CPU", 1.5}, {"CPU_group_pg1", 1}}));
}

TEST(LeaseTableTest, StatusShowsBlockedOnlyWhenTheCpuIsLentBack) {
  NodeResources node{R({{"CPU", 2}, {"GPU", 1}}), R({{"CPU", 2}, {"GPU", 1}})};
  LeaseTable table(&node, 1);
  for (const auto& [id, shape] :
       std::vector<std::pair<std::string, ResourceSet>>{
           {"lends", R({{"CPU", 1}})},
           {"waits", R({{"CPU", 1}})},
           {"gpu", R({{"GPU", 1}})},
           {"runs", ResourceSet()}}) {
    Lease lease;
    lease.id = id;
    lease.shape = shape;
    table.Add(lease);
  }
  ASSERT_EQ(table.Block("lends"), BlockResult::kLent);
  ASSERT_EQ(table.Block("waits"), BlockResult::kCapReached);
  ASSERT_EQ(table.Block("gpu"), BlockResult::kNothingToLend);
  EXPECT_TRUE(LentBack(*table.Find("lends")));
  EXPECT_FALSE(LentBack(*table.Find("waits")));
  EXPECT_TRUE(LentBack(*table.Find("gpu")));
  EXPECT_FALSE(LentBack(*table.Find("runs")));
  ASSERT_TRUE(table.Unblock("lends"));
  EXPECT_TRUE(LentBack(*table.Find("waits")));
}

}  // namespace
}  // namespace shoal::agent
