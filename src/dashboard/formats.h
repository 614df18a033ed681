// What the dashboard port answers: jobs in the JSON shape of Ray's Jobs
// REST API (and the job submissions it takes), and the cluster's metrics in
// the Prometheus text format (docs/design/jobs.md, "Metrics").
//
// Programs' bytes (entrypoints, environment values, output) need not be
// UTF-8: every JSON made here writes a byte that is not UTF-8 as U+FFFD.
#ifndef SHOAL_DASHBOARD_FORMATS_H_
#define SHOAL_DASHBOARD_FORMATS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shoal::proto {
class ClusterStatus;
class JobInfo;
class JobList;
class JobSpec;
class AgentInfo;
class TaskList;
class GangList;
class ServerStats;
}  // namespace shoal::proto

namespace shoal::dashboard {

// `json` as text whatever bytes its strings hold: what is not UTF-8 is
// written as U+FFFD (nlohmann would throw). Every JSON the CLI, the REST
// API and the dashboard write goes through here.
std::string JsonText(const nlohmann::json& json, int indent = -1);

// {"type": "SUBMISSION", "submission_id": ..., "status": "RUNNING", ...},
// as Ray's GET /api/jobs/{id} answers.
std::string JobJson(const proto::JobInfo& job);
// A JSON array of JobJson.
std::string JobListJson(const proto::JobList& jobs);

// A POST /api/jobs/ body (Ray's JobSubmitRequest: entrypoint, submission_id
// or job_id, metadata, runtime_env, entrypoint_num_cpus, entrypoint_num_gpus,
// entrypoint_memory, entrypoint_resources) into `spec`, with the fields as
// given and spec.entrypoint_resources() the whole shape the node must have;
// the runtime_env's working_dir (a folder on the head's host, for the
// caller to pack) into `working_dir`. An empty body is `{}`.
// InvalidArgument, naming the field and what it must be, for anything Ray's
// API refuses and for runtime_env fields Shoal does not have.
absl::Status ParseJobSubmission(std::string_view body, proto::JobSpec* spec,
                                std::string* working_dir);

// GET /api/jobs/{id}/logs never answers more than this many bytes: by
// default the last kDefaultJobLogBytes, or a window the query asks for.
inline constexpr int64_t kDefaultJobLogBytes = 1 << 20;
inline constexpr int64_t kMaxJobLogBytes = 8 << 20;

// What GET /api/jobs/{id}/logs asks for: `?offset=O&limit=L` (bytes from
// O), `?tail=N` (the last N bytes) or neither (the last
// kDefaultJobLogBytes); `format=text` or `Accept: text/plain` for the raw
// bytes instead of JSON.
struct JobLogQuery {
  int64_t offset = -1;  // -1: the last `limit` bytes
  int64_t limit = kDefaultJobLogBytes;
  bool text = false;
};
// InvalidArgument, naming the parameter, for a value that is not a whole
// number in range, for both offset and tail, and for an unknown format.
absl::StatusOr<JobLogQuery> ParseJobLogQuery(
    const std::multimap<std::string, std::string>& params,
    const std::string& accept);
// Where reading `query` starts in a log of `size` bytes.
int64_t JobLogStart(const JobLogQuery& query, int64_t size);
// {"logs": data, "offset", "next_offset", "size", "truncated"}: `data`
// read from byte `offset` of a log of `size` bytes; truncated when bytes
// of the log are left out before or after it.
std::string JobLogsJson(std::string_view data, int64_t offset, int64_t size);

// The head's /metrics: nodes (and their heartbeat age), resources by node,
// actors, placement groups, leases, jobs and demands; with `tasks` (its
// state counts), tasks by state; with `gangs`, launch gangs and restarts;
// with `rpc`, the head's RPC counts and latency histograms.
struct ClusterMetricsInput {
  const proto::ClusterStatus* status = nullptr;  // required
  const proto::JobList* jobs = nullptr;          // required
  const proto::TaskList* tasks = nullptr;
  const proto::GangList* gangs = nullptr;
  const proto::ServerStats* rpc = nullptr;
};
std::string ClusterMetrics(const ClusterMetricsInput& in);
std::string ClusterMetrics(const proto::ClusterStatus& status,
                           const proto::JobList& jobs);
// An agent's /metrics: its workers, leases and object store, and with
// `rpc`, its RPC counts and latency histograms.
std::string AgentMetrics(const proto::AgentInfo& info,
                         const proto::ServerStats* rpc = nullptr);

}  // namespace shoal::dashboard

#endif  // SHOAL_DASHBOARD_FORMATS_H_
