#include "scheduling/resource_set.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "shoal/shoal.pb.h"

namespace shoal {
namespace {

// The largest user-facing quantity whose fixed-point form fits in an int64.
constexpr double kMaxQuantity =
    static_cast<double>(std::numeric_limits<int64_t>::max() / kResourceUnit);

constexpr char kObjectExample[] = R"({"CPU": 2, "accel_x": 4})";

bool IsMemoryLike(const std::string& name) {
  return name == "memory" || name == "object_store_memory";
}

// CPU and memory may be fractional at any size (2.5 CPUs, a byte count);
// everything else counts indivisible devices once there is at least one.
bool MayBeFractional(const std::string& name) {
  return name == "CPU" || IsMemoryLike(name);
}

// `fixed` as a plain decimal with up to 4 fractional digits, trailing zeros
// trimmed down to `min_decimals` ("4", "0.5", "0.25" for min_decimals = 0).
std::string FormatDecimal(int64_t fixed, int min_decimals) {
  const bool negative = fixed < 0;
  // Through uint64 so that INT64_MIN has an absolute value.
  const uint64_t magnitude = negative ? 0 - static_cast<uint64_t>(fixed)
                                      : static_cast<uint64_t>(fixed);
  const uint64_t whole = magnitude / kResourceUnit;
  std::string frac = absl::StrFormat("%04d", magnitude % kResourceUnit);
  while (static_cast<int>(frac.size()) > min_decimals && frac.back() == '0') {
    frac.pop_back();
  }
  return absl::StrCat(negative ? "-" : "", whole, frac.empty() ? "" : ".",
                      frac);
}

std::string FormatBytes(int64_t fixed) {
  if (fixed == 0) return "0B";
  static constexpr const char* kSuffixes[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  constexpr int kLast = sizeof(kSuffixes) / sizeof(kSuffixes[0]) - 1;
  double value = std::fabs(static_cast<double>(fixed) / kResourceUnit);
  int unit = 0;
  // Move up a unit when two decimals would round to 1024.00 of this one.
  while (unit < kLast && value >= 1024.0 - 0.005) {
    value /= 1024.0;
    ++unit;
  }
  return absl::StrFormat("%s%.2f%s", fixed < 0 ? "-" : "", value,
                         kSuffixes[unit]);
}

absl::Status ValidateQuantity(const std::string& name, double value) {
  if (name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a resource has an empty name (amount ", value,
                     "); give every resource a name such as \"CPU\""));
  }
  if (!std::isfinite(value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "resource \"", name, "\" must be a finite number (got ", value, ")"));
  }
  if (value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("resource \"", name, "\" must not be negative (got ",
                     value, "); ask for 0 or more"));
  }
  if (value > kMaxQuantity) {
    return absl::InvalidArgumentError(
        absl::StrCat("resource \"", name, "\" is too large (got ", value,
                     "); the most is ", static_cast<int64_t>(kMaxQuantity)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ResourceSet> ResourceSet::FromDoubles(
    const std::map<std::string, double>& amounts) {
  ResourceSet set;
  for (const auto& [name, value] : amounts) {
    if (absl::Status status = ValidateQuantity(name, value); !status.ok()) {
      return status;
    }
    const int64_t fixed = std::llround(value * kResourceUnit);
    if (fixed == 0) {
      if (value == 0) continue;
      // Silently dropping it would turn a real request into no request.
      return absl::InvalidArgumentError(absl::StrCat(
          "resource \"", name, "\" is below the smallest amount (got ", value,
          "); ask for 0 or at least ", 1.0 / kResourceUnit));
    }
    if (!MayBeFractional(name) && fixed >= kResourceUnit &&
        fixed % kResourceUnit != 0) {
      const int64_t below = fixed / kResourceUnit;
      return absl::InvalidArgumentError(absl::StrCat(
          "resource \"", name, "\" must be a whole number when 1 or more (got ",
          value, "); ask for ", below, " or ", below + 1));
    }
    set.amounts_[name] = fixed;
  }
  return set;
}

namespace {

// `json` parsed without throwing. On failure *error says where and why, and
// *failed_key names the top-level key whose value the parser failed on when
// the value was a number out of range (1e400), which the parser itself does
// not say.
bool ParseFlatJson(const std::string& json, nlohmann::json* parsed,
                   std::string* error, std::string* failed_key) {
  std::string current_key;
  nlohmann::json::parser_callback_t remember_key =
      [&current_key](int depth, nlohmann::json::parse_event_t event,
                     nlohmann::json& value) {
        if (event == nlohmann::json::parse_event_t::key && depth == 1) {
          current_key = value.get<std::string>();
        }
        return true;
      };
  try {
    *parsed = nlohmann::json::parse(json, remember_key);
    return true;
  } catch (const nlohmann::json::exception& e) {
    // e.what() starts with "[json.exception.parse_error.101] "; the rest
    // says where and why.
    *error = e.what();
    if (size_t end = error->find("] "); end != std::string::npos) {
      *error = error->substr(end + 2);
    }
    if (dynamic_cast<const nlohmann::json::out_of_range*>(&e) != nullptr) {
      *failed_key = current_key;
    }
    return false;
  }
}

constexpr char kLabelsExample[] = R"({"zone": "us-east-1a"})";

}  // namespace

absl::StatusOr<ResourceSet> ResourceSet::FromJson(const std::string& json) {
  nlohmann::json parsed;
  std::string detail, failed_key;
  if (!ParseFlatJson(json, &parsed, &detail, &failed_key)) {
    if (!failed_key.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "resource \"", failed_key, "\" is out of range (", detail,
          "); give an amount from 0 to ", static_cast<int64_t>(kMaxQuantity)));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("resources JSON is malformed: '", json, "' (", detail,
                     "); write an object such as ", kObjectExample));
  }
  if (!parsed.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("resources must be a JSON object such as ", kObjectExample,
                     " (got '", json, "')"));
  }
  std::map<std::string, double> amounts;
  for (const auto& [key, value] : parsed.items()) {
    if (!value.is_number()) {
      return absl::InvalidArgumentError(
          absl::StrCat("resource \"", key, "\" must be a number (got ",
                       value.dump(), "); write it as \"", key, "\": 2"));
    }
    amounts[key] = value.get<double>();
  }
  return FromDoubles(amounts);
}

absl::StatusOr<std::map<std::string, std::string>> ParseLabelsJson(
    const std::string& json) {
  nlohmann::json parsed;
  std::string detail, failed_key;
  if (!ParseFlatJson(json, &parsed, &detail, &failed_key)) {
    if (!failed_key.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("label \"", failed_key,
                       "\" must be a string (got a number out of range); "
                       "write it as \"",
                       failed_key, "\": \"some value\""));
    }
    parsed = nlohmann::json();  // malformed: said below
  }
  if (!parsed.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("labels must be a JSON object of strings such as ",
                     kLabelsExample, " (got '", json, "')"));
  }
  std::map<std::string, std::string> labels;
  for (const auto& [key, value] : parsed.items()) {
    if (key.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a label has an empty name; write labels such as ", kLabelsExample));
    }
    if (!value.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "label \"", key, "\" must be a string (got ", value.dump(),
          "); write it as \"", key, "\": \"some value\""));
    }
    labels[key] = value.get<std::string>();
  }
  return labels;
}

// Peers cannot be told about a bad entry here, so entries that FromDoubles
// could never produce (empty names, amounts <= 0) are dropped: a negative
// demand would otherwise pass Contains() and grow the availability it is
// subtracted from.
ResourceSet ResourceSet::FromProto(const proto::ResourceMap& map) {
  ResourceSet set;
  for (const auto& [name, fixed] : map.amounts()) {
    if (name.empty() || fixed <= 0) continue;
    set.amounts_[name] = fixed;
  }
  return set;
}

void ResourceSet::ToProto(proto::ResourceMap* map) const {
  map->clear_amounts();
  auto& out = *map->mutable_amounts();
  for (const auto& [name, fixed] : amounts_) out[name] = fixed;
}

int64_t ResourceSet::Get(const std::string& name) const {
  auto it = amounts_.find(name);
  return it == amounts_.end() ? 0 : it->second;
}

void ResourceSet::Set(const std::string& name, int64_t fixed) {
  if (fixed == 0) {
    amounts_.erase(name);
  } else {
    amounts_[name] = fixed;
  }
}

double ResourceSet::GetDouble(const std::string& name) const {
  return static_cast<double>(Get(name)) / kResourceUnit;
}

std::map<std::string, double> ResourceSet::ToDoubles() const {
  std::map<std::string, double> out;
  for (const auto& [name, fixed] : amounts_) {
    out[name] = static_cast<double>(fixed) / kResourceUnit;
  }
  return out;
}

bool ResourceSet::Contains(const ResourceSet& demand) const {
  for (const auto& [name, fixed] : demand.amounts_) {
    if (Get(name) < fixed) return false;
  }
  return true;
}

// Saturates rather than overflows: amounts from peers may be as large as an
// int64 holds, and the sum of two is then no amount any node has.
void ResourceSet::Add(const ResourceSet& other) {
  for (const auto& [name, fixed] : other.amounts_) {
    int64_t sum;
    if (__builtin_add_overflow(Get(name), fixed, &sum)) {
      sum = fixed > 0 ? std::numeric_limits<int64_t>::max()
                      : std::numeric_limits<int64_t>::min();
    }
    Set(name, sum);
  }
}

// Taking more than is held leaves a negative amount rather than clamping to
// zero, so that adding the same set back restores the books exactly (as
// Ray's ResourceSet does); callers check Contains() first.
void ResourceSet::Subtract(const ResourceSet& other) {
  for (const auto& [name, fixed] : other.amounts_) {
    Set(name, Get(name) - fixed);
  }
}

std::string ResourceSet::DebugString() const {
  std::vector<std::string> parts;
  parts.reserve(amounts_.size());
  for (const auto& [name, fixed] : amounts_) {
    parts.push_back(absl::StrCat(name, ": ", FormatQuantity(name, fixed)));
  }
  return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
}

std::vector<std::string> ResourceSet::MissingFor(
    const ResourceSet& demand) const {
  std::vector<std::string> missing;
  for (const auto& [name, fixed] : demand.amounts_) {
    if (Get(name) < fixed) missing.push_back(name);
  }
  return missing;
}

std::string FormatQuantity(const std::string& name, int64_t fixed) {
  if (IsMemoryLike(name)) return FormatBytes(fixed);
  return FormatDecimal(fixed, /*min_decimals=*/1);
}

ResourceSet WithoutBundleResources(const ResourceSet& set) {
  ResourceSet out;
  for (const auto& [name, amount] : set.amounts()) {
    if (!IsBundleResource(name)) out.Set(name, amount);
  }
  return out;
}

bool ParseBundleResource(const std::string& name, BundleResource* out) {
  size_t at = name.find("_group_");
  if (at == std::string::npos || at == 0) return false;
  std::string rest = name.substr(at + 7);
  BundleResource r;
  r.base = name.substr(0, at);
  size_t sep = rest.find('_');
  int index = 0;
  if (sep != std::string::npos &&
      absl::SimpleAtoi(rest.substr(0, sep), &index) && index >= 0) {
    r.bundle_index = index;
    r.group_id = rest.substr(sep + 1);
  } else {
    r.group_id = rest;
  }
  if (r.group_id.empty()) return false;
  *out = r;
  return true;
}

std::string DescribeInfeasible(const ResourceSet& demand,
                               const std::vector<NodeTotals>& nodes) {
  if (nodes.empty()) return "no node is alive";

  // A task of a placement group whose bundle is on no node: the group is
  // gone (removed, or its job ended) or was never placed.
  for (const auto& [name, wanted] : demand.amounts()) {
    BundleResource bundle;
    if (!ParseBundleResource(name, &bundle)) continue;
    bool held = false;
    for (const NodeTotals& node : nodes) held |= node.total.Get(name) > 0;
    if (held) continue;
    return absl::StrCat(
        "placement group ", bundle.group_id, " holds no ",
        bundle.bundle_index < 0 ? std::string("bundle")
                                : absl::StrCat("bundle ", bundle.bundle_index),
        " on any live node: it was removed (by RemovePlacementGroup, or "
        "because the job that created it ended; create it with "
        "Lifetime::kDetached to keep it) or is not placed yet (wait for it "
        "with pg.Wait())");
  }

  // First: a single resource that no node has enough of.
  for (const auto& [name, wanted] : demand.amounts()) {
    const NodeTotals* largest = nullptr;
    for (const NodeTotals& node : nodes) {
      if (largest == nullptr ||
          node.total.Get(name) > largest->total.Get(name)) {
        largest = &node;
      }
    }
    const int64_t most = largest->total.Get(name);
    if (most >= wanted) continue;
    if (most <= 0) {
      std::string message =
          absl::StrCat("no node has any ", name, " (asked for ",
                       FormatQuantity(name, wanted), "); ");
      // CPUs, GPUs and TPUs have flags of their own (and --resources
      // refuses them), whole numbers of them.
      for (const char* kind : {"CPU", "GPU", "TPU"}) {
        if (name != kind) continue;
        absl::StrAppend(&message, "add a node with ", name,
                        "s (`shoal start --num-", absl::AsciiStrToLower(name),
                        "s=", (wanted + kResourceUnit - 1) / kResourceUnit,
                        "` where they are not detected), or ask for none");
        return message;
      }
      absl::StrAppend(&message, "start a node with --resources='{\"", name,
                      "\": ", FormatDecimal(wanted, /*min_decimals=*/0), "}'");
      return message;
    }
    return absl::StrCat("no node has ", FormatQuantity(name, wanted), " ", name,
                        "; the largest is ", FormatQuantity(name, most),
                        " on node ", largest->description, "; ask for at most ",
                        FormatQuantity(name, most), " ", name,
                        ", or start a node with more");
  }

  // Every resource fits somewhere, so the problem is the combination. Name
  // the node that lacks the fewest of the demanded resources and, among
  // those, the smallest share of them.
  const NodeTotals* closest = nullptr;
  std::vector<std::string> closest_missing;
  double closest_shortfall = 0;
  for (const NodeTotals& node : nodes) {
    std::vector<std::string> missing = node.total.MissingFor(demand);
    double shortfall = 0;  // Sum over `missing` of the fraction not held.
    for (const std::string& name : missing) {
      const double wanted = static_cast<double>(demand.Get(name));
      shortfall +=
          (wanted - static_cast<double>(node.total.Get(name))) / wanted;
    }
    if (closest == nullptr || missing.size() < closest_missing.size() ||
        (missing.size() == closest_missing.size() &&
         shortfall < closest_shortfall)) {
      closest = &node;
      closest_missing = std::move(missing);
      closest_shortfall = shortfall;
    }
  }
  if (closest_missing.empty()) {
    // Not infeasible after all; say so rather than invent a reason.
    return absl::StrCat("node ", closest->description, " has ",
                        demand.DebugString());
  }
  std::vector<std::string> lacks;
  for (const std::string& name : closest_missing) {
    lacks.push_back(absl::StrCat(
        name, " (has ", FormatQuantity(name, closest->total.Get(name)), " of ",
        FormatQuantity(name, demand.Get(name)), ")"));
  }
  return absl::StrCat("no single node has ", demand.DebugString(),
                      " together; the closest is node ", closest->description,
                      ", which lacks ", absl::StrJoin(lacks, " and "),
                      "; ask for less, or start a node that has all of it");
}

}  // namespace shoal
