#include "scheduling/label_selector.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace shoal {
namespace {

constexpr char kRayPrefix[] = "ray.io/";
constexpr char kShoalPrefix[] = "shoal.io/";

absl::Status Bad(const std::string& key, const std::string& value,
                 const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat("label_selector entry \"", key, "\": \"", value, "\": ", why,
                   " (a value is \"v\", \"!v\", \"in(a,b)\" or \"!in(a,b)\")"));
}

}  // namespace

absl::StatusOr<LabelSelector> LabelSelector::Parse(
    const std::map<std::string, std::string>& selector, bool soft) {
  LabelSelector s;
  s.soft_ = soft;
  for (const auto& [key, value] : selector) {
    if (key.empty()) return Bad(key, value, "the key is empty");
    Term t;
    t.key = key;
    if (absl::StartsWith(key, kRayPrefix)) {
      t.key = absl::StrCat(kShoalPrefix, key.substr(sizeof(kRayPrefix) - 1));
    }
    t.source = value;
    absl::string_view v = value;
    t.negate = absl::ConsumePrefix(&v, "!");
    if (absl::ConsumePrefix(&v, "in(")) {
      if (!absl::ConsumeSuffix(&v, ")")) {
        return Bad(key, value, "in( is not closed");
      }
      for (absl::string_view item : absl::StrSplit(v, ',')) {
        item = absl::StripAsciiWhitespace(item);
        if (item.empty()) return Bad(key, value, "in() has an empty item");
        t.values.emplace_back(item);
      }
    } else {
      if (v.empty()) return Bad(key, value, "the value is empty");
      t.values.emplace_back(v);
    }
    s.terms_.push_back(std::move(t));
  }
  std::sort(s.terms_.begin(), s.terms_.end(),
            [](const Term& a, const Term& b) { return a.key < b.key; });
  return s;
}

absl::StatusOr<LabelSelector> LabelSelector::FromProto(
    const proto::LabelSelector& selector) {
  std::map<std::string, std::string> labels(selector.labels().begin(),
                                            selector.labels().end());
  return Parse(labels, selector.soft());
}

void LabelSelector::ToProto(proto::LabelSelector* out) const {
  out->Clear();
  for (const Term& t : terms_) (*out->mutable_labels())[t.key] = t.source;
  out->set_soft(soft_);
}

template <typename Lookup>
bool LabelSelector::MatchesWith(const Lookup& lookup) const {
  for (const Term& t : terms_) {
    const std::string* have = lookup(t.key);
    bool in = have != nullptr && std::find(t.values.begin(), t.values.end(),
                                           *have) != t.values.end();
    if (in == t.negate) return false;
  }
  return true;
}

bool LabelSelector::Matches(
    const std::map<std::string, std::string>& labels) const {
  return MatchesWith([&](const std::string& key) -> const std::string* {
    auto it = labels.find(key);
    return it == labels.end() ? nullptr : &it->second;
  });
}

bool LabelSelector::Matches(
    const google::protobuf::Map<std::string, std::string>& labels) const {
  return MatchesWith([&](const std::string& key) -> const std::string* {
    auto it = labels.find(key);
    return it == labels.end() ? nullptr : &it->second;
  });
}

bool LabelSelector::Matches(const proto::NodeInfo& node) const {
  return MatchesWith([&](const std::string& key) -> const std::string* {
    if (key == kLabelNodeId) return &node.node_id();
    auto it = node.labels().find(key);
    return it == node.labels().end() ? nullptr : &it->second;
  });
}

std::string LabelSelector::DebugString() const {
  std::vector<std::string> parts;
  for (const Term& t : terms_) {
    if (t.values.size() == 1) {
      parts.push_back(absl::StrCat(t.key, t.negate ? "!=" : "=", t.values[0]));
    } else {
      parts.push_back(absl::StrCat(t.key, t.negate ? " not in (" : " in (",
                                   absl::StrJoin(t.values, ", "), ")"));
    }
  }
  return absl::StrCat("{", absl::StrJoin(parts, ", "), "}",
                      soft_ ? " (preferred)" : "");
}

}  // namespace shoal
