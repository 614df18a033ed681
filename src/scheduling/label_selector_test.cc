#include "scheduling/label_selector.h"

#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal {
namespace {

using Labels = std::map<std::string, std::string>;

LabelSelector Selector(const Labels& s, bool soft = false) {
  auto parsed = LabelSelector::Parse(s, soft);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? *parsed : LabelSelector();
}

TEST(LabelSelectorTest, EachFormSelectsWhatItSays) {
  struct Case {
    std::string value;
    std::string have;  // "" : the node has no such label
    bool matches;
  };
  const Case cases[] = {
      {"a", "a", true},       {"a", "b", false},        {"a", "", false},
      {"!a", "a", false},     {"!a", "b", true},        {"!a", "", true},
      {"in(a,b)", "b", true}, {"in(a, b)", "b", true},  {"in(a,b)", "c", false},
      {"in(a,b)", "", false}, {"!in(a,b)", "a", false}, {"!in(a,b)", "c", true},
      {"!in(a,b)", "", true},
  };
  for (const Case& c : cases) {
    Labels node;
    if (!c.have.empty()) node["zone"] = c.have;
    EXPECT_EQ(Selector({{"zone", c.value}}).Matches(node), c.matches)
        << c.value << " on " << (c.have.empty() ? "(none)" : c.have);
  }
}

TEST(LabelSelectorTest, EveryEntryMustMatch) {
  LabelSelector s = Selector({{"zone", "a"}, {"disk", "!hdd"}});
  EXPECT_TRUE(s.Matches(Labels{{"zone", "a"}}));
  EXPECT_TRUE(s.Matches(Labels{{"zone", "a"}, {"disk", "ssd"}}));
  EXPECT_FALSE(s.Matches(Labels{{"zone", "a"}, {"disk", "hdd"}}));
  EXPECT_FALSE(s.Matches(Labels{{"disk", "ssd"}}));
  EXPECT_TRUE(LabelSelector().Matches(Labels{}));
}

TEST(LabelSelectorTest, RayKeysNameShoalLabels) {
  LabelSelector s = Selector({{"ray.io/node-id", "n1"}});
  EXPECT_TRUE(s.Matches(Labels{{kLabelNodeId, "n1"}}));
  EXPECT_FALSE(s.Matches(Labels{{kLabelNodeId, "n2"}}));
  EXPECT_EQ(s.DebugString(), "{shoal.io/node-id=n1}");
}

TEST(LabelSelectorTest, BadEntriesSayWhy) {
  for (const auto& [key, value] : Labels{{"", "a"},
                                         {"k1", ""},
                                         {"k2", "!"},
                                         {"k3", "in(a"},
                                         {"k4", "in()"},
                                         {"k5", "in(a,,b)"}}) {
    auto parsed = LabelSelector::Parse({{key, value}});
    ASSERT_FALSE(parsed.ok()) << key << "=" << value;
    EXPECT_THAT(parsed.status().message(),
                testing::HasSubstr("label_selector entry"));
  }
}

TEST(LabelSelectorTest, TravelsAsProtoAndMatchesProtoLabels) {
  LabelSelector s = Selector({{"zone", "in(a,b)"}}, /*soft=*/true);
  proto::LabelSelector wire;
  s.ToProto(&wire);
  auto back = LabelSelector::FromProto(wire);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->soft());
  EXPECT_EQ(back->DebugString(), "{zone in (a, b)} (preferred)");
  proto::NodeInfo node;
  (*node.mutable_labels())["zone"] = "b";
  EXPECT_TRUE(back->Matches(node.labels()));
  (*node.mutable_labels())["zone"] = "c";
  EXPECT_FALSE(back->Matches(node.labels()));
}

TEST(LabelSelectorTest, ANodeInfoMatchesItsIdAsTheNodeIdLabel) {
  proto::NodeInfo node;
  node.set_node_id("n7");
  (*node.mutable_labels())["zone"] = "a";
  EXPECT_TRUE(Selector({{"ray.io/node-id", "n7"}}).Matches(node));
  EXPECT_TRUE(Selector({{kLabelNodeId, "n7"}, {"zone", "a"}}).Matches(node));
  EXPECT_FALSE(Selector({{kLabelNodeId, "n8"}}).Matches(node));
  EXPECT_TRUE(Selector({{kLabelNodeId, "!n8"}}).Matches(node));
}

}  // namespace
}  // namespace shoal
