// The typed client of the head's RPCs (the "Head" and "Actors" methods of
// proto/shoal/shoal.proto): one method per RPC, so that no caller builds a
// frame or names a method id.
//
// Each call comes in the form its callers need. The asynchronous form is for
// code on the client's event loop (the driver's actor long poll, an agent's
// heartbeat) and calls `done` on the loop, possibly before it returns (for
// example once the client is closed). The blocking form is for user threads
// (a driver's API calls, the CLI, a launch runner) and returns the reply.
// Errors are absl::Status values with canonical codes: the head's own
// (NotFound for an unknown placement group or actor), Unavailable when the
// head cannot be reached or the connection is lost, DeadlineExceeded when no
// reply came in time, Cancelled once the client is closed.
//
// Threading: the asynchronous methods and Close() must be called on the
// loop's thread; the blocking ones on any other thread (REQUIRES: not the
// loop's). The client may be made and destroyed on any thread while its loop
// runs; it owns one rpc::Channel, which lives on the loop.
#ifndef SHOAL_HEAD_CLIENT_HEAD_CLIENT_H_
#define SHOAL_HEAD_CLIENT_HEAD_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "shoal/shoal.pb.h"

namespace google::protobuf {
class MessageLite;
}

namespace shoal::rpc {

class Channel;
class EventLoop;

class HeadClient {
 public:
  template <typename Reply>
  using Callback = std::function<void(absl::StatusOr<Reply>)>;

  // How long a call waits for its reply unless told otherwise.
  static constexpr int64_t kDefaultTimeoutMs = 10000;

  // Connects to the head at `address` (host:port) on first use, and again
  // after a failure; `peer_name` names this process in the head's logs.
  HeadClient(EventLoop* loop, std::string address, std::string token,
             std::string peer_name);
  // Over `channel` (one of `loop`'s), the head's address being its.
  HeadClient(EventLoop* loop, std::unique_ptr<Channel> channel);
  // Closes the client on its loop and waits for that, unless it is closed
  // already. REQUIRES: the loop runs, or the client was closed.
  ~HeadClient();
  HeadClient(const HeadClient&) = delete;
  HeadClient& operator=(const HeadClient&) = delete;

  // Drops the connection; calls in flight fail with Unavailable, later ones
  // with Cancelled. Loop thread only.
  void Close();
  const std::string& address() const { return address_; }
  // Called on the loop each time an established connection to the head is
  // lost (the head stopped or restarted). Loop thread only.
  void OnDisconnect(std::function<void(const absl::Status&)> callback);
  // While the head cannot be reached (a call fails before it is sent, as
  // while the head restarts), blocking calls try again for up to `ms`
  // instead of failing at once. 0 (the default): they fail at once.
  void set_outage_wait_ms(int64_t ms) { outage_wait_ms_ = ms; }

  // ---- Nodes (node agents, asynchronous) ----
  void RegisterNode(const proto::RegisterNodeRequest& request,
                    Callback<proto::RegisterNodeReply> done,
                    int64_t timeout_ms = kDefaultTimeoutMs);
  void Heartbeat(const proto::HeartbeatRequest& request,
                 Callback<proto::HeartbeatReply> done,
                 int64_t timeout_ms = kDefaultTimeoutMs);
  void UnregisterNode(const proto::UnregisterNodeRequest& request,
                      Callback<proto::Empty> done,
                      int64_t timeout_ms = kDefaultTimeoutMs);

  // ---- Cluster, jobs and shutdown ----
  void ClusterStatus(Callback<proto::ClusterStatus> done,
                     int64_t timeout_ms = kDefaultTimeoutMs);
  absl::StatusOr<proto::ClusterStatus> ClusterStatus(
      int64_t timeout_ms = kDefaultTimeoutMs);
  // Part of it: some nodes, or only nodes and groups.
  absl::StatusOr<proto::ClusterStatus> ClusterStatus(
      const proto::ClusterStatusRequest& request,
      int64_t timeout_ms = kDefaultTimeoutMs);
  void RegisterJob(const proto::RegisterJobRequest& request,
                   Callback<proto::RegisterJobReply> done,
                   int64_t timeout_ms = kDefaultTimeoutMs);
  absl::StatusOr<proto::RegisterJobReply> RegisterJob(
      const proto::RegisterJobRequest& request,
      int64_t timeout_ms = kDefaultTimeoutMs);
  // Asks the head process to exit.
  absl::Status ShutdownHead(int64_t timeout_ms = kDefaultTimeoutMs);

  // ---- Binaries (blobs named by their SHA-256) ----
  absl::StatusOr<proto::HasBlobReply> HasBlob(
      const proto::BlobRef& blob, int64_t timeout_ms = kDefaultTimeoutMs);
  absl::Status PutBlobChunk(const proto::BlobChunk& chunk,
                            int64_t timeout_ms = kDefaultTimeoutMs);
  void GetBlobChunk(const proto::GetBlobChunkRequest& request,
                    Callback<proto::BlobChunk> done,
                    int64_t timeout_ms = kDefaultTimeoutMs);

  // ---- Key-value store ----
  absl::StatusOr<proto::KvPutReply> KvPut(
      const proto::KvPutRequest& request,
      int64_t timeout_ms = kDefaultTimeoutMs);
  absl::StatusOr<proto::KvGetReply> KvGet(
      const proto::KvGetRequest& request,
      int64_t timeout_ms = kDefaultTimeoutMs);
  absl::StatusOr<proto::KvDelReply> KvDel(
      const proto::KvDelRequest& request,
      int64_t timeout_ms = kDefaultTimeoutMs);
  absl::StatusOr<proto::KvKeysReply> KvKeys(
      const proto::KvKeysRequest& request,
      int64_t timeout_ms = kDefaultTimeoutMs);

  // ---- Placement groups (NotFound: no such group) ----
  absl::StatusOr<proto::PlacementGroupInfo> CreatePlacementGroup(
      const proto::PlacementGroupSpec& spec,
      int64_t timeout_ms = kDefaultTimeoutMs);
  void GetPlacementGroup(const proto::GetPlacementGroupRequest& request,
                         Callback<proto::PlacementGroupInfo> done,
                         int64_t timeout_ms = kDefaultTimeoutMs);
  absl::StatusOr<proto::PlacementGroupInfo> GetPlacementGroup(
      const proto::GetPlacementGroupRequest& request,
      int64_t timeout_ms = kDefaultTimeoutMs);
  // Removing a group the head does not know succeeds.
  absl::Status RemovePlacementGroup(
      const proto::GetPlacementGroupRequest& request,
      int64_t timeout_ms = kDefaultTimeoutMs);

  // ---- Actors (NotFound: no such actor) ----
  absl::StatusOr<proto::ActorInfo> CreateActor(
      const proto::ActorSpec& spec, int64_t timeout_ms = kDefaultTimeoutMs);
  // A request with wait_ms is a long poll: the head answers when the actor
  // changes or wait_ms passes, so the call waits wait_ms + timeout_ms.
  void GetActor(const proto::GetActorRequest& request,
                Callback<proto::ActorInfo> done,
                int64_t timeout_ms = kDefaultTimeoutMs);
  absl::StatusOr<proto::ActorInfo> GetActor(
      const proto::GetActorRequest& request,
      int64_t timeout_ms = kDefaultTimeoutMs);
  absl::Status KillActor(const proto::KillActorRequest& request,
                         int64_t timeout_ms = kDefaultTimeoutMs);
  absl::Status ActorExiting(const proto::ActorExitingRequest& request,
                            int64_t timeout_ms = kDefaultTimeoutMs);
  absl::Status ActorArgs(const proto::ActorArgs& args,
                         int64_t timeout_ms = kDefaultTimeoutMs);

  // Puts the file at `path`, whose SHA-256 is `hash`, in the head's blob
  // store unless it is there already (in chunks, from this thread).
  absl::Status UploadBlob(const std::string& path, const std::string& hash);

  // Jobs (head/job_manager.h).
  absl::StatusOr<proto::JobInfo> SubmitJob(
      const proto::JobSpec& spec, int64_t timeout_ms = kDefaultTimeoutMs);
  absl::StatusOr<proto::JobInfo> GetJob(const proto::JobRef& job,
                                        int64_t timeout_ms = kDefaultTimeoutMs);
  absl::StatusOr<proto::JobList> ListJobs(
      int64_t timeout_ms = kDefaultTimeoutMs);
  absl::StatusOr<proto::JobInfo> StopJob(
      const proto::JobRef& job, int64_t timeout_ms = kDefaultTimeoutMs);
  absl::Status DeleteJob(const proto::JobRef& job,
                         int64_t timeout_ms = kDefaultTimeoutMs);
  // Waits up to request.wait_ms() for output past request.offset().
  absl::StatusOr<proto::JobLogs> GetJobLogs(
      const proto::JobLogsRequest& request,
      int64_t timeout_ms = kDefaultTimeoutMs);
  // An agent's report of a job it runs.
  void JobEvent(const proto::JobEvent& event, Callback<proto::Empty> done,
                int64_t timeout_ms = kDefaultTimeoutMs);

  // Task events (common/task_event_record.h), logs, objects, gangs, RPC stats.
  void ReportTaskEvents(const proto::TaskEventBatch& batch,
                        Callback<proto::Empty> done,
                        int64_t timeout_ms = kDefaultTimeoutMs);
  // The same, already serialized.
  void ReportTaskEvents(std::string batch, Callback<proto::Empty> done,
                        int64_t timeout_ms = kDefaultTimeoutMs);
  absl::StatusOr<proto::TaskList> ListTasks(
      const proto::ListTasksRequest& request,
      int64_t timeout_ms = kDefaultTimeoutMs);
  absl::StatusOr<proto::LogList> ListLogs(
      const proto::ListLogsRequest& request,
      int64_t timeout_ms = kDefaultTimeoutMs);
  // Waits request.wait_ms longer than timeout_ms.
  absl::StatusOr<proto::LogChunk> ReadLog(
      const proto::ReadLogRequest& request,
      int64_t timeout_ms = kDefaultTimeoutMs);
  absl::StatusOr<proto::ObjectList> ListObjects(
      const proto::ListObjectsRequest& request,
      int64_t timeout_ms = kDefaultTimeoutMs);
  absl::Status GangUpdate(const proto::GangInfo& gang,
                          int64_t timeout_ms = kDefaultTimeoutMs);
  absl::StatusOr<proto::GangList> ListGangs(
      int64_t timeout_ms = kDefaultTimeoutMs);
  absl::StatusOr<proto::ServerStats> ServerStats(
      int64_t timeout_ms = kDefaultTimeoutMs);

 private:
  template <typename Reply>
  void Call(proto::Method method, const google::protobuf::MessageLite& request,
            Callback<Reply> done, int64_t timeout_ms);
  template <typename Reply>
  absl::StatusOr<Reply> CallAndWait(
      proto::Method method, const google::protobuf::MessageLite& request,
      int64_t timeout_ms);

  EventLoop* const loop_;
  const std::string address_;
  std::atomic<int64_t> outage_wait_ms_{0};
  // Null once closed. Made on any thread (it connects on first use), used
  // and destroyed on the loop.
  std::unique_ptr<Channel> channel_;
};

// The check of common/version.h: OK when the version the head recorded is
// `mine`, else FailedPrecondition saying both (`who` names the joining
// process: "this driver", "this node"); or the error of the read. Blocking.
absl::Status CheckClusterVersion(
    HeadClient& head, const std::string& mine, const std::string& who,
    int64_t timeout_ms = HeadClient::kDefaultTimeoutMs);

}  // namespace shoal::rpc

#endif  // SHOAL_HEAD_CLIENT_HEAD_CLIENT_H_
