// What `shoal` commands ask of a running cluster's head: the seam between
// the subcommands and the RPC layer, so that each subcommand's requests
// and output can be checked against fixed replies.
#ifndef SHOAL_CLI_CLUSTER_API_H_
#define SHOAL_CLI_CLUSTER_API_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "shoal/shoal.pb.h"

namespace shoal::cli {

// One connection to a head. Calls block until the reply (or the timeout)
// and are made from one thread at a time.
class ClusterApi {
 public:
  static constexpr int64_t kDefaultTimeoutMs = 10000;

  virtual ~ClusterApi() = default;

  virtual absl::StatusOr<proto::ClusterStatus> ClusterStatus(
      int64_t timeout_ms = kDefaultTimeoutMs) = 0;

  // Jobs (head/job_manager.h).
  virtual absl::StatusOr<proto::JobInfo> SubmitJob(
      const proto::JobSpec& spec) = 0;
  virtual absl::StatusOr<proto::JobInfo> GetJob(const proto::JobRef& job) = 0;
  virtual absl::StatusOr<proto::JobList> ListJobs() = 0;
  virtual absl::StatusOr<proto::JobInfo> StopJob(const proto::JobRef& job) = 0;
  // Waits up to request.wait_ms() for output past request.offset().
  virtual absl::StatusOr<proto::JobLogs> GetJobLogs(
      const proto::JobLogsRequest& request) = 0;
  // Packs the folder `dir`, sends it to the head unless it is there
  // already, and names it in `spec` (dashboard/job_submit.h).
  virtual absl::Status AttachWorkingDir(const std::string& dir,
                                        proto::JobSpec* spec) = 0;

  // The cluster's state: task records, objects, gangs, logs.
  virtual absl::StatusOr<proto::TaskList> ListTasks(
      const proto::ListTasksRequest& request) = 0;
  virtual absl::StatusOr<proto::ObjectList> ListObjects(
      const proto::ListObjectsRequest& request) = 0;
  virtual absl::StatusOr<proto::GangList> ListGangs() = 0;
  virtual absl::StatusOr<proto::LogList> ListLogs(
      const proto::ListLogsRequest& request) = 0;
  // Waits request.wait_ms() for more of the log.
  virtual absl::StatusOr<proto::LogChunk> ReadLog(
      const proto::ReadLogRequest& request) = 0;
};

// Opens a connection to the head at `address` (HOST:PORT) with `token`;
// the connection is made on first use, so this fails only when no client
// can be made at all.
using ClusterConnector =
    std::function<absl::StatusOr<std::unique_ptr<ClusterApi>>(
        const std::string& address, const std::string& token)>;

// The real connector: a client over the RPC layer, on an event loop of its
// own that ends with it.
absl::StatusOr<std::unique_ptr<ClusterApi>> ConnectToHead(
    const std::string& address, const std::string& token);

}  // namespace shoal::cli

#endif  // SHOAL_CLI_CLUSTER_API_H_
