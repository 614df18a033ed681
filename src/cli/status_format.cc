#include "cli/status_format.h"

#include <ctime>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/str_cat.h"
#include "scheduling/resource_set.h"
#include "shoal/shoal.pb.h"

namespace shoal::cli {
namespace {

struct Usage {
  ResourceSet total;
  ResourceSet available;
};

Usage SumAlive(const proto::ClusterStatus& status) {
  Usage u;
  for (const auto& n : status.nodes()) {
    if (!n.alive()) continue;
    u.total.Add(ResourceSet::FromProto(n.total()));
    u.available.Add(ResourceSet::FromProto(n.available()));
  }
  return u;
}

// Memory-like resources last, as Ray prints them.
bool IsMemory(const std::string& name) {
  return name == "memory" || name == "object_store_memory";
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
  absl::StrAppend(&out, "Node status\n", std::string(60, '-'), "\n");
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
  absl::StrAppend(&out, "Active:\n",
                  active.empty() ? " (no active nodes)\n" : active);
  absl::StrAppend(&out, "Dead:\n", dead.empty() ? " (no dead nodes)\n" : dead);

  Usage u = SumAlive(status);
  absl::StrAppend(&out, "\nResources\n", std::string(60, '-'), "\nUsage:\n");
  std::string memory_lines;
  for (const auto& [name, amount] : u.total.amounts()) {
    std::string line =
        absl::StrCat(" ", FormatQuantity(name, amount - u.available.Get(name)),
                     "/", FormatQuantity(name, amount), " ", name, "\n");
    if (IsMemory(name)) {
      memory_lines += line;
    } else {
      out += line;
    }
  }
  out += memory_lines;
  absl::StrAppend(&out, "\nDemands:\n");
  if (status.demands().empty())
    absl::StrAppend(&out, " (no resource demands)\n");
  for (const auto& d : status.demands()) {
    absl::StrAppend(&out, " ", ResourceSet::FromProto(d.shape()).DebugString(),
                    ": ", d.count(),
                    d.infeasible() ? "+ infeasible (no node can ever run it)"
                                   : "+ pending tasks",
                    "\n");
  }
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
  return j.dump(2) + "\n";
}

}  // namespace shoal::cli
