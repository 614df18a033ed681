#include "scheduling/resource_set.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shoal/shoal.pb.h"

namespace shoal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

using Amounts = std::map<std::string, double>;
using FixedAmounts = std::map<std::string, int64_t>;

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kMiB = int64_t{1} << 20;

int64_t Fixed(double value) { return std::llround(value * kResourceUnit); }

// REQUIRES: `amounts` is valid.
ResourceSet Make(const Amounts& amounts) {
  absl::StatusOr<ResourceSet> set = ResourceSet::FromDoubles(amounts);
  EXPECT_TRUE(set.ok()) << set.status();
  return set.ok() ? *set : ResourceSet();
}

TEST(ResourceSetTest, FromDoublesAcceptsValidAmounts) {
  struct Case {
    std::string label;
    Amounts input;
    FixedAmounts want;
  };
  const std::vector<Case> cases = {
      {"empty", {}, {}},
      {"fractional CPU", {{"CPU", 1.5}}, {{"CPU", 15000}}},
      {"fractional GPU below one", {{"GPU", 0.5}}, {{"GPU", 5000}}},
      {"quarter accelerator", {{"accel_x", 0.25}}, {{"accel_x", 2500}}},
      {"whole accelerators", {{"accel_x", 4}}, {{"accel_x", 40000}}},
      {"exactly one", {{"accel_x", 1}}, {{"accel_x", 10000}}},
      {"fractional memory bytes",
       {{"memory", 1.5 * kGiB + 0.5}},
       {{"memory", Fixed(1.5 * kGiB + 0.5)}}},
      {"fractional object store",
       {{"object_store_memory", 100.25}},
       {{"object_store_memory", 1002500}}},
      {"zero is not stored",
       {{"CPU", 0}, {"GPU", 1}},
       {{"GPU", kResourceUnit}}},
      {"rounds to nearest unit", {{"CPU", 1.0 / 3}}, {{"CPU", 3333}}},
      {"rounds up to nearest unit", {{"CPU", 0.00006}}, {{"CPU", 1}}},
      {"near-whole rounds to whole",
       {{"accel_x", 2.00001}},
       {{"accel_x", 20000}}},
      {"several",
       {{"CPU", 2}, {"accel_x", 4}, {"memory", 1024}},
       {{"CPU", 20000}, {"accel_x", 40000}, {"memory", 1024 * kResourceUnit}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    absl::StatusOr<ResourceSet> set = ResourceSet::FromDoubles(c.input);
    ASSERT_TRUE(set.ok()) << set.status();
    EXPECT_EQ(set->amounts(), c.want);
  }
}

TEST(ResourceSetTest, FromDoublesRejectsInvalidAmounts) {
  struct Case {
    std::string label;
    Amounts input;
    std::vector<std::string> want_in_message;
  };
  const double kInf = std::numeric_limits<double>::infinity();
  const std::vector<Case> cases = {
      {"fractional accelerator above one",
       {{"accel_x", 1.5}},
       {"resource \"accel_x\" must be a whole number when 1 or more (got 1.5); "
        "ask for 1 or 2"}},
      {"fractional GPU above one",
       {{"GPU", 2.25}},
       {"\"GPU\"", "got 2.25", "ask for 2 or 3"}},
      {"negative", {{"CPU", -1}}, {"\"CPU\"", "negative", "got -1"}},
      {"negative zero point five", {{"GPU", -0.5}}, {"\"GPU\"", "negative"}},
      {"nan", {{"CPU", std::nan("")}}, {"\"CPU\"", "finite"}},
      {"infinity", {{"memory", kInf}}, {"\"memory\"", "finite"}},
      {"negative infinity", {{"CPU", -kInf}}, {"\"CPU\"", "finite"}},
      {"empty name", {{"", 1}}, {"empty name"}},
      {"too large", {{"memory", 1e20}}, {"\"memory\"", "too large"}},
      {"below the smallest unit",
       {{"GPU", 0.00001}},
       {"\"GPU\"", "smallest", "0.0001"}},
      {"first bad name among good ones",
       {{"CPU", 1}, {"accel_y", 3.5}},
       {"\"accel_y\"", "ask for 3 or 4"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    absl::StatusOr<ResourceSet> set = ResourceSet::FromDoubles(c.input);
    ASSERT_FALSE(set.ok());
    EXPECT_EQ(set.status().code(), absl::StatusCode::kInvalidArgument);
    for (const std::string& part : c.want_in_message) {
      EXPECT_THAT(set.status().message(), HasSubstr(part));
    }
  }
}

TEST(ResourceSetTest, FromJsonParsesObjects) {
  struct Case {
    std::string json;
    FixedAmounts want;
  };
  const std::vector<Case> cases = {
      {R"({"accel_x": 4, "CPU": 2})", {{"CPU", 20000}, {"accel_x", 40000}}},
      {"{}", {}},
      {R"(  {"GPU": 0.5}  )", {{"GPU", 5000}}},
      {R"({"memory": 1073741824})", {{"memory", kGiB * kResourceUnit}}},
      {R"({"CPU": 1.5e0, "x": 0})", {{"CPU", 15000}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.json);
    absl::StatusOr<ResourceSet> set = ResourceSet::FromJson(c.json);
    ASSERT_TRUE(set.ok()) << set.status();
    EXPECT_EQ(set->amounts(), c.want);
  }
}

TEST(ResourceSetTest, FromJsonRejectsBadInput) {
  struct Case {
    std::string json;
    std::vector<std::string> want_in_message;
  };
  const std::vector<Case> cases = {
      // Not an object.
      {"[1, 2]", {"must be a JSON object", "[1, 2]"}},
      {"42", {"must be a JSON object", "42"}},
      {R"("CPU")", {"must be a JSON object"}},
      {"null", {"must be a JSON object"}},
      // Values that are not numbers name their key.
      {R"({"CPU": "two"})", {"\"CPU\"", "must be a number", "\"two\""}},
      {R"({"GPU": true})", {"\"GPU\"", "must be a number", "true"}},
      {R"({"accel_x": null})", {"\"accel_x\"", "must be a number"}},
      {R"({"accel_x": [4]})", {"\"accel_x\"", "must be a number"}},
      {R"({"accel_x": {"n": 4}})", {"\"accel_x\"", "must be a number"}},
      // Malformed JSON shows the input.
      {R"({"CPU": })", {"malformed", R"('{"CPU": }')"}},
      {R"({"CPU": 1,})", {"malformed", R"({"CPU": 1,})"}},
      {"{CPU: 1}", {"malformed", "{CPU: 1}"}},
      {"", {"malformed"}},
      {R"({"CPU": 1} trailing)", {"malformed", "trailing"}},
      // Quantity rules apply as for FromDoubles.
      {R"({"accel_x": 1.5})",
       {"\"accel_x\"", "whole number", "ask for 1 or 2"}},
      {R"({"CPU": -2})", {"\"CPU\"", "negative"}},
      {R"({"": 1})", {"empty name"}},
      // Beyond a double (the parser itself fails) or beyond the fixed-point
      // range: the key is named, nothing throws.
      {R"({"x": 1e400})", {"\"x\"", "out of range", "1e400"}},
      {R"({"CPU": 1, "x": -1e400})", {"\"x\"", "out of range"}},
      {R"({"x": 1e300})", {"\"x\"", "too large"}},
      {R"({"x": 100000000000000000000000000000})", {"\"x\"", "too large"}},
      {R"({"x": -0.5})", {"\"x\"", "negative"}},
      {"1e400", {"malformed", "1e400"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.json);
    absl::StatusOr<ResourceSet> set = ResourceSet::FromJson(c.json);
    ASSERT_FALSE(set.ok());
    EXPECT_EQ(set.status().code(), absl::StatusCode::kInvalidArgument);
    for (const std::string& part : c.want_in_message) {
      EXPECT_THAT(set.status().message(), HasSubstr(part));
    }
  }
}

TEST(ResourceSetTest, ProtoRoundTrip) {
  const ResourceSet set = Make(
      {{"CPU", 1.5}, {"GPU", 0.25}, {"accel_x", 8}, {"memory", 3.0 * kGiB}});
  proto::ResourceMap map;
  set.ToProto(&map);
  EXPECT_THAT(map.amounts(),
              UnorderedElementsAre(Pair("CPU", 15000), Pair("GPU", 2500),
                                   Pair("accel_x", 80000),
                                   Pair("memory", 3 * kGiB * kResourceUnit)));
  EXPECT_EQ(ResourceSet::FromProto(map), set);
}

TEST(ResourceSetTest, ToProtoReplacesExistingEntries) {
  proto::ResourceMap map;
  (*map.mutable_amounts())["stale"] = 7;
  Make({{"CPU", 1}}).ToProto(&map);
  EXPECT_THAT(map.amounts(), UnorderedElementsAre(Pair("CPU", kResourceUnit)));
}

TEST(ResourceSetTest, FromProtoDropsEntriesThatCannotBeValid) {
  proto::ResourceMap map;
  auto& amounts = *map.mutable_amounts();
  amounts["CPU"] = 20000;
  amounts["zero"] = 0;
  amounts["negative"] = -10000;
  amounts[""] = 10000;
  EXPECT_EQ(ResourceSet::FromProto(map).amounts(),
            (FixedAmounts{{"CPU", 20000}}));
}

TEST(ResourceSetTest, GetSetAndDoubles) {
  ResourceSet set;
  EXPECT_TRUE(set.empty());
  EXPECT_EQ(set.Get("CPU"), 0);
  EXPECT_EQ(set.GetDouble("CPU"), 0.0);

  set.Set("CPU", 25000);
  set.Set("GPU", 5000);
  EXPECT_FALSE(set.empty());
  EXPECT_EQ(set.Get("CPU"), 25000);
  EXPECT_DOUBLE_EQ(set.GetDouble("CPU"), 2.5);
  EXPECT_THAT(set.ToDoubles(), ElementsAre(Pair("CPU", 2.5), Pair("GPU", 0.5)));

  set.Set("CPU", 0);
  EXPECT_EQ(set.amounts(), (FixedAmounts{{"GPU", 5000}}));
  set.Set("GPU", 0);
  EXPECT_TRUE(set.empty());
}

TEST(ResourceSetTest, Contains) {
  struct Case {
    std::string label;
    Amounts have;
    Amounts demand;
    bool want;
  };
  const std::vector<Case> cases = {
      {"empty demand", {}, {}, true},
      {"empty demand on a node", {{"CPU", 1}}, {}, true},
      {"equal",
       {{"CPU", 2}, {"accel_x", 4}},
       {{"CPU", 2}, {"accel_x", 4}},
       true},
      {"less", {{"CPU", 2}, {"accel_x", 4}}, {{"accel_x", 1}}, true},
      {"fraction", {{"GPU", 1}}, {{"GPU", 0.5}}, true},
      {"too much", {{"CPU", 2}}, {{"CPU", 2.0001}}, false},
      {"absent resource", {{"CPU", 2}}, {{"accel_x", 1}}, false},
      {"one of two short",
       {{"CPU", 8}, {"accel_x", 2}},
       {{"CPU", 4}, {"accel_x", 4}},
       false},
      {"nothing held", {}, {{"CPU", 0.0001}}, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    EXPECT_EQ(Make(c.have).Contains(Make(c.demand)), c.want);
  }
}

TEST(ResourceSetTest, AddAndSubtractDoNotDrift) {
  ResourceSet total;
  const ResourceSet tenth = Make({{"CPU", 0.1}});
  for (int i = 0; i < 10; ++i) total.Add(tenth);
  EXPECT_EQ(total, Make({{"CPU", 1}}));
  for (int i = 0; i < 10; ++i) total.Subtract(tenth);
  EXPECT_TRUE(total.empty());
}

TEST(ResourceSetTest, AddAndSubtract) {
  ResourceSet available = Make({{"CPU", 4}, {"accel_x", 4}});
  available.Add(Make({{"GPU", 0.5}, {"CPU", 1}}));
  EXPECT_EQ(available, Make({{"CPU", 5}, {"GPU", 0.5}, {"accel_x", 4}}));

  available.Subtract(Make({{"GPU", 0.5}, {"accel_x", 1}}));
  EXPECT_EQ(available.amounts(),
            (FixedAmounts{{"CPU", 50000}, {"accel_x", 30000}}));
}

TEST(ResourceSetTest, SubtractBeyondHeldIsUndoneByAdd) {
  ResourceSet available = Make({{"CPU", 1}});
  const ResourceSet lease = Make({{"CPU", 2}, {"accel_x", 1}});
  available.Subtract(lease);
  EXPECT_EQ(available.Get("CPU"), -kResourceUnit);
  EXPECT_EQ(available.Get("accel_x"), -kResourceUnit);
  EXPECT_FALSE(available.Contains(Make({{"CPU", 0.5}})));
  available.Add(lease);
  EXPECT_EQ(available, Make({{"CPU", 1}}));
}

TEST(ResourceSetTest, FormatQuantity) {
  struct Case {
    std::string name;
    int64_t fixed;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"CPU", Fixed(1), "1.0"},
      {"CPU", Fixed(0.5), "0.5"},
      {"GPU", Fixed(0.25), "0.25"},
      {"accel_x", Fixed(4), "4.0"},
      {"CPU", 0, "0.0"},
      {"CPU", 1, "0.0001"},
      {"CPU", Fixed(1.2345), "1.2345"},
      {"CPU", Fixed(16), "16.0"},
      {"CPU", Fixed(-1.5), "-1.5"},
      {"memory", 0, "0B"},
      {"memory", 1 * kResourceUnit, "1.00B"},
      {"memory", 1023 * kResourceUnit, "1023.00B"},
      {"memory", 1024 * kResourceUnit, "1.00KiB"},
      {"memory", 512 * kMiB * kResourceUnit, "512.00MiB"},
      {"memory", (kGiB + kGiB / 2) * kResourceUnit, "1.50GiB"},
      {"memory", (kGiB - 1) * kResourceUnit, "1.00GiB"},
      {"object_store_memory", 2 * kGiB * kResourceUnit, "2.00GiB"},
      {"memory", 3 * (kGiB << 10) * kResourceUnit, "3.00TiB"},
      {"memory", 800 * (kGiB << 10) * kResourceUnit, "800.00TiB"},
      {"memory", -kGiB * kResourceUnit, "-1.00GiB"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name + " " + std::to_string(c.fixed));
    EXPECT_EQ(FormatQuantity(c.name, c.fixed), c.want);
  }
}

TEST(ResourceSetTest, DebugString) {
  struct Case {
    Amounts amounts;
    std::string want;
  };
  const std::vector<Case> cases = {
      {{}, "{}"},
      {{{"accel_x", 4}, {"CPU", 1}}, "{CPU: 1.0, accel_x: 4.0}"},
      {{{"GPU", 0.25}, {"memory", 512.0 * kMiB}},
       "{GPU: 0.25, memory: 512.00MiB}"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.want);
    EXPECT_EQ(Make(c.amounts).DebugString(), c.want);
  }
}

TEST(ResourceSetTest, MissingFor) {
  const ResourceSet node = Make({{"CPU", 4}, {"accel_x", 2}});
  EXPECT_THAT(node.MissingFor(Make({{"CPU", 2}})), IsEmpty());
  EXPECT_THAT(node.MissingFor(Make({{"accel_x", 4}, {"CPU", 8}, {"GPU", 1}})),
              ElementsAre("CPU", "GPU", "accel_x"));
}

TEST(ResourceSetTest, BundleResources) {
  BundleResource b;
  ASSERT_TRUE(ParseBundleResource("CPU_group_3_d04157891339", &b));
  EXPECT_EQ(b.base, "CPU");
  EXPECT_EQ(b.bundle_index, 3);
  EXPECT_EQ(b.group_id, "d04157891339");
  ASSERT_TRUE(ParseBundleResource("TPU_group_d04157891339", &b));
  EXPECT_EQ(b.base, "TPU");
  EXPECT_EQ(b.bundle_index, -1);
  EXPECT_EQ(b.group_id, "d04157891339");
  EXPECT_FALSE(ParseBundleResource("CPU", &b));
  EXPECT_FALSE(ParseBundleResource("_group_1_x", &b));
  EXPECT_FALSE(ParseBundleResource("CPU_group_", &b));
  auto set = ResourceSet::FromDoubles(
      {{"CPU", 2}, {"CPU_group_0_ab", 1}, {"CPU_group_ab", 1}});
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(WithoutBundleResources(*set).ToDoubles(), (Amounts{{"CPU", 2}}));
}

TEST(ResourceSetTest, DescribeInfeasibleNamesAGroupThatIsGone) {
  auto demand = ResourceSet::FromDoubles({{"CPU_group_0_ab12", 1}});
  ASSERT_TRUE(demand.ok());
  auto node = ResourceSet::FromDoubles({{"CPU", 4}});
  ASSERT_TRUE(node.ok());
  std::string message = DescribeInfeasible(*demand, {{"n1", *node}});
  EXPECT_THAT(message, ::testing::HasSubstr(
                           "placement group ab12 holds no bundle 0 on any "
                           "live node: it was removed"));
  EXPECT_THAT(message, ::testing::Not(::testing::HasSubstr("--resources")));
}

TEST(ResourceSetTest, DescribeInfeasible) {
  struct Case {
    std::string label;
    Amounts demand;
    std::vector<std::pair<std::string, Amounts>> nodes;
    std::vector<std::string> want_in_message;
  };
  const std::vector<Case> cases = {
      {"no nodes", {{"CPU", 1}}, {}, {"no node is alive"}},
      {"largest is too small",
       {{"accel_x", 8}},
       {{"n1 (127.0.0.1:40120)", {{"CPU", 8}}},
        {"n2 (127.0.0.1:40121)", {{"CPU", 8}, {"accel_x", 4}}},
        {"n3 (127.0.0.1:40122)", {{"accel_x", 2}}}},
       {"no node has 8.0 accel_x; the largest is 4.0 on node n2 "
        "(127.0.0.1:40121)",
        "ask for at most 4.0 accel_x"}},
      {"ties go to the first node",
       {{"CPU", 16}},
       {{"n1 (a:1)", {{"CPU", 8}}}, {"n2 (a:2)", {{"CPU", 8}}}},
       {"no node has 16.0 CPU; the largest is 8.0 on node n1 (a:1)"}},
      {"nobody has any",
       {{"accel_x", 8}},
       {{"n1 (127.0.0.1:40120)", {{"CPU", 8}}}},
       {"no node has any accel_x (asked for 8.0); start a node with "
        R"(--resources='{"accel_x": 8}')"}},
      {"nobody has any GPU: its own flag, a whole number",
       {{"GPU", 0.5}},
       {{"n1 (a:1)", {{"CPU", 8}}}},
       {"no node has any GPU (asked for 0.5); add a node with GPUs "
        "(`shoal start --num-gpus=1` where they are not detected)"}},
      {"nobody has any GPU",
       {{"GPU", 2}},
       {{"n1 (a:1)", {{"CPU", 8}}}},
       {"`shoal start --num-gpus=2`"}},
      {"nobody has any TPU",
       {{"TPU", 4}},
       {{"n1 (a:1)", {{"CPU", 8}}}},
       {"`shoal start --num-tpus=4`"}},
      {"first short resource in sorted order",
       {{"accel_x", 8}, {"CPU", 64}, {"memory", 1.0 * kGiB}},
       {{"n1 (a:1)", {{"CPU", 8}, {"accel_x", 4}}}},
       {"no node has 64.0 CPU; the largest is 8.0 on node n1 (a:1)"}},
      {"memory is shown as bytes",
       {{"memory", 4.0 * kGiB}},
       {{"n1 (a:1)", {{"memory", 1.5 * kGiB}}}},
       {"no node has 4.00GiB memory; the largest is 1.50GiB on node n1 (a:1)"}},
      {"no single node has all; the smaller shortfall wins",
       {{"CPU", 4}, {"accel_x", 2}},
       {{"n1 (a:1)", {{"CPU", 8}}}, {"n2 (a:2)", {{"CPU", 2}, {"accel_x", 4}}}},
       {"no single node has {CPU: 4.0, accel_x: 2.0} together",
        "node n2 (a:2), which lacks CPU (has 2.0 of 4.0)"}},
      {"closest node lacks the fewest",
       {{"CPU", 4}, {"GPU", 1}, {"accel_x", 2}},
       {{"n1 (a:1)", {{"CPU", 8}}},
        {"n2 (a:2)", {{"GPU", 1}, {"accel_x", 2}}},
        {"n3 (a:3)", {{"CPU", 1}, {"GPU", 1}}}},
       {"node n2 (a:2), which lacks CPU (has 0.0 of 4.0)"}},
      {"several lacks are joined",
       {{"CPU", 4}, {"GPU", 1}, {"accel_x", 2}},
       {{"n1 (a:1)", {{"CPU", 8}}},
        {"n2 (a:2)", {{"GPU", 1}}},
        {"n3 (a:3)", {{"accel_x", 2}}}},
       {"node n1 (a:1), which lacks GPU (has 0.0 of 1.0) and accel_x "
        "(has 0.0 of 2.0)"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    std::vector<NodeTotals> nodes;
    for (const auto& [description, total] : c.nodes) {
      nodes.push_back({description, Make(total)});
    }
    const std::string message = DescribeInfeasible(Make(c.demand), nodes);
    for (const std::string& part : c.want_in_message) {
      EXPECT_THAT(message, HasSubstr(part));
    }
  }
}

}  // namespace
}  // namespace shoal
