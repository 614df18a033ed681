#include "cli/state_commands.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "accel/accelerator_manager.h"
#include "cli/cluster_api.h"
#include "cli/common.h"
#include "cli/exit_status.h"
#include "common/status_macros.h"
#include "common/task_event_record.h"
#include "dashboard/formats.h"
#include "scheduling/resource_set.h"
#include "shoal/shoal.pb.h"

namespace shoal::cli {
namespace {

std::string ResourceSummary(const proto::ResourceMap& map) {
  std::vector<std::string> parts;
  for (const auto& [name, amount] :
       WithoutBundleResources(ResourceSet::FromProto(map)).ToDoubles()) {
    if (name == "memory" || name == "object_store_memory") continue;
    parts.push_back(absl::StrCat(name, ":", amount));
  }
  return absl::StrJoin(parts, " ");
}

// An id as text: itself when printable, else hex.
std::string IdText(const std::string& id) {
  bool printable = std::all_of(id.begin(), id.end(), [](char c) {
    return absl::ascii_isprint(static_cast<unsigned char>(c));
  });
  return printable ? id : absl::BytesToHexString(id);
}

std::string StateTime(const proto::TaskEvent& t, TaskState s) {
  return s < t.state_times_ms_size() ? absl::StrCat(t.state_times_ms(s)) : "0";
}

// How long the task ran (to now, while it runs).
std::string TaskDuration(const proto::TaskEvent& t) {
  auto time = [&](TaskState s) {
    return s < t.state_times_ms_size() ? t.state_times_ms(s) : 0;
  };
  int64_t start = time(proto::TaskEvent::RUNNING);
  if (start == 0) return "";
  int64_t end = std::max(time(proto::TaskEvent::FINISHED),
                         time(proto::TaskEvent::FAILED));
  return Duration(start, end);
}

struct Listing {
  std::vector<Row> rows;
  // Columns that only --format json shows (the table stays narrow).
  std::set<std::string> json_only;
  int64_t total = -1;              // matches there are, when the head filtered
  bool filtered = false;           // the head applied the filters and the limit
  std::vector<std::string> notes;  // printed after the table
};

absl::StatusOr<Listing> ListTasks(ClusterApi& head, const StateQuery& q) {
  proto::ListTasksRequest req;
  for (const auto& f : q.filters) req.add_filters(f);
  req.set_limit(q.limit);
  ASSIGN_OR_RETURN(proto::TaskList list, head.ListTasks(req));
  Listing out;
  out.filtered = true;
  out.total = list.total();
  out.json_only = {"worker_id",       "actor_id",          "error",
                   "pending_time_ms", "submitted_time_ms", "start_time_ms",
                   "end_time_ms"};
  for (const proto::TaskEvent& t : list.tasks()) {
    int64_t end = 0;
    for (TaskState s : {proto::TaskEvent::FINISHED, proto::TaskEvent::FAILED}) {
      if (s < t.state_times_ms_size()) end = std::max(end, t.state_times_ms(s));
    }
    out.rows.push_back(
        {{"task_id", t.task_id()},
         {"name", t.name()},
         {"state", proto::TaskEvent::State_Name(t.state())},
         {"type", t.actor_id().empty() ? "NORMAL_TASK" : "ACTOR_TASK"},
         {"job_id", t.job_id()},
         {"node_id", t.node_id()},
         {"attempt", absl::StrCat(t.attempt())},
         {"duration", TaskDuration(t)},
         {"error_type", t.error_type()},
         {"worker_id", t.worker_id()},
         {"actor_id", t.actor_id()},
         {"error", t.error()},
         {"pending_time_ms",
          StateTime(t, proto::TaskEvent::PENDING_NODE_ASSIGNMENT)},
         {"submitted_time_ms",
          StateTime(t, proto::TaskEvent::SUBMITTED_TO_WORKER)},
         {"start_time_ms", StateTime(t, proto::TaskEvent::RUNNING)},
         {"end_time_ms", absl::StrCat(end)}});
  }
  if (list.dropped() > 0 || list.reporter_dropped() > 0) {
    out.notes.push_back(absl::StrCat(
        "(the head keeps the last tasks of each job: ", list.dropped(),
        " records were dropped",
        list.reporter_dropped() > 0
            ? absl::StrCat(", and reporters dropped ", list.reporter_dropped(),
                           " events")
            : "",
        ")"));
  }
  return out;
}

absl::StatusOr<Listing> ListObjects(ClusterApi& head, const StateQuery& q) {
  proto::ListObjectsRequest req;
  // Filters apply here, after each node's limit: ask for more then.
  req.set_limit(q.filters.empty() ? q.limit : std::max(q.limit, 100000));
  ASSIGN_OR_RETURN(proto::ObjectList list, head.ListObjects(req));
  Listing out;
  for (const proto::ObjectEntry& o : list.objects()) {
    out.rows.push_back({{"object_id", IdText(o.object_id())},
                        {"node_id", o.node_id()},
                        {"size", absl::StrCat(o.size())},
                        {"state", o.state()},
                        {"copy", o.copy()},
                        {"pins", absl::StrCat(o.pins())},
                        {"owner", o.owner()}});
  }
  for (const std::string& e : list.errors()) {
    out.notes.push_back("(" + e + ")");
  }
  out.notes.push_back(
      "(objects in the nodes' stores; small values live in their owner and "
      "are not listed)");
  return out;
}

absl::StatusOr<Listing> ListGangs(ClusterApi& head) {
  ASSIGN_OR_RETURN(proto::GangList list, head.ListGangs());
  Listing out;
  out.json_only = {"message", "placement_group_id", "launcher"};
  for (const proto::GangInfo& g : list.gangs()) {
    std::set<std::string> hosts;
    for (const proto::GangRank& r : g.ranks()) hosts.insert(r.node_id());
    out.rows.push_back(
        {{"gang_id", g.gang_id()},
         {"state", proto::GangInfo::State_Name(g.state())},
         {"mode", g.per_host() ? "per-host" : "per-device"},
         {"ranks", absl::StrCat(g.ranks_size())},
         {"hosts", absl::StrCat(hosts.size())},
         {"restarts", absl::StrCat(g.restarts(), "/", g.max_restarts())},
         {"job_id", g.job_id()},
         {"duration", Duration(g.start_time_ms(), g.end_time_ms())},
         {"command", absl::StrJoin(g.argv(), " ")},
         {"message", g.message()},
         {"placement_group_id", g.placement_group_id()},
         {"launcher", g.launcher()}});
  }
  return out;
}

absl::StatusOr<Listing> ListFromStatus(ClusterApi& head,
                                       const std::string& what) {
  Listing out;
  if (what == "jobs") {
    ASSIGN_OR_RETURN(proto::JobList jobs, head.ListJobs());
    for (const auto& j : jobs.jobs()) {
      out.rows.push_back({{"submission_id", j.spec().submission_id()},
                          {"status", JobStateName(j.state())},
                          {"node_id", j.node_id()},
                          {"duration", JobDuration(j)},
                          {"entrypoint", j.spec().entrypoint()}});
    }
    return out;
  }
  ASSIGN_OR_RETURN(proto::ClusterStatus status, head.ClusterStatus());
  if (what == "nodes") {
    for (const auto& n : status.nodes()) {
      auto label = [&](const char* key) {
        auto it = n.labels().find(key);
        return it == n.labels().end() ? std::string() : it->second;
      };
      out.rows.push_back({{"node_id", n.node_id()},
                          {"address", n.address()},
                          {"state", n.alive() ? "ALIVE" : "DEAD"},
                          {"head", n.is_head_node() ? "yes" : "no"},
                          {"resources", ResourceSummary(n.total())},
                          {"slice", label(accel::kLabelTpuSliceName)},
                          {"tpu_worker_id", label(accel::kLabelTpuWorkerId)}});
    }
  } else if (what == "actors") {
    for (const auto& a : status.actors()) {
      out.rows.push_back({{"actor_id", a.spec().actor_id()},
                          {"class", a.spec().class_name()},
                          {"name", a.spec().name()},
                          {"state", proto::ActorInfo::State_Name(a.state())},
                          {"node_id", a.node_id()},
                          {"job_id", a.spec().job_id()},
                          {"pid", a.pid() > 0 ? absl::StrCat(a.pid()) : ""},
                          {"restarts", absl::StrCat(a.num_restarts())},
                          {"worker_id", a.worker_id()}});
    }
    out.json_only = {"worker_id"};
  } else if (what == "placement-groups") {
    for (const auto& pg : status.placement_groups()) {
      std::vector<std::string> bundles;
      for (int i = 0; i < pg.spec().bundles_size(); ++i) {
        bundles.push_back(absl::StrCat(
            ResourceSummary(pg.spec().bundles(i)), "@",
            i < pg.bundle_nodes_size() && !pg.bundle_nodes(i).empty()
                ? pg.bundle_nodes(i)
                : "-"));
      }
      out.rows.push_back(
          {{"placement_group_id", pg.pg_id()},
           {"name", pg.spec().name()},
           {"state", proto::PlacementGroupInfo::State_Name(pg.state())},
           {"strategy", proto::PlacementStrategy_Name(pg.spec().strategy())},
           {"bundles", absl::StrJoin(bundles, ", ")},
           {"job_id", pg.job_id()}});
    }
  }
  return out;
}

absl::StatusOr<Listing> ListRows(ClusterApi& head, const std::string& what,
                                 const StateQuery& q) {
  if (what == "tasks") return ListTasks(head, q);
  if (what == "objects") return ListObjects(head, q);
  if (what == "gangs") return ListGangs(head);
  return ListFromStatus(head, what);
}

// Keeps the rows that match every filter, at most `limit`; a key no row
// has is a usage error.
absl::Status FilterRows(const std::string& what, const StateQuery& q,
                        Listing* listing) {
  std::vector<std::pair<std::string, std::string>> filters;
  for (const std::string& kv : q.filters) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--filter takes KEY=VALUE, e.g. state=ALIVE (got \"", kv, "\")"));
    }
    filters.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  std::vector<Row>& rows = listing->rows;
  if (!filters.empty() && !rows.empty()) {
    for (const auto& filter : filters) {
      // A name, not a structured binding: clang 14 cannot capture those.
      const std::string& key = filter.first;
      const Row& first = rows.front();
      if (std::none_of(first.begin(), first.end(),
                       [&](const auto& c) { return c.first == key; })) {
        std::vector<std::string> keys;
        for (const auto& c : first) keys.push_back(c.first);
        return absl::InvalidArgumentError(
            absl::StrCat("--filter: ", what, " have no key \"", key,
                         "\" (they have ", absl::StrJoin(keys, ", "), ")"));
      }
    }
  }
  std::vector<Row> kept;
  int64_t total = 0;
  for (Row& row : rows) {
    bool match = true;
    for (const auto& [filter_key, value] : filters) {
      const std::string& key = filter_key;  // clang 14 cannot capture it
      auto it = std::find_if(row.begin(), row.end(),
                             [&](const auto& c) { return c.first == key; });
      if (it == row.end() || it->second != value) match = false;
    }
    if (!match) continue;
    ++total;
    if (static_cast<int>(kept.size()) < q.limit) kept.push_back(std::move(row));
  }
  rows = std::move(kept);
  listing->total = total;
  return absl::OkStatus();
}

}  // namespace

absl::Status StateError(const std::string& what, const absl::Status& status) {
  if (status.code() == absl::StatusCode::kInvalidArgument) {
    return UsageError(status.message());
  }
  return absl::Status(status.code(),
                      absl::StrCat("cannot ", what, ": ", status.message()));
}

absl::StatusOr<int> ListState(ClusterApi& head, const std::string& what,
                              const StateQuery& q, std::ostream& out) {
  auto listing = ListRows(head, what, q);
  if (!listing.ok()) return StateError("list " + what, listing.status());
  if (!listing->filtered) {
    if (absl::Status st = FilterRows(what, q, &*listing); !st.ok()) {
      return UsageError(st.message());
    }
  }
  const std::vector<Row>& rows = listing->rows;
  if (q.format == "json") {
    nlohmann::json json = nlohmann::json::array();
    for (const Row& row : rows) {
      nlohmann::json o = nlohmann::json::object();
      for (const auto& [k, v] : row) o[k] = v;
      json.push_back(o);
    }
    out << dashboard::JsonText(json, 2) << "\n";
    return 0;
  }
  if (rows.empty()) {
    out << "No " << what << (q.filters.empty() ? "" : " match") << ".\n";
  } else {
    std::vector<Row> table;
    for (const Row& row : rows) {
      Row narrow;
      for (const auto& c : row) {
        if (!listing->json_only.count(c.first)) narrow.push_back(c);
      }
      table.push_back(std::move(narrow));
    }
    PrintTable(table, out);
  }
  if (listing->total > static_cast<int64_t>(rows.size())) {
    out << "(" << rows.size() << " of " << listing->total
        << "; --limit N shows more)\n";
  }
  for (const std::string& note : listing->notes) out << note << "\n";
  return 0;
}

absl::StatusOr<int> SummarizeTasks(ClusterApi& head, const StateQuery& q,
                                   std::ostream& out) {
  proto::ListTasksRequest req;
  for (const auto& f : q.filters) req.add_filters(f);
  req.set_summary(true);
  auto list = head.ListTasks(req);
  if (!list.ok()) return StateError("summarize the tasks", list.status());
  if (q.format == "json") {
    nlohmann::json json = nlohmann::json::object();
    json["total"] = list->total();
    nlohmann::json by_name = nlohmann::json::array();
    for (const proto::TaskSummary& s : list->summary()) {
      nlohmann::json counts = nlohmann::json::object();
      for (const auto& [state, n] : s.state_counts()) counts[state] = n;
      by_name.push_back(
          {{"name", s.name()}, {"type", s.type()}, {"state_counts", counts}});
    }
    json["summary"] = by_name;
    out << json.dump(2) << "\n";
    return 0;
  }
  out << "Tasks: " << list->total() << "\n";
  if (list->summary().empty()) return 0;
  std::vector<Row> rows;
  for (const proto::TaskSummary& s : list->summary()) {
    std::map<std::string, int64_t> counts(s.state_counts().begin(),
                                          s.state_counts().end());
    std::vector<std::string> parts;
    for (const auto& [state, n] : counts) {
      parts.push_back(absl::StrCat(state, ": ", n));
    }
    rows.push_back({{"name", s.name()},
                    {"type", s.type()},
                    {"state_counts", absl::StrJoin(parts, ", ")}});
  }
  PrintTable(rows, out);
  return 0;
}

}  // namespace shoal::cli
