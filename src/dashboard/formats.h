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
}  // namespace shoal::proto

namespace shoal::dashboard {

// {"type": "SUBMISSION", "submission_id": ..., "status": "RUNNING", ...},
// as Ray's GET /api/jobs/{id} answers.
std::string JobJson(const proto::JobInfo& job);
// A JSON array of JobJson.
std::string JobListJson(const proto::JobList& jobs);

// The head's /metrics: nodes, resources by node, actors, placement groups,
// leases, jobs and demands.
std::string ClusterMetrics(const proto::ClusterStatus& status,
                           const proto::JobList& jobs);
// An agent's /metrics: its workers, leases and object store.
std::string AgentMetrics(const proto::AgentInfo& info);

}  // namespace shoal::dashboard

#endif  // SHOAL_DASHBOARD_FORMATS_H_
