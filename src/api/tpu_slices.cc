#include "api/tpu_slices.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "accel/accelerator_manager.h"
#include "scheduling/label_selector.h"
#include "scheduling/resource_set.h"

namespace shoal::internal {
namespace {

std::string Label(const NodeInfo& node, const char* key) {
  auto it = node.labels.find(key);
  return it == node.labels.end() ? "" : it->second;
}

double Amount(const std::map<std::string, double>& m, const char* key) {
  auto it = m.find(key);
  return it == m.end() ? 0 : it->second;
}

std::string HostText(const NodeInfo& node) {
  std::string address = node.address.substr(0, node.address.rfind(':'));
  return absl::StrCat("node ", node.node_id.substr(0, 12),
                      address.empty() ? "" : ", ", address);
}

// Fills in `slice.missing`, `slice.busy` and `slice.idle` from its hosts.
// A worker may have several records (a host that died and came back): the
// live one counts.
void Judge(ClusterSlice& slice, const std::vector<const NodeInfo*>& dead,
           const ClaimedWorkers& claimed) {
  std::vector<std::string> why;
  slice.busy.assign(slice.hosts.size(), false);
  slice.claimed.assign(slice.hosts.size(), false);
  for (size_t w = 0; w < slice.hosts.size(); ++w) {
    const NodeInfo* host = slice.hosts[w];
    if (host == nullptr) {
      const NodeInfo* was = dead[w];
      why.push_back(was != nullptr
                        ? absl::StrCat("worker ", w, "'s host (",
                                       HostText(*was), ") is dead")
                        : absl::StrCat("worker ", w, " has no host"));
      continue;
    }
    const double chips = Amount(host->total, "TPU");
    if (chips < slice.type.chips_per_host) {
      why.push_back(absl::StrCat("worker ", w, "'s host (", HostText(*host),
                                 ") has ", chips, " of ",
                                 slice.type.chips_per_host, " chips"));
    }
    slice.claimed[w] = claimed.count({slice.name, absl::StrCat(w)}) > 0;
    slice.busy[w] = Amount(host->available, "TPU") < chips || slice.claimed[w];
  }
  slice.missing = absl::StrJoin(why, "; ");
  slice.idle = slice.missing.empty() &&
               std::none_of(slice.busy.begin(), slice.busy.end(),
                            [](bool b) { return b; });
}

// Ray's keys name Shoal's labels (scheduling/label_selector.h).
std::string Canonical(const std::string& key) {
  return absl::StartsWith(key, "ray.io/") ? "shoal.io/" + key.substr(7) : key;
}

}  // namespace

std::vector<NodeInfo> NodesOf(const proto::ClusterStatus& status) {
  std::vector<NodeInfo> out;
  for (const auto& n : status.nodes()) {
    NodeInfo info;
    info.node_id = n.node_id();
    info.address = n.address();
    info.hostname = n.hostname();
    info.alive = n.alive();
    info.is_head_node = n.is_head_node();
    info.total = ResourceSet::FromProto(n.total()).ToDoubles();
    info.available = ResourceSet::FromProto(n.available()).ToDoubles();
    info.labels.insert(n.labels().begin(), n.labels().end());
    out.push_back(std::move(info));
  }
  return out;
}

namespace {

bool Live(const proto::PlacementGroupInfo& pg) {
  return pg.state() == proto::PlacementGroupInfo::PENDING ||
         pg.state() == proto::PlacementGroupInfo::CREATED;
}

// The (slice, worker) pairs `pg`'s bundles are pinned to.
ClaimedWorkers ClaimsOf(const proto::PlacementGroupInfo& pg) {
  ClaimedWorkers claimed;
  for (const proto::LabelSelector& s : pg.spec().bundle_label_selector()) {
    auto get = [&](const char* key) -> std::string {
      for (const auto& [k, v] : s.labels()) {
        if (Canonical(k) == key) return v;
      }
      return "";
    };
    std::string name = get(accel::kLabelTpuSliceName);
    std::string worker = get(accel::kLabelTpuWorkerId);
    if (!name.empty() && !worker.empty()) claimed.insert({name, worker});
  }
  return claimed;
}

}  // namespace

ClaimedWorkers ClaimedBy(const proto::ClusterStatus& status) {
  ClaimedWorkers claimed;
  for (const proto::PlacementGroupInfo& pg : status.placement_groups()) {
    if (Live(pg)) claimed.merge(ClaimsOf(pg));
  }
  return claimed;
}

bool Contested(const proto::ClusterStatus& status, const std::string& mine) {
  const proto::PlacementGroupInfo* me = nullptr;
  for (const proto::PlacementGroupInfo& pg : status.placement_groups()) {
    if (pg.pg_id() == mine) me = &pg;
  }
  if (me == nullptr || !Live(*me)) return false;
  const ClaimedWorkers my_claims = ClaimsOf(*me);
  for (const proto::PlacementGroupInfo& pg : status.placement_groups()) {
    if (pg.pg_id() == mine || !Live(pg)) continue;
    // By creation time, not age: an age is rounded at each reading, so
    // two readings could each put the other group second.
    const bool before =
        pg.created_ms() < me->created_ms() ||
        (pg.created_ms() == me->created_ms() && pg.pg_id() < mine);
    if (!before) continue;
    for (const auto& claim : ClaimsOf(pg)) {
      if (my_claims.count(claim) > 0) return true;
    }
  }
  return false;
}

std::vector<ClusterSlice> ClusterSlices(const std::vector<NodeInfo>& nodes,
                                        const ClaimedWorkers& claimed) {
  std::map<std::string, ClusterSlice> by_name;
  std::map<std::string, std::vector<const NodeInfo*>> dead_by_name;
  for (const NodeInfo& n : nodes) {
    auto type = accel::ParseTpuAcceleratorType(
        Label(n, accel::kLabelTpuPodType), Label(n, accel::kLabelTpuTopology));
    if (!type.ok()) continue;
    std::string name = Label(n, accel::kLabelTpuSliceName);
    const bool named = !name.empty();
    if (!named) {
      if (type->hosts != 1) continue;  // its slice cannot be told
      name = n.node_id;
    }
    int worker = 0;
    if (!absl::SimpleAtoi(Label(n, accel::kLabelTpuWorkerId), &worker) &&
        type->hosts != 1) {
      continue;
    }
    if (worker < 0 || worker >= type->hosts) continue;
    auto [it, added] = by_name.try_emplace(name);
    ClusterSlice& slice = it->second;
    std::vector<const NodeInfo*>& dead = dead_by_name[name];
    if (added) {
      slice.name = name;
      slice.named = named;
      slice.type = *type;
      slice.hosts.assign(type->hosts, nullptr);
      dead.assign(type->hosts, nullptr);
    }
    if (worker >= static_cast<int>(slice.hosts.size())) continue;
    (n.alive ? slice.hosts : dead)[worker] = &n;
  }
  std::vector<ClusterSlice> out;
  for (auto& [name, slice] : by_name) {
    Judge(slice, dead_by_name[name], claimed);
    out.push_back(std::move(slice));
  }
  return out;
}

SliceLayout WholeHostLayout(const accel::TpuAcceleratorType& type) {
  SliceLayout layout;
  layout.type = type;
  layout.bundle = {{"TPU", type.chips_per_host}, {"CPU", 1}};
  return layout;
}

absl::StatusOr<SliceLayout> LayoutSlices(const tpu::SliceRequest& request) {
  if (request.num_slices < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_slices must be 1 or more, not ", request.num_slices));
  }
  auto type =
      accel::TpuTypeFromTopology(request.accelerator_version, request.topology);
  if (!type.ok()) return type.status();
  SliceLayout layout = WholeHostLayout(*type);
  if (request.resources_per_bundle.empty()) return layout;
  layout.bundle = request.resources_per_bundle;
  if (!layout.bundle.count("CPU")) layout.bundle["CPU"] = 1;
  if (!layout.bundle.count("TPU")) layout.bundle["TPU"] = type->chips_per_host;
  const double per_bundle = layout.bundle["TPU"];
  const double share = type->chips_per_host / per_bundle;
  if (per_bundle <= 0 || share < 1 || share != std::floor(share)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a bundle of ", per_bundle, " TPU does not divide a ", type->name,
        " host's ", type->chips_per_host,
        " chips evenly; ask for 1, 2 or 4 chips (or none: a whole host)"));
  }
  layout.bundles_per_host = static_cast<int>(share);
  return layout;
}

absl::StatusOr<std::vector<const ClusterSlice*>> ChooseSlices(
    const std::vector<ClusterSlice>& slices,
    const accel::TpuAcceleratorType& type, int count) {
  std::vector<const ClusterSlice*> intact;
  std::vector<std::string> broken;
  std::map<std::string, int> other_types;
  for (const ClusterSlice& s : slices) {
    if (s.type.name != type.name || s.type.topology != type.topology) {
      ++other_types[absl::StrCat(s.type.name, " (", s.type.TopologyString(),
                                 ")")];
    } else if (s.intact()) {
      intact.push_back(&s);
    } else {
      broken.push_back(absl::StrCat("slice ", s.name, ": ", s.missing));
    }
  }
  // Idle first, then unclaimed; within each, by name (ClusterSlices' order).
  auto rank = [](const ClusterSlice* s) {
    const bool claimed = std::any_of(s->claimed.begin(), s->claimed.end(),
                                     [](bool c) { return c; });
    return s->idle ? 0 : (claimed ? 2 : 1);
  };
  std::stable_sort(intact.begin(), intact.end(),
                   [&](const ClusterSlice* a, const ClusterSlice* b) {
                     return rank(a) < rank(b);
                   });
  if (static_cast<int>(intact.size()) >= count) {
    intact.resize(count);
    return intact;
  }
  const std::string what =
      absl::StrCat(type.name, " (", type.TopologyString(), ")");
  std::string message = absl::StrCat(
      "cannot reserve ", count, " ", what, " slice", count == 1 ? "" : "s",
      ": the cluster has ", intact.size(), " intact");
  if (!broken.empty()) {
    absl::StrAppend(&message, "; ", absl::StrJoin(broken, "; "));
  }
  if (intact.empty() && broken.empty()) {
    std::vector<std::string> have;
    for (const auto& [t, n] : other_types) {
      have.push_back(absl::StrCat(n, " x ", t));
    }
    absl::StrAppend(&message, "; its TPU slices are: ",
                    have.empty() ? "none" : absl::StrJoin(have, ", "));
  }
  absl::StrAppend(&message,
                  "; start the missing hosts' agents (shoal start "
                  "--address=...) or ask for fewer slices");
  return absl::FailedPreconditionError(message);
}

absl::StatusOr<std::vector<std::vector<int>>> SubsliceWorkers(
    const accel::TpuAcceleratorType& parent, const std::vector<int>& sub) {
  const std::string grid = absl::StrJoin(sub, "x");
  if (sub.size() != parent.topology.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a ", grid, " sub-slice has ", sub.size(), " dimensions; ",
                     parent.name, " slices have ", parent.topology.size()));
  }
  std::array<int, 3> hosts_per_tile = {1, 1, 1};
  std::array<int, 3> tiles = {1, 1, 1};
  for (size_t d = 0; d < sub.size(); ++d) {
    const int per_host = parent.chips_per_host_bounds[d];
    if (sub[d] < 1 || sub[d] % per_host != 0 ||
        parent.topology[d] % sub[d] != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a ", grid, " sub-slice does not cut a ", parent.name, " (",
          parent.TopologyString(),
          ") slice into whole hosts: each dimension "
          "must be a multiple of a host's chips (",
          parent.ChipsPerHostBoundsString(), ") that divides the slice's"));
    }
    hosts_per_tile[d] = sub[d] / per_host;
    tiles[d] = parent.topology[d] / sub[d];
  }
  const std::array<int, 3>& hosts = parent.host_bounds;  // x, y, z
  std::vector<std::vector<int>> out;
  for (int tz = 0; tz < tiles[2]; ++tz) {
    for (int ty = 0; ty < tiles[1]; ++ty) {
      for (int tx = 0; tx < tiles[0]; ++tx) {
        std::vector<int> workers;
        for (int z = 0; z < hosts_per_tile[2]; ++z) {
          for (int y = 0; y < hosts_per_tile[1]; ++y) {
            for (int x = 0; x < hosts_per_tile[0]; ++x) {
              const int hx = tx * hosts_per_tile[0] + x;
              const int hy = ty * hosts_per_tile[1] + y;
              const int hz = tz * hosts_per_tile[2] + z;
              workers.push_back(hx + hosts[0] * (hy + hosts[1] * hz));
            }
          }
        }
        std::sort(workers.begin(), workers.end());
        out.push_back(std::move(workers));
      }
    }
  }
  return out;
}

absl::StatusOr<SubsliceChoice> ChooseSubslice(
    const std::vector<ClusterSlice>& slices,
    const accel::TpuAcceleratorType& sub, int index) {
  std::vector<std::string> seen;
  std::string last_error;
  // Pass 0: an idle tile; pass 1: one no live group claims.
  for (int pass = 0; pass < 2; ++pass) {
    const auto taken = [&](const ClusterSlice& s, int w) {
      return pass == 0 ? s.busy[w] : s.claimed[w];
    };
    for (const ClusterSlice& s : slices) {
      if (s.type.generation != sub.generation || !s.intact()) continue;
      auto cuts = SubsliceWorkers(s.type, sub.topology);
      if (!cuts.ok()) {
        last_error = std::string(cuts.status().message());
        continue;
      }
      if (pass == 0)
        seen.push_back(absl::StrCat(s.name, " (", s.type.name, ")"));
      for (size_t i = 0; i < cuts->size(); ++i) {
        if (index >= 0 && static_cast<int>(i) != index) continue;
        const std::vector<int>& workers = (*cuts)[i];
        if (std::none_of(workers.begin(), workers.end(),
                         [&](int w) { return taken(s, w); })) {
          return SubsliceChoice{&s, static_cast<int>(i), workers};
        }
      }
    }
  }
  const std::string what =
      absl::StrCat(sub.TopologyString(), " sub-slice",
                   index >= 0 ? absl::StrCat(" ", index) : "");
  if (seen.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no intact ", sub.generation, " slice can be cut into a ",
                     what, last_error.empty() ? "" : ": ", last_error));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("every ", what, " of ", absl::StrJoin(seen, ", "),
                   " is held by a placement group; wait for one to be "
                   "removed, or ask for another topology"));
}

std::vector<PlacementGroupOptions> SliceGroupOptions(
    const tpu::SliceRequest& request, const SliceLayout& layout,
    const std::vector<const ClusterSlice*>& chosen) {
  std::vector<PlacementGroupOptions> groups;
  const int per_slice = layout.bundles_per_slice();
  for (size_t s = 0; s < chosen.size(); ++s) {
    if (groups.empty() || request.group_per_slice) {
      PlacementGroupOptions& g = groups.emplace_back();
      g.strategy = request.strategy;
      g.lifetime = request.lifetime;
      g.name = request.group_per_slice && !request.name.empty()
                   ? absl::StrCat(request.name, "_slice_", s)
                   : request.name;
    }
    PlacementGroupOptions& g = groups.back();
    const ClusterSlice& slice = *chosen[s];
    for (int b = 0; b < per_slice; ++b) {
      const int worker = b / layout.bundles_per_host;
      std::map<std::string, std::string> pin;
      if (slice.named) {
        pin[accel::kLabelTpuSliceName] = slice.name;
        pin[accel::kLabelTpuWorkerId] = absl::StrCat(worker);
      } else {
        pin[kLabelNodeId] = slice.name;
      }
      const size_t global = s * per_slice + b;
      if (global < request.bundle_label_selector.size()) {
        for (const auto& [key, value] : request.bundle_label_selector[global]) {
          pin.try_emplace(Canonical(key), value);
        }
      }
      g.bundles.push_back(layout.bundle);
      g.bundle_label_selector.push_back(std::move(pin));
    }
  }
  return groups;
}

}  // namespace shoal::internal
