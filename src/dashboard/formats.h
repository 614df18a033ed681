// What the dashboard port and `shoal job ... --format json` answer: jobs in
// the JSON shape of Ray's Jobs REST API, and the cluster's metrics in the
// Prometheus text format (docs/design/jobs.md, "Metrics").
#ifndef SHOAL_DASHBOARD_FORMATS_H_
#define SHOAL_DASHBOARD_FORMATS_H_

#include <string>

namespace shoal::proto {
class ClusterStatus;
class JobInfo;
class JobList;
class AgentInfo;
class TaskList;
class GangList;
class ServerStats;
}  // namespace shoal::proto

namespace shoal::dashboard {

// {"type": "SUBMISSION", "submission_id": ..., "status": "RUNNING", ...},
// as Ray's GET /api/jobs/{id} answers.
std::string JobJson(const proto::JobInfo& job);
// A JSON array of JobJson.
std::string JobListJson(const proto::JobList& jobs);

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
