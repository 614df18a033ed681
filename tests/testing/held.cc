#include "tests/testing/held.h"

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <system_error>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "shoal/api.h"
#include "tests/testing/agent_info.h"

namespace shoal::testing {
namespace {

std::string FormatAmounts(const std::map<std::string, double>& available,
                          const std::map<std::string, double>& total) {
  std::string out;
  for (const auto& [name, amount] : total) {
    auto it = available.find(name);
    double free = it == available.end() ? 0 : it->second;
    if (free != amount) {
      absl::StrAppend(&out, out.empty() ? "" : ", ", name, " ", free, "/",
                      amount, " free");
    }
  }
  for (const auto& [name, amount] : available) {
    if (!total.count(name)) {
      absl::StrAppend(&out, out.empty() ? "" : ", ", name, " ", amount,
                      " free of none");
    }
  }
  return out;
}

}  // namespace

// What the cluster still holds, as a list of findings ("" when idle).
std::string WhatIsHeld(const TestCluster& cluster, const HeldCheck& check) {
  std::string held;
  auto note = [&](const std::string& what) {
    absl::StrAppend(&held, "\n    ", what);
  };
  std::vector<shoal::NodeInfo> nodes = shoal::Nodes();
  // Only this cluster's segments (its nodes' object stores, named
  // shoal-node-<node id>-<agent pid>): another cluster on this host, a
  // user's, makes and frees its own meanwhile.
  auto ours = [&](const std::string& name) {
    for (const auto& n : nodes) {
      if (absl::StartsWith(name, absl::StrCat("shoal-node-", n.node_id, "-"))) {
        return true;
      }
    }
    return false;
  };
  for (const std::string& name : ShmEntries()) {
    if (!check.shm_when_idle.empty() && check.shm_when_idle.count(name) == 0 &&
        ours(name)) {
      note("leftover /dev/shm/" + name);
    }
  }
  // Resources, per node and for the cluster.
  for (const auto& n : nodes) {
    if (!n.alive) {
      if (check.dead_nodes_are_held) {
        note(absl::StrCat("node ", n.node_id, " is not alive"));
      }
      continue;
    }
    std::string diff = FormatAmounts(n.available, n.total);
    if (!diff.empty()) note(absl::StrCat("node ", n.node_id, ": ", diff));
  }
  std::string diff =
      FormatAmounts(shoal::AvailableResources(), shoal::ClusterResources());
  if (!diff.empty()) note("cluster: " + diff);
  // Placement groups and demands, as `shoal status` shows them.
  std::string out;
  int rc = RunCli({"status", "--address", cluster.address(), "--token",
                   cluster.token(), "--format", "json"},
                  &out);
  nlohmann::json status = nlohmann::json::parse(out, nullptr, false);
  if (rc != 0 || status.is_discarded()) {
    note(absl::StrCat("shoal status failed (", rc, "): ", out));
  } else {
    if (!status["placement_groups"].empty()) {
      note("placement groups: " + status["placement_groups"].dump());
    }
    if (!status["demands"].empty()) {
      note("demands: " + status["demands"].dump());
    }
    for (const auto& actor : status["actors"]) {
      if (actor["state"] != "DEAD") note("actor: " + actor.dump());
    }
  }
  // Object stores, as each agent reports its own.
  for (const auto& n : nodes) {
    if (!n.alive) continue;
    auto fetched = FetchAgentInfo(n.address, cluster.token(), 2000);
    if (!fetched.ok()) {
      note(absl::StrCat("node ", n.node_id, ": ", fetched.status().ToString()));
      continue;
    }
    const shoal::proto::AgentInfo& info = *fetched;
    // The agent's own view: a lease it still counts is held, whatever the
    // head last heard.
    if (info.num_leases() != 0) {
      note(absl::StrCat("node ", n.node_id, " agent: ", info.num_leases(),
                        " lease(s) held, ", info.num_workers(), " worker(s)"));
    }
    const auto& store = info.object_store();
    if (store.num_objects() != 0 || store.used_bytes() != 0) {
      note(absl::StrCat("node ", n.node_id, " store: ", store.num_objects(),
                        " objects, ", store.used_bytes(), " bytes (",
                        store.pinned_bytes(), " pinned)"));
    }
  }
  // Processes the program started.
  if (check.marker.empty()) return held;
  for (const auto& p : ProcessesMentioning(check.marker)) note("process " + p);
  return held;
}

}  // namespace shoal::testing
