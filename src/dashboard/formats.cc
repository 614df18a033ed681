#include "dashboard/formats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "google/protobuf/descriptor.h"
#include "rpc/rpc.h"
#include "scheduling/resource_set.h"
#include "shoal/shoal.pb.h"

namespace shoal::dashboard {
namespace {

// Ray's message for a job that has none of its own.
std::string DefaultMessage(proto::JobInfo::State state) {
  switch (state) {
    case proto::JobInfo::PENDING:
      return "Job has not started yet.";
    case proto::JobInfo::RUNNING:
      return "Job is currently running.";
    case proto::JobInfo::STOPPED:
      return "Job was intentionally stopped.";
    case proto::JobInfo::SUCCEEDED:
      return "Job finished successfully.";
    case proto::JobInfo::FAILED:
      return "Job failed.";
    default:
      return "";
  }
}

nlohmann::json NullIfZero(double value) {
  return value > 0 ? nlohmann::json(value) : nlohmann::json(nullptr);
}

// The runtime_env as the submitter gave it; for a job from `shoal job
// submit` (which keeps none), what it amounts to.
nlohmann::json RuntimeEnv(const proto::JobSpec& spec) {
  if (!spec.runtime_env_json().empty()) {
    nlohmann::json given =
        nlohmann::json::parse(spec.runtime_env_json(), nullptr, false);
    if (given.is_object()) return given;
  }
  nlohmann::json runtime_env = nlohmann::json::object();
  if (!spec.env().empty()) {
    runtime_env["env_vars"] = std::map<std::string, std::string>(
        spec.env().begin(), spec.env().end());
  }
  if (!spec.working_dir_blob().empty()) {
    runtime_env["working_dir"] = "blob:" + spec.working_dir_blob();
  }
  return runtime_env;
}

// Ray's entrypoint_resources: the resources beyond entrypoint_num_cpus,
// entrypoint_num_gpus and entrypoint_memory (Shoal keeps the whole shape).
nlohmann::json CustomEntrypointResources(const proto::JobSpec& spec) {
  ResourceSet rest = ResourceSet::FromProto(spec.entrypoint_resources());
  absl::StatusOr<ResourceSet> named = ResourceSet::FromDoubles(
      {{"CPU", spec.entrypoint_num_cpus()},
       {"GPU", spec.entrypoint_num_gpus()},
       {"memory", static_cast<double>(spec.entrypoint_memory())}});
  if (named.ok()) rest.Subtract(*named);
  if (rest.empty()) return nullptr;
  return rest.ToDoubles();
}

nlohmann::json JobObject(const proto::JobInfo& job) {
  const proto::JobSpec& spec = job.spec();
  bool ended = job.end_time_ms() > 0;
  return {
      {"type", "SUBMISSION"},
      {"job_id", nullptr},
      {"submission_id", spec.submission_id()},
      {"driver_info", nullptr},
      {"status", proto::JobInfo::State_Name(job.state())},
      {"entrypoint", spec.entrypoint()},
      {"message",
       job.message().empty() ? DefaultMessage(job.state()) : job.message()},
      {"error_type", job.state() == proto::JobInfo::FAILED
                         ? nlohmann::json("JOB_ENTRYPOINT_COMMAND_ERROR")
                         : nlohmann::json(nullptr)},
      {"start_time", job.start_time_ms()},
      {"end_time",
       ended ? nlohmann::json(job.end_time_ms()) : nlohmann::json(nullptr)},
      {"metadata", std::map<std::string, std::string>(spec.metadata().begin(),
                                                      spec.metadata().end())},
      {"runtime_env", RuntimeEnv(spec)},
      {"entrypoint_num_cpus", NullIfZero(spec.entrypoint_num_cpus())},
      {"entrypoint_num_gpus", NullIfZero(spec.entrypoint_num_gpus())},
      {"entrypoint_memory", spec.entrypoint_memory() > 0
                                ? nlohmann::json(spec.entrypoint_memory())
                                : nlohmann::json(nullptr)},
      {"entrypoint_resources", CustomEntrypointResources(spec)},
      {"driver_agent_http_address", nullptr},
      {"driver_node_id", job.node_id().empty() ? nlohmann::json(nullptr)
                                               : nlohmann::json(job.node_id())},
      {"driver_pid", job.pid()},
      {"driver_exit_code", ended && job.state() != proto::JobInfo::STOPPED
                               ? nlohmann::json(job.exit_code())
                               : nlohmann::json(nullptr)},
  };
}

absl::Status FieldError(const std::string& field, const std::string& must,
                        const nlohmann::json& got) {
  return absl::InvalidArgumentError(
      absl::StrCat("\"", field, "\" must be ", must, ", not ", got.type_name(),
                   " ", JsonText(got).substr(0, 80)));
}

// A JSON number of 0 or more, as a double.
absl::Status NonNegative(const std::string& field, const nlohmann::json& value,
                         double* out) {
  if (!value.is_number() || !(value.get<double>() >= 0) ||
      !std::isfinite(value.get<double>())) {
    return FieldError(field, "a number of 0 or more", value);
  }
  *out = value.get<double>();
  return absl::OkStatus();
}

// Whether a query parameter is a whole number in [0, max]; into `out`.
absl::Status WholeParam(const std::string& name, const std::string& text,
                        int64_t max, int64_t* out) {
  if (!absl::SimpleAtoi(text, out) || *out < 0 || *out > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("?", name, "=", text.substr(0, 40),
                     " must be a whole number of bytes ", "from 0 to ", max));
  }
  return absl::OkStatus();
}

// A Prometheus label value: backslash, double quote and newline escaped.
std::string Label(const std::string& value) {
  return absl::StrReplaceAll(value,
                             {{"\\", "\\\\"}, {"\"", "\\\""}, {"\n", "\\n"}});
}

// A sample's value, exact: whole numbers (byte counts) in full.
std::string Value(double v) {
  if (v == static_cast<double>(static_cast<int64_t>(v)) && v < 9.0e15 &&
      v > -9.0e15) {
    return absl::StrCat(static_cast<int64_t>(v));
  }
  return absl::StrFormat("%.17g", v);
}

// One metric family: its HELP and TYPE lines, then its samples.
class Family {
 public:
  Family(std::string name, std::string type, std::string help)
      : name_(std::move(name)),
        type_(std::move(type)),
        help_(std::move(help)) {}
  void Add(const std::vector<std::pair<std::string, std::string>>& labels,
           double value, const std::string& suffix = "") {
    std::string line = name_ + suffix;
    if (!labels.empty()) {
      line += "{";
      for (size_t i = 0; i < labels.size(); ++i) {
        absl::StrAppend(&line, i ? "," : "", labels[i].first, "=\"",
                        Label(labels[i].second), "\"");
      }
      line += "}";
    }
    absl::StrAppend(&line, " ", Value(value), "\n");
    samples_ += line;
  }
  void AppendTo(std::string* out) const {
    absl::StrAppend(out, "# HELP ", name_, " ", help_, "\n# TYPE ", name_, " ",
                    type_, "\n", samples_);
  }

 private:
  std::string name_, type_, help_, samples_;
};

// A resource amount as users count it (memory resources are bytes).
double Amount(int64_t fixed) {
  return fixed / static_cast<double>(kResourceUnit);
}

// Every value of an enum, counted 0: a state with nothing in it is still
// a sample (0), not a missing series.
std::map<std::string, int> ZeroCounts(
    const google::protobuf::EnumDescriptor* states) {
  std::map<std::string, int> out;
  for (int i = 0; i < states->value_count(); ++i) {
    out[states->value(i)->name()] = 0;
  }
  return out;
}

void AddCounts(Family& family, const std::string& label,
               const std::map<std::string, int>& counts) {
  for (const auto& [value, count] : counts) family.Add({{label, value}}, count);
}

// A server's RPC counts (a counter by method and outcome) and latencies (a
// histogram by method), labelled with `labels`.
void AppendRpcMetrics(
    const proto::ServerStats& stats,
    const std::vector<std::pair<std::string, std::string>>& labels,
    std::string* out) {
  Family requests("shoal_rpc_server_requests_total", "counter",
                  "Requests this server answered, by method and outcome.");
  Family latency("shoal_rpc_server_latency_seconds", "histogram",
                 "Time from a request's arrival to its answer, by method.");
  for (const proto::MethodStats& m : stats.methods()) {
    auto with = [&](std::vector<std::pair<std::string, std::string>> more) {
      std::vector<std::pair<std::string, std::string>> all = labels;
      all.emplace_back("method", m.method());
      for (auto& kv : more) all.push_back(std::move(kv));
      return all;
    };
    requests.Add(with({{"outcome", "ok"}}), static_cast<double>(m.ok()));
    requests.Add(with({{"outcome", "error"}}), static_cast<double>(m.errors()));
    int64_t cumulative = 0;
    for (int b = 0; b < m.buckets_size() && b < rpc::kNumLatencyBuckets; ++b) {
      cumulative += m.buckets(b);
      std::string le = b + 1 < rpc::kNumLatencyBuckets
                           ? Value(rpc::kLatencyBucketsSeconds[b])
                           : "+Inf";
      latency.Add(with({{"le", le}}), static_cast<double>(cumulative),
                  "_bucket");
    }
    latency.Add(with({}), m.sum_seconds(), "_sum");
    latency.Add(with({}), static_cast<double>(m.ok() + m.errors()), "_count");
  }
  requests.AppendTo(out);
  latency.AppendTo(out);
}

}  // namespace

std::string JsonText(const nlohmann::json& json, int indent) {
  return json.dump(indent, ' ', false,
                   nlohmann::json::error_handler_t::replace);
}

std::string JobJson(const proto::JobInfo& job) {
  return JsonText(JobObject(job), 2) + "\n";
}

std::string JobListJson(const proto::JobList& jobs) {
  nlohmann::json out = nlohmann::json::array();
  for (const proto::JobInfo& job : jobs.jobs()) out.push_back(JobObject(job));
  return JsonText(out, 2) + "\n";
}

namespace {

// Ray takes null as "not given" for every optional field.
bool Given(const nlohmann::json& j, const char* field) {
  return j.contains(field) && !j[field].is_null();
}

absl::Status ParseMetadata(const nlohmann::json& metadata,
                           proto::JobSpec* spec) {
  if (!metadata.is_object()) {
    return FieldError("metadata", "an object of strings", metadata);
  }
  for (const auto& [key, value] : metadata.items()) {
    if (!value.is_string()) {
      return FieldError(absl::StrCat("metadata.", key),
                        "a string (metadata values are strings: quote it)",
                        value);
    }
    (*spec->mutable_metadata())[key] = value.get<std::string>();
  }
  return absl::OkStatus();
}

absl::Status ParseRuntimeEnv(const nlohmann::json& env, proto::JobSpec* spec,
                             std::string* working_dir) {
  if (!env.is_object()) return FieldError("runtime_env", "an object", env);
  for (const auto& [key, value] : env.items()) {
    if (key == "env_vars") {
      if (!value.is_object()) {
        return FieldError("runtime_env.env_vars", "an object of strings",
                          value);
      }
      for (const auto& [name, v] : value.items()) {
        if (!v.is_string()) {
          return FieldError(absl::StrCat("runtime_env.env_vars.", name),
                            "a string (environment values are strings: "
                            "quote it)",
                            v);
        }
        (*spec->mutable_env())[name] = v.get<std::string>();
      }
    } else if (key == "working_dir") {
      if (!value.is_string()) {
        return FieldError("runtime_env.working_dir",
                          "a folder on the head's host (a string)", value);
      }
      *working_dir = value.get<std::string>();
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("runtime_env field \"", key,
                       "\" is not supported (env_vars and working_dir, a "
                       "folder on the head's host, are)"));
    }
  }
  spec->set_runtime_env_json(JsonText(env));
  return absl::OkStatus();
}

// The entrypoint's resources (entrypoint_num_cpus, _num_gpus, _memory and
// _resources) into `spec`.
absl::Status ParseEntrypointResources(const nlohmann::json& j,
                                      proto::JobSpec* spec) {
  std::map<std::string, double> need;
  if (Given(j, "entrypoint_resources")) {
    const nlohmann::json& resources = j["entrypoint_resources"];
    if (!resources.is_object()) {
      return FieldError("entrypoint_resources", "an object of numbers",
                        resources);
    }
    for (const auto& [name, value] : resources.items()) {
      if (name == "CPU" || name == "GPU" || name == "memory") {
        return absl::InvalidArgumentError(absl::StrCat(
            "entrypoint_resources cannot hold \"", name, "\": use entrypoint_",
            name == "CPU"   ? "num_cpus"
            : name == "GPU" ? "num_gpus"
                            : "memory",
            " for it"));
      }
      double amount = 0;
      absl::Status ok = NonNegative(absl::StrCat("entrypoint_resources.", name),
                                    value, &amount);
      if (!ok.ok()) return ok;
      need[name] = amount;
    }
  }
  for (const auto& [field, resource] : std::map<std::string, std::string>{
           {"entrypoint_num_cpus", "CPU"}, {"entrypoint_num_gpus", "GPU"}}) {
    if (!Given(j, field.c_str())) continue;
    double amount = 0;
    absl::Status ok = NonNegative(field, j[field], &amount);
    if (!ok.ok()) return ok;
    if (resource == "CPU") {
      spec->set_entrypoint_num_cpus(amount);
    } else {
      spec->set_entrypoint_num_gpus(amount);
    }
    if (amount > 0) need[resource] = amount;
  }
  if (Given(j, "entrypoint_memory")) {
    const nlohmann::json& memory = j["entrypoint_memory"];
    if (!memory.is_number_integer() || memory.get<int64_t>() < 0) {
      return FieldError("entrypoint_memory", "a whole number of bytes", memory);
    }
    spec->set_entrypoint_memory(memory.get<int64_t>());
    if (spec->entrypoint_memory() > 0) {
      need["memory"] = static_cast<double>(spec->entrypoint_memory());
    }
  }
  absl::StatusOr<ResourceSet> shape = ResourceSet::FromDoubles(need);
  if (!shape.ok()) return shape.status();
  shape->ToProto(spec->mutable_entrypoint_resources());
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseJobSubmission(std::string_view body, proto::JobSpec* spec,
                                std::string* working_dir) {
  const bool blank = body.find_first_not_of(" \t\r\n") == body.npos;
  nlohmann::json j = blank ? nlohmann::json::object()
                           : nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(
        "the body must be a JSON object, e.g. {\"entrypoint\": \"python3 "
        "train.py\"} (Ray's JobSubmitRequest)");
  }
  static const std::set<std::string>* const kFields = new std::set<std::string>{
      "entrypoint",          "submission_id",     "job_id",
      "runtime_env",         "metadata",          "entrypoint_num_cpus",
      "entrypoint_num_gpus", "entrypoint_memory", "entrypoint_resources"};
  for (const auto& [key, value] : j.items()) {
    if (kFields->count(key) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown field \"", key,
          "\": a job takes entrypoint, submission_id, runtime_env, metadata, "
          "entrypoint_num_cpus, entrypoint_num_gpus, entrypoint_memory and "
          "entrypoint_resources"));
    }
  }
  if (!Given(j, "entrypoint")) {
    return absl::InvalidArgumentError(
        "\"entrypoint\" is required: the command line to run, e.g. "
        "{\"entrypoint\": \"python3 train.py\"}");
  }
  if (!j["entrypoint"].is_string() ||
      j["entrypoint"].get<std::string>().empty()) {
    return FieldError("entrypoint", "a command line (a non-empty string)",
                      j["entrypoint"]);
  }
  spec->set_entrypoint(j["entrypoint"].get<std::string>());
  for (const char* field : {"job_id", "submission_id"}) {  // the newer wins
    if (!Given(j, field)) continue;
    if (!j[field].is_string()) return FieldError(field, "a string", j[field]);
    spec->set_submission_id(j[field].get<std::string>());
  }
  if (Given(j, "metadata")) {
    if (absl::Status s = ParseMetadata(j["metadata"], spec); !s.ok()) return s;
  }
  if (Given(j, "runtime_env")) {
    absl::Status s = ParseRuntimeEnv(j["runtime_env"], spec, working_dir);
    if (!s.ok()) return s;
  }
  return ParseEntrypointResources(j, spec);
}

absl::StatusOr<JobLogQuery> ParseJobLogQuery(
    const std::multimap<std::string, std::string>& params,
    const std::string& accept) {
  JobLogQuery query;
  auto param = [&](const std::string& name) -> const std::string* {
    auto it = params.find(name);
    return it == params.end() ? nullptr : &it->second;
  };
  const std::string* offset = param("offset");
  const std::string* tail = param("tail");
  const std::string* limit = param("limit");
  const std::string* format = param("format");
  if (offset != nullptr && tail != nullptr) {
    return absl::InvalidArgumentError(
        "give ?offset=O (bytes from O, with &limit=L) or ?tail=N (the last N "
        "bytes), not both");
  }
  if (tail != nullptr && limit != nullptr) {
    return absl::InvalidArgumentError(
        "?tail=N is the last N bytes: leave out &limit");
  }
  if (offset != nullptr) {
    absl::Status ok = WholeParam(
        "offset", *offset, std::numeric_limits<int64_t>::max(), &query.offset);
    if (!ok.ok()) return ok;
  }
  if (tail != nullptr || limit != nullptr) {
    absl::Status ok = WholeParam(tail != nullptr ? "tail" : "limit",
                                 tail != nullptr ? *tail : *limit,
                                 kMaxJobLogBytes, &query.limit);
    if (!ok.ok()) return ok;
  }
  if (format != nullptr) {
    if (*format != "text" && *format != "json") {
      return absl::InvalidArgumentError(
          absl::StrCat("?format=", format->substr(0, 40),
                       " is not a format: use json (the default) or text (the "
                       "raw bytes)"));
    }
    query.text = *format == "text";
  } else {
    query.text = absl::StartsWith(accept, "text/plain");
  }
  return query;
}

int64_t JobLogStart(const JobLogQuery& query, int64_t size) {
  if (query.offset >= 0) return query.offset;
  return std::max<int64_t>(0, size - query.limit);
}

std::string JobLogsJson(std::string_view data, int64_t offset, int64_t size) {
  const int64_t next = offset + static_cast<int64_t>(data.size());
  return JsonText({{"logs", std::string(data)},
                   {"offset", offset},
                   {"next_offset", next},
                   {"size", std::max(size, next)},
                   {"truncated", offset > 0 || next < size}}) +
         "\n";
}

std::string ClusterMetrics(const proto::ClusterStatus& status,
                           const proto::JobList& jobs) {
  return ClusterMetrics({.status = &status, .jobs = &jobs});
}

namespace {

// Nodes by state, and each alive node's heartbeat age, resources and leases.
void AppendNodeMetrics(const proto::ClusterStatus& status, std::string* out) {
  Family nodes("shoal_nodes", "gauge", "Nodes of the cluster, by state.");
  Family total("shoal_node_resource_capacity", "gauge",
               "Resources of each alive node (bytes for memory and "
               "object_store_memory).");
  Family used("shoal_node_resource_used", "gauge",
              "Resources in use on each alive node (bytes for memory and "
              "object_store_memory).");
  Family leases("shoal_node_leases", "gauge",
                "Worker leases held on each alive node.");
  Family heartbeat("shoal_node_heartbeat_age_seconds", "gauge",
                   "Time since the head last heard from each alive node.");

  std::map<std::string, int> node_counts = {{"ALIVE", 0}, {"DEAD", 0}};
  std::map<std::string, int> lease_counts;
  for (const auto& n : status.nodes()) {
    ++node_counts[n.alive() ? "ALIVE" : "DEAD"];
    if (!n.alive()) continue;
    lease_counts[n.node_id()] = 0;
    heartbeat.Add({{"node_id", n.node_id()}}, n.heartbeat_age_ms() / 1000.0);
    ResourceSet t = WithoutBundleResources(ResourceSet::FromProto(n.total()));
    ResourceSet a =
        WithoutBundleResources(ResourceSet::FromProto(n.available()));
    for (const auto& [name, amount] : t.amounts()) {
      total.Add({{"node_id", n.node_id()}, {"resource", name}}, Amount(amount));
      used.Add({{"node_id", n.node_id()}, {"resource", name}},
               Amount(amount - a.Get(name)));
    }
  }
  AddCounts(nodes, "state", node_counts);
  for (const auto& l : status.leases()) ++lease_counts[l.node_id()];
  for (const auto& [node, count] : lease_counts) {
    leases.Add({{"node_id", node}}, count);
  }
  for (const Family* f : {&nodes, &heartbeat, &total, &used, &leases}) {
    f->AppendTo(out);
  }
}

// Actors, placement groups and jobs by state, and pending demands.
void AppendStateMetrics(const proto::ClusterStatus& status,
                        const proto::JobList& jobs, std::string* out) {
  Family actors("shoal_actors", "gauge", "Actors, by state.");
  Family groups("shoal_placement_groups", "gauge",
                "Placement groups, by state.");
  Family job_states("shoal_jobs", "gauge", "Submitted jobs, by status.");
  Family demands("shoal_pending_demands", "gauge",
                 "Resource shapes waiting for a node (tasks and actors), "
                 "by whether any node can ever hold them.");
  std::map<std::string, int> actor_counts =
      ZeroCounts(proto::ActorInfo::State_descriptor());
  for (const auto& a : status.actors()) {
    ++actor_counts[proto::ActorInfo::State_Name(a.state())];
  }
  AddCounts(actors, "state", actor_counts);
  std::map<std::string, int> group_counts =
      ZeroCounts(proto::PlacementGroupInfo::State_descriptor());
  for (const auto& pg : status.placement_groups()) {
    ++group_counts[proto::PlacementGroupInfo::State_Name(pg.state())];
  }
  AddCounts(groups, "state", group_counts);
  std::map<std::string, int> job_counts =
      ZeroCounts(proto::JobInfo::State_descriptor());
  for (const auto& j : jobs.jobs()) {
    ++job_counts[proto::JobInfo::State_Name(j.state())];
  }
  AddCounts(job_states, "status", job_counts);
  int64_t feasible = 0, infeasible = 0;
  for (const auto& d : status.demands()) {
    (d.infeasible() ? infeasible : feasible) += d.count();
  }
  demands.Add({{"infeasible", "false"}}, static_cast<double>(feasible));
  demands.Add({{"infeasible", "true"}}, static_cast<double>(infeasible));

  for (const Family* f : {&actors, &groups, &job_states, &demands}) {
    f->AppendTo(out);
  }
}

void AppendTaskMetrics(const proto::TaskList& tasks, std::string* out) {
  Family live("shoal_tasks", "gauge",
              "Tasks waiting or running now, by state (from task events).");
  Family ended("shoal_tasks_ended_total", "counter",
               "Tasks that finished or failed since the head started.");
  for (const auto& [state, count] : tasks.state_counts()) {
    const bool end = state == "FINISHED" || state == "FAILED";
    (end ? ended : live).Add({{"state", state}}, static_cast<double>(count));
  }
  Family dropped("shoal_task_records_dropped_total", "counter",
                 "Task records the head no longer keeps (it keeps the last "
                 "ones of each job), and events reporters dropped.");
  dropped.Add({{"where", "head"}}, static_cast<double>(tasks.dropped()));
  dropped.Add({{"where", "reporter"}},
              static_cast<double>(tasks.reporter_dropped()));
  for (const Family* f : {&live, &ended, &dropped}) f->AppendTo(out);
}

void AppendGangMetrics(const proto::GangList& list, std::string* out) {
  Family gangs("shoal_launch_gangs", "gauge",
               "Launch gangs the head keeps, by state.");
  std::map<std::string, int> gang_counts =
      ZeroCounts(proto::GangInfo::State_descriptor());
  for (const auto& g : list.gangs()) {
    ++gang_counts[proto::GangInfo::State_Name(g.state())];
  }
  AddCounts(gangs, "state", gang_counts);
  Family started("shoal_launch_gangs_started_total", "counter",
                 "Launch gangs started since the head started.");
  started.Add({}, static_cast<double>(list.started_total()));
  Family restarts("shoal_launch_gang_restarts_total", "counter",
                  "Restarts of launch gangs since the head started.");
  restarts.Add({}, static_cast<double>(list.restarts_total()));
  for (const Family* f : {&gangs, &started, &restarts}) f->AppendTo(out);
}

}  // namespace

std::string ClusterMetrics(const ClusterMetricsInput& in) {
  std::string out;
  AppendNodeMetrics(*in.status, &out);
  AppendStateMetrics(*in.status, *in.jobs, &out);
  if (in.tasks != nullptr) AppendTaskMetrics(*in.tasks, &out);
  if (in.gangs != nullptr) AppendGangMetrics(*in.gangs, &out);
  if (in.rpc != nullptr) AppendRpcMetrics(*in.rpc, {{"server", "head"}}, &out);
  return out;
}

std::string AgentMetrics(const proto::AgentInfo& info,
                         const proto::ServerStats* rpc) {
  const std::string& node = info.node().node_id();
  const proto::ObjectStoreInfo& store = info.object_store();
  std::string out;
  auto gauge = [&](const std::string& name, const std::string& help,
                   double value) {
    Family f(name, "gauge", help);
    f.Add({{"node_id", node}}, value);
    f.AppendTo(&out);
  };
  auto counter = [&](const std::string& name, const std::string& help,
                     double value) {
    Family f(name, "counter", help);
    f.Add({{"node_id", node}}, value);
    f.AppendTo(&out);
  };
  gauge("shoal_agent_worker_processes", "Worker processes of this node.",
        static_cast<double>(info.num_workers()));
  gauge("shoal_agent_leases", "Worker leases this node holds.",
        static_cast<double>(info.num_leases()));
  gauge("shoal_object_store_capacity_bytes",
        "Size of this node's shared-memory object store.",
        static_cast<double>(store.capacity()));
  gauge("shoal_object_store_used_bytes", "Bytes of objects in the store.",
        static_cast<double>(store.used_bytes()));
  gauge("shoal_object_store_pinned_bytes",
        "Bytes of objects in use by a process (not evictable).",
        static_cast<double>(store.pinned_bytes()));
  gauge("shoal_object_store_objects", "Objects in the store.",
        static_cast<double>(store.num_objects()));
  gauge("shoal_object_store_spilled_objects", "Objects spilled to disk now.",
        static_cast<double>(store.num_spilled()));
  gauge("shoal_object_store_spilled_bytes", "Bytes spilled to disk now.",
        static_cast<double>(store.spilled_bytes()));
  counter("shoal_object_store_evictions_total",
          "Objects evicted from the store since the node started.",
          static_cast<double>(store.evictions()));
  if (rpc != nullptr) {
    AppendRpcMetrics(*rpc, {{"server", "agent"}, {"node_id", node}}, &out);
  }
  return out;
}

}  // namespace shoal::dashboard
