#include "presentation/status_format.h"

#include <algorithm>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "scheduling/resource_set.h"
#include "shoal/shoal.pb.h"

namespace shoal::internal {
namespace {

struct Usage {
  ResourceSet total;
  ResourceSet available;
};

// The cluster's resources; bundle resources are shown per group instead.
Usage SumAlive(const proto::ClusterStatus& status) {
  Usage u;
  for (const auto& n : status.nodes()) {
    if (!n.alive()) continue;
    u.total.Add(WithoutBundleResources(ResourceSet::FromProto(n.total())));
    u.available.Add(
        WithoutBundleResources(ResourceSet::FromProto(n.available())));
  }
  return u;
}

const char* StateName(proto::PlacementGroupInfo::State state) {
  switch (state) {
    case proto::PlacementGroupInfo::PENDING:
      return "PENDING";
    case proto::PlacementGroupInfo::CREATED:
      return "CREATED";
    case proto::PlacementGroupInfo::FAILED:
      return "FAILED";
    case proto::PlacementGroupInfo::REMOVED:
      return "REMOVED";
    default:
      return "?";
  }
}

// How much of bundle `index` of group `pg` its tasks use: the bundle's
// indexed resources, summed over the live nodes.
Usage BundleUsage(const proto::ClusterStatus& status, const std::string& pg,
                  int index) {
  Usage u;
  for (const auto& n : status.nodes()) {
    if (!n.alive()) continue;
    ResourceSet total = ResourceSet::FromProto(n.total());
    ResourceSet available = ResourceSet::FromProto(n.available());
    for (const auto& [name, amount] : total.amounts()) {
      BundleResource b;
      if (!ParseBundleResource(name, &b) || b.group_id != pg ||
          b.bundle_index != index) {
        continue;
      }
      u.total.Set(b.base, u.total.Get(b.base) + amount);
      u.available.Set(b.base, u.available.Get(b.base) + available.Get(name));
    }
  }
  return u;
}

// A demand's shape in the user's terms: "{CPU: 1} in bundle 0 of placement
// group d04157891339" rather than its bundle resources.
std::string DescribeShape(const ResourceSet& shape) {
  ResourceSet base = WithoutBundleResources(shape);
  std::string where;
  for (const auto& [name, amount] : shape.amounts()) {
    BundleResource b;
    if (!ParseBundleResource(name, &b)) continue;
    base.Set(b.base, std::max(base.Get(b.base), amount));
    where = b.bundle_index < 0
                ? absl::StrCat(" in placement group ", b.group_id)
                : absl::StrCat(" in bundle ", b.bundle_index,
                               " of placement group ", b.group_id);
  }
  return base.DebugString() + where;
}

std::string Seconds(int64_t ms) {
  return absl::StrFormat("%.1f s", static_cast<double>(ms) / 1000);
}

// An actor as the user knows it: its name, else its id.
std::string ActorName(const proto::ActorInfo& a) {
  return a.spec().name().empty() ? a.spec().actor_id()
                                 : absl::StrCat("\"", a.spec().name(), "\"");
}

// Actor id -> ActorName, for the leases that hold actors.
std::map<std::string, std::string> ActorNames(
    const proto::ClusterStatus& status) {
  std::map<std::string, std::string> names;
  for (const auto& a : status.actors()) {
    names[a.spec().actor_id()] = ActorName(a);
  }
  return names;
}

std::string LeaseLine(const proto::LeaseInfo& l,
                      const std::map<std::string, std::string>& actors) {
  std::string actor;
  if (!l.actor_id().empty()) {
    auto it = actors.find(l.actor_id());
    actor = absl::StrCat("  actor ",
                         it == actors.end() ? l.actor_id() : it->second);
  }
  return absl::StrCat(
      " ", l.lease_id(), " on ", l.node_id(), "  ",
      l.job_id().empty() ? "no job" : l.job_id(), "  worker ", l.worker_id(),
      l.worker_pid() > 0 ? absl::StrCat(" (pid ", l.worker_pid(), ")") : "",
      l.starting() ? " starting" : "", actor, "  ",
      DescribeShape(ResourceSet::FromProto(l.shape())), "  for ",
      Seconds(l.age_ms()), l.owner().empty() ? "" : "  from " + l.owner(),
      l.blocked() ? "  blocked in Get (CPU lent back)" : "", "\n");
}

// Live actors first, then the dead; by state, then by name.
int ActorOrder(proto::ActorInfo::State state) {
  switch (state) {
    case proto::ActorInfo::ALIVE:
      return 0;
    case proto::ActorInfo::PENDING:
      return 1;
    case proto::ActorInfo::RESTARTING:
      return 2;
    default:
      return 3;
  }
}

// "3 alive, 1 pending, 2 dead" (states with none left out).
std::string ActorCounts(const proto::ClusterStatus& status) {
  int64_t counts[4] = {0, 0, 0, 0};
  for (const auto& a : status.actors()) ++counts[ActorOrder(a.state())];
  const char* names[4] = {"alive", "pending", "restarting", "dead"};
  std::vector<std::string> parts;
  for (int i = 0; i < 4; ++i) {
    if (counts[i] > 0) parts.push_back(absl::StrCat(counts[i], " ", names[i]));
  }
  return absl::StrJoin(parts, ", ");
}

std::string ActorLine(const proto::ActorInfo& a) {
  const proto::ActorSpec& spec = a.spec();
  std::string restarts =
      spec.max_restarts() == -1
          ? absl::StrCat(a.num_restarts(), " (no limit)")
          : absl::StrCat(a.num_restarts(), "/", spec.max_restarts());
  bool says_why = a.state() == proto::ActorInfo::DEAD ||
                  a.state() == proto::ActorInfo::RESTARTING;
  return absl::StrCat(
      " ", ActorName(a),
      spec.name().empty() ? "" : " (" + spec.actor_id() + ")", "  ",
      spec.class_name().empty() ? spec.factory() : spec.class_name(), "  ",
      proto::ActorInfo::State_Name(a.state()),
      a.node_id().empty() ? "" : "  on " + a.node_id(),
      a.pid() > 0 ? absl::StrCat(" (pid ", a.pid(), ")") : "", "  restarts ",
      restarts, "  ", spec.job_id().empty() ? "no job" : spec.job_id(),
      spec.detached() ? " (detached)" : "",
      says_why && !a.death_cause().empty() ? ": " + a.death_cause() : "", "\n");
}

// Dead actors listed by --verbose; the head keeps many more.
constexpr int kMaxDeadActorLines = 20;

std::string GroupLine(const proto::PlacementGroupInfo& pg) {
  return absl::StrCat(
      " ", pg.pg_id(),
      pg.spec().name().empty() ? ""
                               : absl::StrCat(" \"", pg.spec().name(), "\""),
      "  ", StateName(pg.state()), "  ", pg.spec().bundles_size(), " bundle",
      pg.spec().bundles_size() == 1 ? "" : "s", "  ",
      pg.job_id().empty() ? "no job" : pg.job_id(),
      pg.spec().detached() ? " (detached)" : "", "\n");
}

// Memory-like resources last, as Ray prints them.
bool IsMemory(const std::string& name) {
  return name == "memory" || name == "object_store_memory";
}

// A cluster of more nodes than this is summarized unless --verbose.
constexpr int kMostNodesListed = 50;
// Of a summarized cluster: how many dead nodes are listed (the last ones).
constexpr size_t kDeadNodesListed = 5;

// The nodes of a large cluster in a few lines: how many are alive, grouped
// by their resources (memory aside: it differs from host to host), the
// head's node, and how many are dead with the last few of them.
void SummarizeNodes(const proto::ClusterStatus& status, std::string* out) {
  std::map<std::string, int> by_shape;
  int alive = 0;
  std::vector<const proto::NodeInfo*> dead;
  std::string head;
  for (const auto& n : status.nodes()) {
    if (!n.alive()) {
      dead.push_back(&n);
      continue;
    }
    ++alive;
    if (n.is_head_node()) {
      head = absl::StrCat(" head node: ", n.node_id(), "  ", n.address(), "\n");
    }
    ResourceSet total = ResourceSet::FromProto(n.total());
    ResourceSet shape;
    for (const auto& [name, amount] : total.amounts()) {
      if (!IsBundleResource(name) && !IsMemory(name)) shape.Set(name, amount);
    }
    ++by_shape[shape.DebugString()];
  }
  std::vector<std::pair<int, std::string>> shapes;
  for (const auto& [shape, count] : by_shape) shapes.emplace_back(count, shape);
  std::stable_sort(
      shapes.begin(), shapes.end(),
      [](const auto& a, const auto& b) { return a.first > b.first; });
  absl::StrAppend(out, "Active: ", alive, " nodes\n", head);
  for (const auto& [count, shape] : shapes) {
    absl::StrAppend(out, "  ", count, " x ", shape, "\n");
  }
  absl::StrAppend(out, "Dead: ", dead.size(), " nodes\n");
  size_t first =
      dead.size() > kDeadNodesListed ? dead.size() - kDeadNodesListed : 0;
  for (size_t i = first; i < dead.size(); ++i) {
    const proto::NodeInfo& n = *dead[i];
    absl::StrAppend(out, " ", n.node_id(), "  ", n.address(), "  DEAD",
                    n.death_reason().empty() ? "" : "  ", n.death_reason(),
                    "\n");
  }
  if (first > 0) absl::StrAppend(out, " (and ", first, " more)\n");
  absl::StrAppend(out, " (`shoal status --verbose` lists every node)\n");
}

}  // namespace

namespace {

// "Node status": the nodes, alive first; a large cluster in summary unless
// verbose.
void AppendNodes(const proto::ClusterStatus& status, bool verbose,
                 std::string* out) {
  absl::StrAppend(out, "Node status\n", std::string(60, '-'), "\n");
  std::string active, dead;
  for (const auto& n : status.nodes()) {
    std::string line = absl::StrCat(" ", n.node_id(), "  ", n.address(), "  ",
                                    n.alive() ? "ALIVE" : "DEAD",
                                    n.is_head_node() ? "  (head)" : "");
    if (!n.alive() && !n.death_reason().empty()) {
      absl::StrAppend(&line, "  ", n.death_reason());
    }
    absl::StrAppend(&line, "\n");
    if (verbose) {
      ResourceSet total = ResourceSet::FromProto(n.total());
      ResourceSet avail = ResourceSet::FromProto(n.available());
      absl::StrAppend(&line, "    host: ", n.hostname(), "\n");
      for (const auto& [name, amount] : total.amounts()) {
        if (IsBundleResource(name)) continue;
        absl::StrAppend(&line, "    ",
                        FormatQuantity(name, amount - avail.Get(name)), "/",
                        FormatQuantity(name, amount), " ", name, "\n");
      }
      for (const auto& [k, v] : n.labels()) {
        absl::StrAppend(&line, "    label ", k, "=", v, "\n");
      }
    }
    (n.alive() ? active : dead) += line;
  }
  if (!verbose && status.nodes_size() > kMostNodesListed) {
    SummarizeNodes(status, out);
  } else {
    absl::StrAppend(out, "Active:\n",
                    active.empty() ? " (no active nodes)\n" : active);
    absl::StrAppend(out, "Dead:\n", dead.empty() ? " (no dead nodes)\n" : dead);
  }
}

// "Usage": what the alive nodes have in use, memory last.
void AppendUsage(const proto::ClusterStatus& status, std::string* out) {
  Usage u = SumAlive(status);
  absl::StrAppend(out, "\nResources\n", std::string(60, '-'), "\nUsage:\n");
  std::string memory_lines;
  for (const auto& [name, amount] : u.total.amounts()) {
    std::string line =
        absl::StrCat(" ", FormatQuantity(name, amount - u.available.Get(name)),
                     "/", FormatQuantity(name, amount), " ", name, "\n");
    if (IsMemory(name)) {
      memory_lines += line;
    } else {
      *out += line;
    }
  }
  *out += memory_lines;
}

// "Placement groups": one line each; verbose adds their bundles' use.
void AppendPlacementGroups(const proto::ClusterStatus& status, bool verbose,
                           std::string* out) {
  absl::StrAppend(out, "\nPlacement groups:\n");
  if (status.placement_groups().empty()) {
    absl::StrAppend(out, " (no placement groups)\n");
  }
  for (const auto& pg : status.placement_groups()) {
    *out += GroupLine(pg);
    if (!verbose) continue;
    for (int i = 0; i < pg.spec().bundles_size(); ++i) {
      absl::StrAppend(
          out, "    bundle ", i, ": ",
          ResourceSet::FromProto(pg.spec().bundles(i)).DebugString());
      if (i < pg.bundle_nodes_size() && !pg.bundle_nodes(i).empty()) {
        absl::StrAppend(out, " on ", pg.bundle_nodes(i));
        Usage u = BundleUsage(status, pg.pg_id(), i);
        for (const auto& [name, amount] : u.total.amounts()) {
          absl::StrAppend(
              out, ", ", FormatQuantity(name, amount - u.available.Get(name)),
              "/", FormatQuantity(name, amount), " ", name, " used");
        }
      }
      absl::StrAppend(out, "\n");
    }
  }
}

// "Actors": counted by state; verbose lists them, live ones first and only
// the youngest dead.
void AppendActors(const proto::ClusterStatus& status, bool verbose,
                  std::string* out) {
  if (status.actors().empty()) return;
  absl::StrAppend(out, "\nActors: ", ActorCounts(status), "\n");
  if (!verbose) return;
  std::vector<const proto::ActorInfo*> actors;
  for (const auto& a : status.actors()) actors.push_back(&a);
  // The youngest dead first, so that the cut below drops the oldest.
  std::stable_sort(actors.begin(), actors.end(), [](auto* x, auto* y) {
    int ox = ActorOrder(x->state()), oy = ActorOrder(y->state());
    if (ox != oy) return ox < oy;
    if (ox == 3) return x->age_ms() < y->age_ms();
    return ActorName(*x) < ActorName(*y);
  });
  int dead = 0;
  for (const proto::ActorInfo* a : actors) {
    if (a->state() == proto::ActorInfo::DEAD && ++dead > kMaxDeadActorLines) {
      continue;
    }
    *out += ActorLine(*a);
  }
  if (dead > kMaxDeadActorLines) {
    absl::StrAppend(out, " ... and ", dead - kMaxDeadActorLines,
                    " older dead actors (`shoal status --json` lists "
                    "them all)\n");
  }
}

// "Leases": listed when verbose, else counted by job and kind.
void AppendLeases(const proto::ClusterStatus& status, bool verbose,
                  std::string* out) {
  absl::StrAppend(out, "\nLeases:\n");
  if (status.leases().empty()) absl::StrAppend(out, " (no leases)\n");
  if (verbose) {
    std::map<std::string, std::string> actors = ActorNames(status);
    for (const auto& l : status.leases()) *out += LeaseLine(l, actors);
    return;
  }
  if (status.leases().empty()) return;
  std::set<std::string> jobs;
  int64_t of_actors = 0, blocked = 0;
  for (const auto& l : status.leases()) {
    jobs.insert(l.job_id().empty() ? "no job" : l.job_id());
    of_actors += l.actor_id().empty() ? 0 : 1;
    blocked += l.blocked() ? 1 : 0;
  }
  absl::StrAppend(out, " ", status.leases_size(), " held by ",
                  absl::StrJoin(jobs, ", "),
                  " (`shoal status --verbose` lists them)\n");
  std::vector<std::string> kinds;
  if (of_actors > 0) {
    kinds.push_back(absl::StrCat(of_actors, " hold",
                                 of_actors == 1 ? "s an actor" : " actors"));
  }
  if (blocked > 0) {
    kinds.push_back(absl::StrCat(blocked, " blocked in Get (CPU lent back)"));
  }
  if (!kinds.empty()) {
    absl::StrAppend(out, " of which ", absl::StrJoin(kinds, ", "), "\n");
  }
}

// "Demands": placement groups that wait, then task shapes pending or
// infeasible.
void AppendDemands(const proto::ClusterStatus& status, std::string* out) {
  absl::StrAppend(out, "\nDemands:\n");
  bool waiting_group = false;
  for (const auto& pg : status.placement_groups()) {
    if (pg.state() != proto::PlacementGroupInfo::PENDING) continue;
    waiting_group = true;
    std::vector<std::string> bundles;
    for (const auto& b : pg.spec().bundles()) {
      bundles.push_back(ResourceSet::FromProto(b).DebugString());
    }
    absl::StrAppend(
        out, " ", absl::StrJoin(bundles, ", "), " (placement group ",
        pg.pg_id(),
        pg.spec().name().empty() ? "" : " \"" + pg.spec().name() + "\"", " of ",
        pg.job_id().empty() ? "no job" : pg.job_id(), "): waiting for ",
        Seconds(pg.age_ms()), "\n");
  }
  if (status.demands().empty() && !waiting_group)
    absl::StrAppend(out, " (no resource demands)\n");
  for (const auto& d : status.demands()) {
    absl::StrAppend(out, " ", DescribeShape(ResourceSet::FromProto(d.shape())),
                    ": ", d.count(),
                    d.infeasible() ? "+ infeasible (no node can ever run it)"
                                   : "+ pending tasks",
                    "\n");
  }
}

}  // namespace

std::string FormatStatusText(const proto::ClusterStatus& status, bool verbose) {
  std::string out;
  time_t now = time(nullptr);
  tm local;
  localtime_r(&now, &local);
  char stamp[64];
  strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &local);
  absl::StrAppend(&out, "======== Cluster status: ", stamp, " ========\n");
  absl::StrAppend(&out, "Head: ", status.head_address(), "\n\n");
  AppendNodes(status, verbose, &out);
  AppendUsage(status, &out);
  AppendPlacementGroups(status, verbose, &out);
  AppendActors(status, verbose, &out);
  AppendLeases(status, verbose, &out);
  AppendDemands(status, &out);
  return out;
}

std::string FormatStatusJson(const proto::ClusterStatus& status) {
  nlohmann::json j;
  j["head_address"] = status.head_address();
  j["nodes"] = nlohmann::json::array();
  for (const auto& n : status.nodes()) {
    nlohmann::json node;
    node["node_id"] = n.node_id();
    node["address"] = n.address();
    node["hostname"] = n.hostname();
    node["state"] = n.alive() ? "ALIVE" : "DEAD";
    node["is_head_node"] = n.is_head_node();
    std::map<std::string, double> total =
        ResourceSet::FromProto(n.total()).ToDoubles();
    // A resource in use to the last unit is absent from the node's
    // availability (zero entries are not kept): list it as 0, so that every
    // resource of "total" is in "available".
    std::map<std::string, double> available =
        ResourceSet::FromProto(n.available()).ToDoubles();
    for (const auto& [name, amount] : total) available.try_emplace(name, 0.0);
    node["total"] = total;
    node["available"] = available;
    node["labels"] = std::map<std::string, std::string>(n.labels().begin(),
                                                        n.labels().end());
    if (!n.alive()) node["death_reason"] = n.death_reason();
    j["nodes"].push_back(node);
  }
  Usage u = SumAlive(status);
  nlohmann::json usage = nlohmann::json::object();
  for (const auto& [name, amount] : u.total.amounts()) {
    usage[name] = {{"used", (amount - u.available.Get(name)) /
                                static_cast<double>(kResourceUnit)},
                   {"total", amount / static_cast<double>(kResourceUnit)}};
  }
  j["usage"] = usage;
  j["demands"] = nlohmann::json::array();
  for (const auto& d : status.demands()) {
    j["demands"].push_back(
        {{"shape", ResourceSet::FromProto(d.shape()).ToDoubles()},
         {"count", d.count()},
         {"infeasible", d.infeasible()}});
  }
  j["leases"] = nlohmann::json::array();
  for (const auto& l : status.leases()) {
    j["leases"].push_back(
        {{"id", l.lease_id()},
         {"node_id", l.node_id()},
         {"job_id", l.job_id()},
         {"worker_id", l.worker_id()},
         {"worker_pid", l.worker_pid()},
         {"starting", l.starting()},
         {"shape", ResourceSet::FromProto(l.shape()).ToDoubles()},
         {"age_ms", l.age_ms()},
         {"owner", l.owner()},
         {"actor_id", l.actor_id()},
         {"blocked", l.blocked()}});
  }
  j["actors"] = nlohmann::json::array();
  for (const auto& a : status.actors()) {
    j["actors"].push_back(
        {{"id", a.spec().actor_id()},
         {"name", a.spec().name()},
         {"class", a.spec().class_name()},
         {"state", proto::ActorInfo::State_Name(a.state())},
         {"job_id", a.spec().job_id()},
         {"detached", a.spec().detached()},
         {"node_id", a.node_id()},
         {"address", a.address()},
         {"pid", a.pid()},
         {"num_restarts", a.num_restarts()},
         {"max_restarts", a.spec().max_restarts()},
         {"death_cause", a.death_cause()},
         {"infeasible", a.infeasible()},
         {"shape", ResourceSet::FromProto(a.spec().shape()).ToDoubles()},
         {"age_ms", a.age_ms()}});
  }
  j["placement_groups"] = nlohmann::json::array();
  for (const auto& pg : status.placement_groups()) {
    nlohmann::json bundles = nlohmann::json::array();
    for (const auto& b : pg.spec().bundles()) {
      bundles.push_back(ResourceSet::FromProto(b).ToDoubles());
    }
    j["placement_groups"].push_back(
        {{"id", pg.pg_id()},
         {"name", pg.spec().name()},
         {"state", StateName(pg.state())},
         {"strategy", proto::PlacementStrategy_Name(pg.spec().strategy())},
         {"job_id", pg.job_id()},
         {"detached", pg.spec().detached()},
         {"age_ms", pg.age_ms()},
         {"bundles", bundles},
         {"bundle_nodes", std::vector<std::string>(pg.bundle_nodes().begin(),
                                                   pg.bundle_nodes().end())}});
  }
  return j.dump(2) + "\n";
}

std::string DescribeHolders(const proto::ClusterStatus& status) {
  std::vector<std::string> parts;
  for (const auto& pg : status.placement_groups()) {
    parts.push_back(absl::StrCat(
        "placement group ", pg.pg_id(),
        pg.spec().name().empty() ? "" : " \"" + pg.spec().name() + "\"",
        pg.state() == proto::PlacementGroupInfo::PENDING ? " (pending)" : "",
        " of ", pg.job_id().empty() ? "no job" : pg.job_id()));
  }
  // Leases by job and node.
  std::map<std::pair<std::string, std::string>, std::vector<int>> leases;
  for (int i = 0; i < status.leases_size(); ++i) {
    const auto& l = status.leases(i);
    leases[{l.job_id().empty() ? "no job" : l.job_id(), l.node_id()}].push_back(
        i);
  }
  for (const auto& [key, indices] : leases) {
    const auto& first = status.leases(indices.front());
    int64_t oldest = 0;
    for (int i : indices) oldest = std::max(oldest, status.leases(i).age_ms());
    parts.push_back(
        absl::StrCat(indices.size(), indices.size() == 1 ? " lease" : " leases",
                     " of ", key.first, " on ", key.second, " (",
                     DescribeShape(ResourceSet::FromProto(first.shape())),
                     ", the oldest for ", Seconds(oldest), ")"));
  }
  return absl::StrJoin(parts, "; ");
}

}  // namespace shoal::internal
