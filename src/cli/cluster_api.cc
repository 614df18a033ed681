#include "cli/cluster_api.h"

#include <utility>

#include "dashboard/job_submit.h"
#include "head_client/head_client.h"
#include "rpc/event_loop.h"

namespace shoal::cli {
namespace {

// Runs on a loop of its own: the client closes on it first, then the loop
// stops (HeadClient's destructor needs a running loop).
class HeadConnection : public ClusterApi {
 public:
  HeadConnection(std::unique_ptr<rpc::EventLoop> loop,
                 const std::string& address, const std::string& token)
      : loop_(std::move(loop)),
        head_(std::make_unique<rpc::HeadClient>(loop_.get(), address, token,
                                                "cli")) {}
  ~HeadConnection() override {
    head_.reset();
    loop_->Stop();
  }

  absl::StatusOr<proto::ClusterStatus> ClusterStatus(
      int64_t timeout_ms) override {
    return head_->ClusterStatus(timeout_ms);
  }
  absl::StatusOr<proto::JobInfo> SubmitJob(
      const proto::JobSpec& spec) override {
    return head_->SubmitJob(spec);
  }
  absl::StatusOr<proto::JobInfo> GetJob(const proto::JobRef& job) override {
    return head_->GetJob(job);
  }
  absl::StatusOr<proto::JobList> ListJobs() override {
    return head_->ListJobs();
  }
  absl::StatusOr<proto::JobInfo> StopJob(const proto::JobRef& job) override {
    return head_->StopJob(job);
  }
  absl::StatusOr<proto::JobLogs> GetJobLogs(
      const proto::JobLogsRequest& request) override {
    return head_->GetJobLogs(request);
  }
  absl::Status AttachWorkingDir(const std::string& dir,
                                proto::JobSpec* spec) override {
    return dashboard::AttachWorkingDir(*head_, dir, spec);
  }
  absl::StatusOr<proto::TaskList> ListTasks(
      const proto::ListTasksRequest& request) override {
    return head_->ListTasks(request);
  }
  absl::StatusOr<proto::ObjectList> ListObjects(
      const proto::ListObjectsRequest& request) override {
    return head_->ListObjects(request);
  }
  absl::StatusOr<proto::GangList> ListGangs() override {
    return head_->ListGangs();
  }
  absl::StatusOr<proto::LogList> ListLogs(
      const proto::ListLogsRequest& request) override {
    return head_->ListLogs(request);
  }
  absl::StatusOr<proto::LogChunk> ReadLog(
      const proto::ReadLogRequest& request) override {
    return head_->ReadLog(request);
  }

 private:
  std::unique_ptr<rpc::EventLoop> loop_;
  std::unique_ptr<rpc::HeadClient> head_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ClusterApi>> ConnectToHead(
    const std::string& address, const std::string& token) {
  absl::StatusOr<std::unique_ptr<rpc::EventLoop>> loop =
      rpc::EventLoop::Create("shoal-cli");
  if (!loop.ok()) return loop.status();
  return std::make_unique<HeadConnection>(std::move(*loop), address, token);
}

}  // namespace shoal::cli
