#include "agent/lease_table.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "shoal/shoal.pb.h"

namespace shoal::agent {
namespace {

ResourceSet R(const std::map<std::string, double>& amounts) {
  return *ResourceSet::FromDoubles(amounts);
}

ResourceSet Minus(const std::string& name, double amount) {
  ResourceSet set;
  set.Set(name, static_cast<int64_t>(-amount * kResourceUnit));
  return set;
}

constexpr int kNever = -1;
constexpr int kDeepest = 16;

// The shallowest depth at which a request for one CPU may be granted now
// (lent CPU serves only requests deeper than its lender); kNever when none.
int OneCpuFromDepth(const NodeResources& node, const LeaseTable& table) {
  for (int depth = 0; depth <= kDeepest; ++depth) {
    if (node.CanGrant(R({{"CPU", 1}}), table.Withheld(depth))) return depth;
  }
  return kNever;
}

// One step of a script run against a table on a node with `total`, and what
// the node looks like after it.
struct Step {
  enum class Op { kGrant, kBlock, kUnblock, kRemove };
  Op op;
  std::string lease;
  ResourceSet shape;  // kGrant
  int depth = 0;      // kBlock
  BlockResult block = BlockResult::kLent;
  bool unblocked = true;
  ResourceSet available;
  int one_cpu_from_depth = kNever;
};
using Op = Step::Op;

Step Grant(std::string lease, ResourceSet shape, ResourceSet available,
           int one_cpu_from_depth) {
  return {.op = Op::kGrant,
          .lease = std::move(lease),
          .shape = std::move(shape),
          .available = std::move(available),
          .one_cpu_from_depth = one_cpu_from_depth};
}
Step Block(std::string lease, int depth, ResourceSet available,
           int one_cpu_from_depth, BlockResult result = BlockResult::kLent) {
  return {.op = Op::kBlock,
          .lease = std::move(lease),
          .depth = depth,
          .block = result,
          .available = std::move(available),
          .one_cpu_from_depth = one_cpu_from_depth};
}
Step Unblock(std::string lease, ResourceSet available, int one_cpu_from_depth,
             bool unblocked = true) {
  return {.op = Op::kUnblock,
          .lease = std::move(lease),
          .unblocked = unblocked,
          .available = std::move(available),
          .one_cpu_from_depth = one_cpu_from_depth};
}
Step Remove(std::string lease, ResourceSet available, int one_cpu_from_depth) {
  return {.op = Op::kRemove,
          .lease = std::move(lease),
          .available = std::move(available),
          .one_cpu_from_depth = one_cpu_from_depth};
}

struct Script {
  std::string name;
  ResourceSet total;
  std::vector<Step> steps;
};

// code-sizes: table
std::vector<Script> LendingScripts() {
  const std::string bundle_cpu = "CPU_group_0_d04157891339";
  const ResourceSet none;
  const ResourceSet one = R({{"CPU", 1}});
  const ResourceSet two = R({{"CPU", 2}});
  const ResourceSet four = R({{"CPU", 4}});
  ResourceSet four_less_bundle_cpu = four;
  four_less_bundle_cpu.Add(Minus(bundle_cpu, 1));
  return {
      {"block lends the CPU to deeper requests, unblock takes it back",
       two,
       {Grant("a", two, none, kNever), Block("a", 0, two, 1),
        Unblock("a", none, kNever)}},
      {"free CPU serves any depth; double block and unblock count once",
       two,
       {Grant("a", one, one, 0), Block("a", 0, two, 0),
        Block("a", 0, two, 0, BlockResult::kAlreadyBlocked),
        Unblock("a", one, 0), Unblock("a", one, 0, /*unblocked=*/false)}},
      {"blocking again at another depth moves what it lends",
       one,
       {Grant("a", one, none, kNever), Block("a", 2, one, 3),
        Block("a", 0, one, 1),
        Block("a", 0, one, 1, BlockResult::kAlreadyBlocked),
        Block("a", 5, one, 6)}},
      {"a chain of nested tasks: each lent CPU serves the next level only",
       one,
       {Grant("a", one, none, kNever), Block("a", 0, one, 1),
        Grant("b", one, none, kNever), Block("b", 1, one, 2),
        Grant("c", one, none, kNever), Remove("c", one, 2),
        Unblock("b", none, kNever), Remove("b", one, 1),
        Unblock("a", none, kNever), Remove("a", one, 0)}},
      {"lent CPU granted again: unblock over-commits until a lease ends",
       one,
       {Grant("a", one, none, kNever), Block("a", 0, one, 1),
        Grant("b", one, none, kNever), Unblock("a", Minus("CPU", 1), kNever),
        Remove("b", none, kNever), Remove("a", one, 0)}},
      {"release while blocked gives back only what it still holds",
       two,
       {Grant("a", two, none, kNever), Block("a", 0, two, 1),
        Remove("a", two, 0), Unblock("a", two, 0, /*unblocked=*/false)}},
      {"release while blocked after the CPU was granted again",
       one,
       {Grant("a", one, none, kNever), Block("a", 0, one, 1),
        Grant("b", one, none, kNever), Remove("a", none, kNever),
        Remove("b", one, 0)}},
      {"placement-group CPU is lent; accelerators and memory never are",
       R({{"CPU", 4}, {"GPU", 1}, {bundle_cpu, 1}, {"memory", 100}}),
       {Grant("a", R({{bundle_cpu, 1}, {"GPU", 1}, {"memory", 100}}), four, 0),
        Block("a", 0, R({{"CPU", 4}, {bundle_cpu, 1}}), 0),
        Grant("b", R({{bundle_cpu, 1}}), four, 0),
        Unblock("a", four_less_bundle_cpu, kNever),
        Remove("a", R({{"CPU", 4}, {"GPU", 1}, {"memory", 100}}), 0)}},
      {"a lease without CPU blocks without lending",
       R({{"CPU", 1}, {"GPU", 1}}),
       {Grant("a", R({{"GPU", 1}}), one, 0), Grant("b", one, none, kNever),
        Block("a", 0, none, kNever, BlockResult::kNothingToLend),
        Block("b", 0, one, 1), Unblock("a", one, 1)}},
      {"unknown lease",
       one,
       {Block("x", 0, one, 0, BlockResult::kUnknownLease),
        Unblock("x", one, 0, /*unblocked=*/false), Remove("x", one, 0)}},
  };
}

TEST(LeaseTableTest, Lending) {
  for (const Script& script : LendingScripts()) {
    SCOPED_TRACE(script.name);
    NodeResources node{script.total, script.total};
    LeaseTable table(&node);
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
          EXPECT_EQ(table.Block(step.lease, step.depth), step.block);
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
      EXPECT_EQ(OneCpuFromDepth(node, table), step.one_cpu_from_depth);
      ResourceSet lent;
      for (const auto& [id, lease] : table.leases()) {
        lent.Add(lease.lent);
        EXPECT_TRUE(lease.lent.empty() || lease.blocked) << id;
      }
      EXPECT_EQ(node.lent, lent);
      for (int depth = 0; depth <= kDeepest; ++depth) {
        ResourceSet withheld;
        for (const auto& [id, lease] : table.leases()) {
          if (lease.blocked_depth >= depth) withheld.Add(lease.lent);
        }
        EXPECT_EQ(table.Withheld(depth), withheld) << "depth " << depth;
      }
    }
    // Whatever happened, ending every lease restores the node.
    std::vector<std::string> ids;
    for (const auto& [id, lease] : table.leases()) ids.push_back(id);
    for (const auto& id : ids) table.Remove(id);
    EXPECT_EQ(node.available, script.total);
    EXPECT_TRUE(node.lent.empty());
  }
}

// Runs a tree of nested one-CPU tasks on a node of `cpus` CPUs the way the
// agent does: requests tried deepest first, each granted when the node can
// grant it at its depth. A task above `depth` submits `fanout` children and
// blocks until they finish; a leaf finishes at once. Children's requests
// arrive late (only when nothing else can be granted), so that a blocked
// worker's CPU is offered to its waiting siblings first. Returns the most
// leases held at once, or -1 when the tree stalls.
int RunTree(int cpus, int depth, int fanout) {
  NodeResources node{R({{"CPU", static_cast<double>(cpus)}}),
                     R({{"CPU", static_cast<double>(cpus)}})};
  LeaseTable table(&node);
  struct Task {
    int depth;
    int parent;
    int running_children = 0;
  };
  std::vector<Task> tasks = {{0, -1}};
  std::vector<int> pending = {0};
  std::vector<int> arriving;
  int most = 0;
  // Ends task `t` and, with it, every parent that waited only for it.
  auto finish = [&](int t) {
    while (t >= 0) {
      table.Remove(absl::StrCat(t));
      int parent = tasks[t].parent;
      if (parent < 0 || --tasks[parent].running_children > 0) return;
      table.Unblock(absl::StrCat(parent));
      t = parent;
    }
  };
  while (!pending.empty() || !arriving.empty()) {
    std::stable_sort(pending.begin(), pending.end(), [&](int a, int b) {
      return tasks[a].depth > tasks[b].depth;
    });
    auto it = std::find_if(pending.begin(), pending.end(), [&](int t) {
      return node.CanGrant(R({{"CPU", 1}}), table.Withheld(tasks[t].depth));
    });
    if (it == pending.end()) {
      if (arriving.empty()) return -1;
      pending.insert(pending.end(), arriving.begin(), arriving.end());
      arriving.clear();
      continue;
    }
    int t = *it;
    pending.erase(it);
    Lease lease;
    lease.id = absl::StrCat(t);
    lease.shape = R({{"CPU", 1}});
    table.Add(lease);
    most = std::max(most, static_cast<int>(table.size()));
    if (tasks[t].depth == depth) {
      finish(t);
      continue;
    }
    for (int c = 0; c < fanout; ++c) {
      arriving.push_back(static_cast<int>(tasks.size()));
      tasks.push_back({tasks[t].depth + 1, t});
    }
    tasks[t].running_children = fanout;
    table.Block(lease.id, tasks[t].depth);
  }
  EXPECT_EQ(table.size(), 0u);
  EXPECT_EQ(node.available, node.total);
  return most;
}

TEST(LeaseTableTest, NestedTasksNeverStallAndHoldAtMostCpusTimesLevels) {
  struct Tree {
    int cpus, depth, fanout;
  };
  for (const Tree& t : std::vector<Tree>{{1, 12, 1},
                                         {1, 40, 1},
                                         {1, 6, 2},
                                         {2, 8, 2},
                                         {2, 4, 5},
                                         {4, 5, 3}}) {
    SCOPED_TRACE(
        absl::StrCat(t.cpus, " CPUs, depth ", t.depth, ", fanout ", t.fanout));
    int most = RunTree(t.cpus, t.depth, t.fanout);
    EXPECT_NE(most, -1) << "stalled";
    EXPECT_LE(most, t.cpus * (t.depth + 1));
  }
}

TEST(LeaseTableTest, RemoveReturnsTheLeaseAsItWas) {
  NodeResources node{R({{"CPU", 2}}), R({{"CPU", 2}})};
  LeaseTable table(&node);
  Lease lease;
  lease.id = "a";
  lease.worker_id = "w";
  lease.shape = R({{"CPU", 1}});
  lease.actor_id = "actor";
  table.Add(lease);
  ASSERT_EQ(table.Block("a", 3), BlockResult::kLent);
  std::optional<Lease> removed = table.Remove("a");
  ASSERT_TRUE(removed.has_value());
  EXPECT_TRUE(removed->blocked);
  EXPECT_EQ(removed->blocked_depth, 3);
  EXPECT_EQ(removed->lent, R({{"CPU", 1}}));
  EXPECT_EQ(removed->actor_id, "actor");
  EXPECT_FALSE(table.Remove("a").has_value());
}

TEST(LeaseTableTest, FindsLeasesByRequesterAndGroup) {
  NodeResources node{R({{"CPU", 8}, {"CPU_group_0_pg1", 2}}),
                     R({{"CPU", 8}, {"CPU_group_0_pg1", 2}})};
  LeaseTable table(&node);
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

TEST(LeaseTableTest, LendableCpu) {
  EXPECT_EQ(LendableCpu(R({{"CPU", 1.5},
                           {"CPU_group_pg1", 1},
                           {"TPU", 4},
                           {"TPU_group_0_pg1", 4},
                           {"memory", 100}})),
            R({{"CPU", 1.5}, {"CPU_group_pg1", 1}}));
}

TEST(NodeResourcesTest, UnlentIsWhatIsFreeForAnythingButNestedTasks) {
  const ResourceSet total = R({{"CPU", 2}, {"GPU", 1}});
  struct Case {
    std::string name;
    ResourceSet available, lent, unlent;
  };
  ResourceSet over = R({{"GPU", 1}});
  over.Add(Minus("CPU", 1));
  for (const Case& c : std::vector<Case>{
           {"nothing lent", total, {}, total},
           {"lent and free", total, R({{"CPU", 1}}),
            R({{"CPU", 1}, {"GPU", 1}})},
           {"lent and granted again", R({{"GPU", 1}}), R({{"CPU", 1}}),
            R({{"GPU", 1}})},
           {"over-committed", over, {}, over},
       }) {
    SCOPED_TRACE(c.name);
    NodeResources node{total, c.available, c.lent};
    EXPECT_EQ(node.Unlent(), c.unlent) << node.Unlent().DebugString();
  }
}

TEST(LeaseTableTest, ReportsItsLeases) {
  NodeResources node{R({{"CPU", 4}}), R({{"CPU", 4}})};
  LeaseTable table(&node);
  table.Add(Lease{.id = "l1",
                  .worker_id = "w1",
                  .shape = R({{"CPU", 2}}),
                  .owner = "10.0.0.9:5000",
                  .job_id = "job1",
                  .actor_id = "actor1",
                  .granted_us = 1'000'000});
  table.Block("l1", 0);
  proto::HeartbeatRequest hb;
  table.FillLeases("n1", 3'500'000, &hb);
  ASSERT_EQ(hb.leases_size(), 1);
  const proto::LeaseInfo& info = hb.leases(0);
  EXPECT_EQ(info.lease_id(), "l1");
  EXPECT_EQ(info.node_id(), "n1");
  EXPECT_EQ(info.worker_id(), "w1");
  EXPECT_EQ(info.owner(), "10.0.0.9:5000");
  EXPECT_EQ(info.job_id(), "job1");
  EXPECT_EQ(info.actor_id(), "actor1");
  EXPECT_EQ(info.age_ms(), 2500);
  EXPECT_TRUE(info.blocked());
  EXPECT_EQ(ResourceSet::FromProto(info.shape()), R({{"CPU", 2}}));
}

}  // namespace
}  // namespace shoal::agent
