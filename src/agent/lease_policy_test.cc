#include "agent/lease_policy.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace shoal::agent {
namespace {

using Kind = LeaseDecision::Kind;

constexpr int64_t kGraceUs = 5'000'000;
constexpr int64_t kNow = 100'000'000;

ResourceSet R(const std::map<std::string, double>& amounts) {
  return *ResourceSet::FromDoubles(amounts);
}

proto::NodeInfo Node(const std::string& id, const ResourceSet& total,
                     const ResourceSet& available, bool alive = true) {
  proto::NodeInfo n;
  n.set_node_id(id);
  n.set_address(id + ":1");
  n.set_alive(alive);
  total.ToProto(n.mutable_total());
  available.ToProto(n.mutable_available());
  return n;
}

using Labels = std::map<std::string, std::string>;

proto::NodeInfo Labeled(proto::NodeInfo n, const Labels& labels) {
  for (const auto& [k, v] : labels) (*n.mutable_labels())[k] = v;
  return n;
}

struct Case {
  std::string name;
  ResourceSet shape;
  NodeResources here;
  std::vector<proto::NodeInfo> view;
  // Lent CPU this request may not use (it is not deeper than its lenders).
  ResourceSet withheld = {};
  // The request.
  std::vector<std::string> excluded = {};
  bool no_spillback = false;
  absl::Status devices_valid = absl::OkStatus();
  int64_t waited_us = 0;
  GroupCheck group = GroupCheck::kNotAsked;
  int64_t since_group_check_us = 0;
  bool can_ask_head = true;
  Labels here_labels = {};
  Labels selector = {};
  bool soft = false;
  // The decision.
  Kind want;
  std::string want_node = "";     // kSpillback
  std::string want_message = "";  // kInfeasible, kInvalid: a part of it
  bool want_infeasible = false;   // kWait
  int64_t want_retry_at_us = 0;   // kWait, kAskHeadAboutGroup
};

// The placement group of the cases' bundle resources.
const std::string kGroup = "d04157891339";

// code-sizes: table
std::vector<Case> DecideLeaseCases() {
  const ResourceSet four = R({{"CPU", 4}});
  const ResourceSet none;
  const std::string& pg = kGroup;
  const ResourceSet in_bundle = R({{"CPU_group_0_" + pg, 1}});
  const ResourceSet bundle_node =
      R({{"CPU", 4}, {"CPU_group_0_" + pg, 1}, {"CPU_group_" + pg, 1}});
  NodeResources idle{four, four};
  NodeResources busy{four, none};
  // A blocked worker lends its CPU back.
  NodeResources lent_one{four, R({{"CPU", 1}}), R({{"CPU", 1}})};
  // A blocked worker took its CPU back after it was granted again.
  NodeResources over{four, R({{"CPU", 1}})};
  over.available.Set("CPU", -kResourceUnit);
  NodeResources over_gpu{R({{"CPU", 4}, {"GPU", 1}}), R({{"GPU", 1}})};
  over_gpu.available.Set("CPU", -kResourceUnit);

  return {
      {.name = "fits here",
       .shape = R({{"CPU", 1}}),
       .here = idle,
       .view = {},
       .want = Kind::kGrant},
      {.name = "empty shape is granted on a busy node",
       .shape = none,
       .here = busy,
       .view = {},
       .want = Kind::kGrant},
      {.name = "lent CPU not withheld from it: granted",
       .shape = R({{"CPU", 1}}),
       .here = lent_one,
       .view = {},
       .want = Kind::kGrant},
      {.name = "lent CPU withheld from it, free elsewhere: spills",
       .shape = R({{"CPU", 1}}),
       .here = lent_one,
       .view = {Node("b", four, four)},
       .withheld = R({{"CPU", 1}}),
       .want = Kind::kSpillback,
       .want_node = "b"},
      {.name = "lent CPU withheld from it, nowhere else: waits",
       .shape = R({{"CPU", 1}}),
       .here = lent_one,
       .view = {},
       .withheld = R({{"CPU", 1}}),
       .want = Kind::kWait},
      {.name = "fits here later, elsewhere now",
       .shape = R({{"CPU", 1}}),
       .here = busy,
       .view = {Node("b", four, four)},
       .want = Kind::kSpillback,
       .want_node = "b"},
      {.name = "fits here later, nowhere now: waits",
       .shape = R({{"CPU", 1}}),
       .here = busy,
       .view = {Node("b", four, none)},
       .want = Kind::kWait},
      {.name = "no_spillback waits here",
       .shape = R({{"CPU", 1}}),
       .here = busy,
       .view = {Node("b", four, four)},
       .no_spillback = true,
       .want = Kind::kWait},
      {.name = "excluded node is not spilled to",
       .shape = R({{"CPU", 1}}),
       .here = busy,
       .view = {Node("b", four, four), Node("c", four, four)},
       .excluded = {"b"},
       .want = Kind::kSpillback,
       .want_node = "c"},
      {.name = "dead node is not spilled to",
       .shape = R({{"CPU", 1}}),
       .here = busy,
       .view = {Node("b", four, four, /*alive=*/false)},
       .want = Kind::kWait},
      {.name = "this node in the view is not spilled to",
       .shape = R({{"CPU", 1}}),
       .here = busy,
       .view = {Node("here", four, four)},
       .want = Kind::kWait},
      {.name = "the node with the most free CPU wins",
       .shape = R({{"CPU", 1}}),
       .here = busy,
       .view = {Node("b", four, R({{"CPU", 1}})), Node("c", four, four),
                Node("d", four, four)},
       .want = Kind::kSpillback,
       .want_node = "c"},
      {.name = "too big here, free elsewhere",
       .shape = R({{"CPU", 8}}),
       .here = idle,
       .view = {Node("b", R({{"CPU", 8}}), R({{"CPU", 8}}))},
       .want = Kind::kSpillback,
       .want_node = "b"},
      {.name = "too big here, fits elsewhere only by total",
       .shape = R({{"CPU", 8}}),
       .here = idle,
       .view = {Node("b", R({{"CPU", 8}}), none)},
       .want = Kind::kSpillback,
       .want_node = "b"},
      {.name = "too big here, no_spillback still spills (never fits here)",
       .shape = R({{"CPU", 8}}),
       .here = idle,
       .view = {Node("b", R({{"CPU", 8}}), none)},
       .no_spillback = true,
       .want = Kind::kSpillback,
       .want_node = "b"},
      {.name = "infeasible within the grace period waits",
       .shape = R({{"CPU", 8}}),
       .here = idle,
       .view = {},
       .waited_us = kGraceUs - 1,
       .want = Kind::kWait,
       .want_infeasible = true,
       .want_retry_at_us = kNow + 1},
      {.name = "infeasible after the grace period fails naming the largest",
       .shape = R({{"CPU", 8}}),
       .here = idle,
       .view = {},
       .waited_us = kGraceUs,
       .want = Kind::kInfeasible,
       .want_message = "no node has 8.0 CPU; the largest is 4.0 on node here"},
      {.name = "infeasible message names the view's nodes",
       .shape = R({{"TPU", 8}}),
       .here = idle,
       .view = {Node("here", four, four), Node("b", R({{"TPU", 4}}), none)},
       .waited_us = kGraceUs,
       .want = Kind::kInfeasible,
       .want_message = "the largest is 4.0 on node b (b:1)"},
      {.name = "invalid device count fails at once",
       .shape = R({{"TPU", 3}}),
       .here = idle,
       .view = {},
       .devices_valid = absl::InvalidArgumentError("ask for 1, 2 or 4 chips"),
       .want = Kind::kInvalid,
       .want_message = "ask for 1, 2 or 4 chips"},
      {.name = "bundle held here is granted",
       .shape = in_bundle,
       .here = {bundle_node, bundle_node},
       .view = {},
       .want = Kind::kGrant},
      {.name = "bundle held elsewhere spills there",
       .shape = in_bundle,
       .here = idle,
       .view = {Node("b", bundle_node, bundle_node)},
       .want = Kind::kSpillback,
       .want_node = "b"},
      {.name = "bundle held nowhere asks the head",
       .shape = in_bundle,
       .here = idle,
       .view = {},
       .want = Kind::kAskHeadAboutGroup,
       .want_retry_at_us = kNow + kGraceUs},
      {.name = "bundle held nowhere waits while asking",
       .shape = in_bundle,
       .here = idle,
       .view = {},
       .waited_us = 2 * kGraceUs,
       .group = GroupCheck::kAsking,
       .want = Kind::kWait,
       .want_retry_at_us = kNow + kGraceUs},
      {.name = "group being placed waits past the grace period",
       .shape = in_bundle,
       .here = idle,
       .view = {},
       .waited_us = 2 * kGraceUs,
       .group = GroupCheck::kBeingPlaced,
       .since_group_check_us = kGraceUs - 1,
       .want = Kind::kWait,
       .want_retry_at_us = kNow + kGraceUs},
      {.name = "group being placed is asked about again after a grace period",
       .shape = in_bundle,
       .here = idle,
       .view = {},
       .waited_us = 2 * kGraceUs,
       .group = GroupCheck::kBeingPlaced,
       .since_group_check_us = kGraceUs,
       .want = Kind::kAskHeadAboutGroup,
       .want_retry_at_us = kNow + kGraceUs},
      {.name = "group unknown and no head: infeasible after the grace period",
       .shape = in_bundle,
       .here = idle,
       .view = {},
       .waited_us = kGraceUs,
       .can_ask_head = false,
       .want = Kind::kInfeasible,
       .want_message = "placement group " + pg + " holds no bundle 0"},
      {.name = "a selector this node matches is granted here",
       .shape = R({{"CPU", 1}}),
       .here = idle,
       .view = {Labeled(Node("b", four, four), {{"zone", "b"}})},
       .here_labels = {{"zone", "a"}},
       .selector = {{"zone", "a"}},
       .want = Kind::kGrant},
      {.name = "a selector only another node matches spills there",
       .shape = R({{"CPU", 1}}),
       .here = idle,
       .view = {Labeled(Node("b", four, four), {{"zone", "b"}}),
                Labeled(Node("c", four, four), {{"zone", "c"}})},
       .here_labels = {{"zone", "a"}},
       .selector = {{"zone", "c"}},
       .want = Kind::kSpillback,
       .want_node = "c"},
      {.name = "a selected node that is busy is still the only choice",
       .shape = R({{"CPU", 1}}),
       .here = idle,
       .view = {Labeled(Node("b", four, none), {{"shoal.io/node-id", "b"}}),
                Labeled(Node("c", four, four), {{"shoal.io/node-id", "c"}})},
       .selector = {{"ray.io/node-id", "b"}},
       .want = Kind::kSpillback,
       .want_node = "b"},
      {.name = "no_spillback does not keep a request where it does not match",
       .shape = R({{"CPU", 1}}),
       .here = idle,
       .view = {Labeled(Node("b", four, four), {{"zone", "b"}})},
       .no_spillback = true,
       .selector = {{"zone", "b"}},
       .want = Kind::kSpillback,
       .want_node = "b"},
      {.name = "a hard selector no node matches waits, then is infeasible",
       .shape = R({{"CPU", 1}}),
       .here = idle,
       .view = {Labeled(Node("b", four, four), {{"zone", "b"}})},
       .waited_us = kGraceUs,
       .selector = {{"zone", "z"}},
       .want = Kind::kInfeasible,
       .want_message = "no live node has labels matching {zone=z}"},
      {.name = "a dead node matches nothing",
       .shape = R({{"CPU", 1}}),
       .here = idle,
       .view = {Labeled(Node("b", four, four, /*alive=*/false),
                        {{"zone", "b"}})},
       .selector = {{"zone", "b"}},
       .want = Kind::kWait,
       .want_infeasible = true,
       .want_retry_at_us = kNow + kGraceUs},
      {.name = "a soft selector no live node matches runs anywhere",
       .shape = R({{"CPU", 1}}),
       .here = idle,
       .view = {Labeled(Node("b", four, four, /*alive=*/false),
                        {{"zone", "b"}})},
       .selector = {{"zone", "b"}},
       .soft = true,
       .want = Kind::kGrant},
      {.name = "a soft selector a live node matches is kept",
       .shape = R({{"CPU", 1}}),
       .here = idle,
       .view = {Labeled(Node("b", four, four), {{"zone", "b"}})},
       .selector = {{"zone", "b"}},
       .soft = true,
       .want = Kind::kSpillback,
       .want_node = "b"},
      {.name = "over-committed node grants nothing",
       .shape = R({{"CPU", 1}}),
       .here = over,
       .view = {},
       .want = Kind::kWait},
      {.name = "over-committed node grants nothing, even without CPU",
       .shape = R({{"GPU", 1}}),
       .here = over_gpu,
       .view = {},
       .want = Kind::kWait},
      {.name = "over-committed node spills to a free one",
       .shape = R({{"CPU", 1}}),
       .here = over,
       .view = {Node("b", four, four)},
       .want = Kind::kSpillback,
       .want_node = "b"},
  };
}

TEST(DecideLeaseTest, Table) {
  for (const Case& c : DecideLeaseCases()) {
    SCOPED_TRACE(c.name);
    LeaseAsk ask;
    ask.shape = c.shape;
    ask.excluded_nodes = c.excluded;
    ask.no_spillback = c.no_spillback;
    ask.devices_valid = c.devices_valid;
    ask.arrival_us = kNow - c.waited_us;
    ask.group = c.group;
    ask.group_checked_us = kNow - c.since_group_check_us;
    auto selector = LabelSelector::Parse(c.selector, c.soft);
    ASSERT_TRUE(selector.ok()) << selector.status();
    ask.selector = *selector;
    const std::string id = "here";
    const std::string address = "here:1";
    LocalNode node{id,       address,    c.here,        c.view, c.can_ask_head,
                   kGraceUs, c.withheld, &c.here_labels};
    LeaseDecision d = DecideLease(ask, node, kNow);
    EXPECT_EQ(d.kind, c.want);
    if (c.want == Kind::kSpillback) {
      EXPECT_EQ(d.node_id, c.want_node);
      EXPECT_EQ(d.node_address, c.want_node + ":1");
    }
    if (!c.want_message.empty()) {
      EXPECT_TRUE(absl::StrContains(d.message, c.want_message)) << d.message;
    }
    if (c.want == Kind::kWait) {
      EXPECT_EQ(d.infeasible, c.want_infeasible);
    }
    if (c.want == Kind::kAskHeadAboutGroup) {
      EXPECT_EQ(d.group_id, kGroup);
    }
    EXPECT_EQ(d.retry_at_us, c.want_retry_at_us);
  }
}

TEST(BaseShapeTest, MapsBundleResourcesToTheirBase) {
  ResourceSet shape = R({{"TPU_group_0_pg1", 4},
                         {"TPU_group_pg1", 4},
                         {"CPU_group_0_pg1", 1},
                         {"memory", 100}});
  EXPECT_EQ(BaseShape(shape), R({{"TPU", 4}, {"CPU", 1}, {"memory", 100}}));
  EXPECT_EQ(GroupOfShape(shape), "pg1");
  EXPECT_EQ(GroupOfShape(R({{"CPU", 1}})), "");
}

class FakeTpus : public accel::AcceleratorManager {
 public:
  std::string ResourceName() const override { return "TPU"; }
  int NumDevices() const override { return 4; }
  std::string AcceleratorType() const override { return "TPU-V5P"; }
  std::map<std::string, double> ExtraResources() const override { return {}; }
  std::map<std::string, std::string> Labels() const override { return {}; }
  absl::Status ValidateRequest(double quantity) const override {
    if (quantity == 0 || quantity == 1 || quantity == 2 || quantity == 4) {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError("ask for 1, 2 or 4 TPU chips");
  }
  absl::StatusOr<accel::DeviceEnvironment> VisibleDevicesEnvironment(
      const std::vector<int>&) const override {
    return accel::DeviceEnvironment();
  }
  std::string Summary() const override { return "TPU 4 chips"; }
};

TEST(ValidateDevicesTest, CountsBundleResourcesAsTheirBase) {
  std::vector<std::shared_ptr<const accel::AcceleratorManager>> tpus = {
      std::make_shared<FakeTpus>()};
  EXPECT_TRUE(ValidateDevices(tpus, R({{"TPU", 4}})).ok());
  EXPECT_TRUE(ValidateDevices(tpus, R({{"CPU", 1}})).ok());
  EXPECT_EQ(ValidateDevices(tpus, R({{"TPU", 3}})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateDevices(tpus, R({{"TPU_group_0_pg", 3}})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateDevices({}, R({{"TPU", 3}})).ok());
}

TEST(CountSpillbackTest, TakesTheShapeFromTheNodeUntilItNoLongerFits) {
  ResourceSet four = R({{"CPU", 4}});
  std::vector<proto::NodeInfo> view = {Node("a", four, four),
                                       Node("b", four, R({{"CPU", 3}}))};
  CountSpillback("b", R({{"CPU", 2}}), &view);
  EXPECT_EQ(ResourceSet::FromProto(view[1].available()), R({{"CPU", 1}}));
  CountSpillback("b", R({{"CPU", 2}}), &view);  // no longer fits: unchanged
  EXPECT_EQ(ResourceSet::FromProto(view[1].available()), R({{"CPU", 1}}));
  EXPECT_EQ(ResourceSet::FromProto(view[0].available()), four);
  CountSpillback("nobody", R({{"CPU", 1}}), &view);
}

TEST(GroupGoneMessageTest, SaysWhyAGroupsTasksCannotRun) {
  struct Case {
    std::string name;
    absl::StatusOr<proto::PlacementGroupInfo> info;
    std::string want;  // a part of the message; "" for none
  };
  auto in_state = [](proto::PlacementGroupInfo::State state) {
    proto::PlacementGroupInfo info;
    info.set_state(state);
    info.set_error("no node has 8 TPU");
    return info;
  };
  std::vector<Case> cases = {
      {"unknown", absl::NotFoundError("no such group"),
       "no placement group pg1 exists on this cluster; its tasks cannot run"},
      {"removed", in_state(proto::PlacementGroupInfo::REMOVED),
       "placement group pg1 was removed"},
      {"failed", in_state(proto::PlacementGroupInfo::FAILED),
       "placement group pg1 failed: no node has 8 TPU; its tasks cannot run"},
      {"being placed", in_state(proto::PlacementGroupInfo::PENDING), ""},
      {"head cannot say", absl::UnavailableError("head restarting"), ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::string got = GroupGoneMessage("pg1", c.info);
    if (c.want.empty()) {
      EXPECT_EQ(got, "");
    } else {
      EXPECT_TRUE(absl::StrContains(got, c.want)) << got;
    }
  }
}

}  // namespace
}  // namespace shoal::agent
