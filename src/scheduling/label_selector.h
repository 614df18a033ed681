// Which nodes a task or actor may run on, by the nodes' labels, as Ray's
// `label_selector` says it. Each key's value is one of:
//
//   "v"          the node's label is v
//   "!v"         it is not v (or the node has no such label)
//   "in(a,b)"    it is one of a, b
//   "!in(a,b)"   it is none of them (or absent)
//
// Keys in Ray's namespace ("ray.io/node-id", "ray.io/accelerator-type") name
// the same labels as Shoal's ("shoal.io/node-id", ...), so that a selector
// written for Ray selects the same nodes here. A soft selector is a
// preference: where no live node matches it, the request goes anywhere it
// fits (Ray's NodeAffinitySchedulingStrategy(soft=True)).
//
// Threading: immutable after Parse; safe to share.
#ifndef SHOAL_SCHEDULING_LABEL_SELECTOR_H_
#define SHOAL_SCHEDULING_LABEL_SELECTOR_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "shoal/shoal.pb.h"

namespace shoal {

// Every node's label holding its node id: a selector on it pins a request to
// one node (NodeAffinitySchedulingStrategy).
inline constexpr char kLabelNodeId[] = "shoal.io/node-id";

class LabelSelector {
 public:
  LabelSelector() = default;

  // InvalidArgument, saying which entry and why, for an empty key or value,
  // or an in() list that is empty or unclosed.
  static absl::StatusOr<LabelSelector> Parse(
      const std::map<std::string, std::string>& selector, bool soft = false);
  // What a request carries (checked again: it came over the wire).
  static absl::StatusOr<LabelSelector> FromProto(
      const proto::LabelSelector& selector);
  void ToProto(proto::LabelSelector* out) const;

  bool empty() const { return terms_.empty(); }
  bool soft() const { return soft_; }

  bool Matches(const std::map<std::string, std::string>& labels) const;
  bool Matches(
      const google::protobuf::Map<std::string, std::string>& labels) const;
  // A node's labels, and its id as kLabelNodeId (cluster views leave that
  // label out: it is the node's id).
  bool Matches(const proto::NodeInfo& node) const;

  // "{shoal.io/node-id=abc, zone in (a, b)}" (soft: "... (preferred)");
  // also a stable key for grouping requests of one selector.
  std::string DebugString() const;

 private:
  struct Term {
    std::string key;
    bool negate = false;
    std::vector<std::string> values;  // the label is one of these
    std::string source;               // the value as given, for ToProto
  };
  template <typename Lookup>
  bool MatchesWith(const Lookup& lookup) const;

  std::vector<Term> terms_;  // sorted by key
  bool soft_ = false;
};

}  // namespace shoal

#endif  // SHOAL_SCHEDULING_LABEL_SELECTOR_H_
